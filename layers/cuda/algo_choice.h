// Choosing a cuDNN convolution algorithm from what cudnnGet*Algorithm_v7 (or cudnnFind*)
// returned: the list is sorted by expected speed but also holds entries that cannot run
// (status not SUCCESS), that need more workspace than can be given, that transform their inputs
// (Winograd, FFT: never taken, see sums_directly) or (with deterministic mode, which the Exact
// convolution policy implies) that sum with atomics. Header-only so that the rule is tested
// without a GPU.
#pragma once

#include <cudnn.h>

#include <cstddef>
#include <optional>

namespace ember::cuda {

// Whether an algorithm sums the products of each output directly (GEMM, implicit GEMM; the
// backward ones with or without atomics). Winograd and FFT transform tiles of the input, so an
// output whose inputs are all zero comes out as rounding residue of its neighbours instead of
// exactly the bias: Ember's numerics promise (core/runtime.h, ConvAlgorithms) excludes them
// under both policies, as Ember cannot mask their outputs inside cuDNN.
inline bool sums_directly(cudnnConvolutionFwdAlgo_t a) {
  return a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM || a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_GEMM || a == CUDNN_CONVOLUTION_FWD_ALGO_DIRECT;
}
inline bool sums_directly(cudnnConvolutionBwdDataAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
}
inline bool sums_directly(cudnnConvolutionBwdFilterAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
}

// The first (fastest) entry that ran successfully, sums directly, fits `max_workspace` bytes
// and, when `deterministic`, is deterministic; nullopt when none does (the caller names the shape).
template <class Perf>
std::optional<Perf> choose_algo(const Perf* perf, int found, bool deterministic, size_t max_workspace) {
  for (int i = 0; i < found; ++i) {
    const Perf& p = perf[i];
    if (p.status != CUDNN_STATUS_SUCCESS || p.memory > max_workspace || !sums_directly(p.algo)) continue;
    if (deterministic && p.determinism != CUDNN_DETERMINISTIC) continue;
    return p;
  }
  return std::nullopt;
}

}  // namespace ember::cuda
