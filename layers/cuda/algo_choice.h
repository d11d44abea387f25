// Choosing a cuDNN convolution algorithm from what cudnnGet*Algorithm_v7 (or cudnnFind*)
// returned: the list is sorted by expected speed but also holds entries that cannot run
// (status not SUCCESS), that need more workspace than can be given, that transform their inputs
// (Winograd, FFT: never taken, see sums_directly) or (with deterministic mode, which the Exact
// convolution policy implies) that sum with atomics. Header-only so that the rule is tested
// without a GPU.
#pragma once

#include <cudnn.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <optional>
#include <vector>

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

// Whether an entry may be used: it ran (or is predicted to run) successfully, sums directly, fits
// `max_workspace` bytes and, when `deterministic`, is deterministic.
template <class Perf>
bool allowed(const Perf& p, bool deterministic, size_t max_workspace) {
  if (p.status != CUDNN_STATUS_SUCCESS || p.memory > max_workspace || !sums_directly(p.algo)) return false;
  return !deterministic || p.determinism == CUDNN_DETERMINISTIC;
}

// The first (fastest) allowed entry; nullopt when none is (the caller names the shape).
template <class Perf>
std::optional<Perf> choose_algo(const Perf* perf, int found, bool deterministic, size_t max_workspace) {
  for (int i = 0; i < found; ++i)
    if (allowed(perf[i], deterministic, max_workspace)) return perf[i];
  return std::nullopt;
}

// Every allowed entry in cuDNN's order (fastest first), each algorithm once: the first is the
// choice, the others what the op falls back to when one fails at execution.
template <class Perf>
std::vector<Perf> choose_candidates(const Perf* perf, int found, bool deterministic, size_t max_workspace) {
  std::vector<Perf> out;
  for (int i = 0; i < found; ++i) {
    if (!allowed(perf[i], deterministic, max_workspace)) continue;
    if (std::none_of(out.begin(), out.end(), [&](const Perf& o) { return o.algo == perf[i].algo; }))
      out.push_back(perf[i]);
  }
  return out;
}

// The math type a convolution descriptor gets for an algorithm cuDNN listed with `listed`: FP32
// FMA math unless TF32 is allowed (core/runtime.h), and never a down-conversion of FP32 data to
// FP16 (CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: the default math instead).
inline cudnnMathType_t math_type_for(cudnnMathType_t listed, bool allow_tf32) {
  if (!allow_tf32) return CUDNN_FMA_MATH;
  return listed == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION ? CUDNN_DEFAULT_MATH : listed;
}

// Whether a convolution that failed with `s` when it ran may succeed with another algorithm:
// "not supported" (of any kind: shape, layout, shared memory, ...) or a pointer alignment the
// algorithm needs. Not an execution or internal failure: those are how cuDNN passes on a CUDA
// error (a sticky fault of an earlier kernel, an invalidated capture, a passing out-of-memory),
// which another algorithm would meet too and must not be blamed on this one; nor a bad
// parameter or an uninitialised library (Ember's bugs or the machine's).
inline bool retry_with_next(cudnnStatus_t s) {
  const int code = static_cast<int>(s);
  return (code >= 3000 && code < 4000) || s == CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER;
}

// The fall-back of a direction's `count` candidates: runs attempt(i) for the current one (`at`);
// when it fails in a way the next may not (retry_with_next), `at` moves on (for every later call
// too; on_move(i) once per move, a concurrent caller's move counted once) and the next one runs.
// Returns SUCCESS, or the status of the last one tried (the caller names what failed).
template <class Attempt, class OnMove>
cudnnStatus_t run_candidates(std::atomic<size_t>& at, size_t count, Attempt&& attempt, OnMove&& on_move) {
  for (;;) {
    size_t i = at.load(std::memory_order_acquire);
    const cudnnStatus_t status = attempt(i);
    if (status == CUDNN_STATUS_SUCCESS || !retry_with_next(status) || i + 1 >= count) return status;
    if (at.compare_exchange_strong(i, i + 1)) on_move(i + 1, status);
  }
}

}  // namespace ember::cuda
