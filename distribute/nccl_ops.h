// NCCL as the CUDA module offers it (filled in distribute/cuda/nccl_collectives.cpp; absent
// from a CUDA build without NCCL). Communicators are opaque handles owned by the caller (destroy).
// Collectives are queued on each buffer's device stream, one group for all the given local
// members; waits are bounded by timeout_ms and throw CollectiveError (timeout) or NcclError
// (asynchronous failure) after aborting. Private to the library (distribute/nccl_communicator.h
// is its face).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "../core/tensor.h"

namespace ember::detail {

struct NcclOps {
  static constexpr const char* kOwner = "nccl";
  void (*init_all)(const std::vector<int>& devices, std::vector<void*>* comms);
  void (*unique_id)(std::string* id);
  void* (*init_rank)(const std::string& id, int nranks, int rank, int device, int64_t timeout_ms);
  void (*destroy)(void* comm) noexcept;
  void (*abort)(void* comm) noexcept;
  void (*all_reduce_sum)(const std::vector<void*>& comms, const std::vector<Tensor*>& bufs, int64_t timeout_ms);
  void (*broadcast)(const std::vector<void*>& comms, const std::vector<Tensor*>& bufs, int root, int64_t timeout_ms);
  void (*wait)(const std::vector<void*>& comms, int64_t timeout_ms);
  double (*busy_seconds)(void* comm);  // device time of its collectives waited for so far
};

}  // namespace ember::detail
