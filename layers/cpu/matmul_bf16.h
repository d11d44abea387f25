// A bf16 matrix product with fp32 accumulation and an fp32 result, on oneDNN's matmul primitive
// (AMX-BF16 where the CPU has it, else AVX512-BF16): the mixed_bf16 policy's GEMM (Dense and its
// gradients). Not in 16-row blocks as the fp32 sgemm (core/cpu/gemm.h): a row's rounding may depend
// on m and on the thread count.
#pragma once

#include <cstdint>
#include <string>

#include "bf16.h"

namespace ember::cpu {

// C (m x n, row-major, f32) = op(A) op(B) (+ bias[j] on every row, then max(., 0) with relu), written
// (=), or with `accumulate` added to C (no bias or relu then). A is stored row-major as (m x k), or
// (k x m) with trans_a; B as (k x n), or (n x k) with trans_b.
void matmul_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const bf16* a, const bf16* b, float* c,
                 const float* bias = nullptr, bool relu = false, bool accumulate = false);

// The oneDNN implementation it runs for this shape ("brg:avx512_core_amx_bf16").
std::string matmul_bf16_kernel_info(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k);

}  // namespace ember::cpu
