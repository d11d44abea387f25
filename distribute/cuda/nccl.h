// NCCL communicators inside the CUDA module (private): RAII owners, grouped collectives queued
// on each device's context stream, and bounded waits. libember reaches them through the module
// table (core/cuda_module.h) and wraps them as distribute/nccl_communicator.h.
#pragma once

#include "../../core/cuda_module.h"

namespace ember::cuda {

// Registers the NCCL entries of the module table (left null in a build without NCCL).
void fill_nccl_entries(::ember::detail::CudaModuleApi& api);

}  // namespace ember::cuda
