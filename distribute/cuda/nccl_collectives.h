// NCCL communicators inside the CUDA module (private): RAII owners, grouped collectives queued
// on each device's context stream, and bounded waits. libember reaches them through the
// module's "nccl" table (distribute/nccl_ops.h) and wraps them as distribute/nccl_communicator.h.
#pragma once

#include "../nccl_ops.h"

namespace ember::cuda {

// The NCCL table; null in a CUDA build without NCCL.
const ::ember::detail::NcclOps* nccl_ops_table();

}  // namespace ember::cuda
