// The batch gather on the CPU: the twin of data/cuda/gather.h.
#pragma once

#include <cstdint>
#include <span>

#include "../../core/tensor.h"

namespace ember::cpu {

// x[b] = images[indices[b]] / 255 and y[b] = labels[indices[b]] for every b. images u8 (N, ...),
// labels i32 (N); x f32 (B, ...) and y i32 (B) allocated by the caller, B = indices.size().
// ArgumentError names an index outside [0, N).
void gather_batch(const Tensor& images, const Tensor& labels, std::span<const int64_t> indices, Tensor& x, Tensor& y);

}  // namespace ember::cpu
