// Choosing a cuDNN convolution algorithm from what cudnnGet*Algorithm_v7 (or cudnnFind*)
// returned: the list is sorted by expected speed but also holds entries that cannot run
// (status not SUCCESS), that need more workspace than can be given, or (with deterministic mode)
// that sum with atomics. Header-only so that the rule is tested without a GPU.
#pragma once

#include <cudnn.h>

#include <cstddef>
#include <optional>

namespace ember::cuda {

// The first (fastest) entry that ran successfully, fits `max_workspace` bytes and, when
// `deterministic`, is deterministic; nullopt when none does (the caller names the shape).
template <class Perf>
std::optional<Perf> choose_algo(const Perf* perf, int found, bool deterministic, size_t max_workspace) {
  for (int i = 0; i < found; ++i) {
    const Perf& p = perf[i];
    if (p.status != CUDNN_STATUS_SUCCESS || p.memory > max_workspace) continue;
    if (deterministic && p.determinism != CUDNN_DETERMINISTIC) continue;
    return p;
  }
  return std::nullopt;
}

}  // namespace ember::cuda
