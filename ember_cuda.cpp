// The CUDA module's one entry point, ember_cuda_api_v1(): the core part of its table
// (core/cuda_module.h) and the op tables each folder fills in its own cuda/ folder, found by
// owner name. This is the only file that sees every folder (as ember.h is for the headers);
// scripts/check_layering.py allows it that and nothing else. Built into libember_cuda only.
#include <cstring>

#include "core/cuda_module.h"
#include "data/cuda_ops.h"
#include "distribute/nccl_ops.h"
#include "layers/cuda_ops.h"
#include "optim/cuda_ops.h"

namespace ember::cuda {
void fill_core_entries(detail::CudaModuleApi& api);      // core/cuda/memory.cpp
const ::ember::detail::LayerCudaOps* layer_ops_table();  // layers/cuda/ops_table.cpp
const ::ember::detail::OptimCudaOps* optim_ops_table();  // optim/cuda/ops_table.cpp
const ::ember::detail::DataCudaOps* data_ops_table();    // data/cuda/ops_table.cpp
const ::ember::detail::NcclOps* nccl_ops_table();        // distribute/cuda/nccl_collectives.cpp (null without NCCL)
}  // namespace ember::cuda

extern "C" __attribute__((visibility("default"))) const ember::detail::CudaModuleApi* ember_cuda_api_v1() {
  using namespace ember::detail;
  static const CudaModuleApi api = [] {
    CudaModuleApi a{};
    a.abi = kCudaModuleAbi;
    ember::cuda::fill_core_entries(a);
    a.ops = [](const char* owner) -> const void* {
      if (std::strcmp(owner, LayerCudaOps::kOwner) == 0) return ember::cuda::layer_ops_table();
      if (std::strcmp(owner, OptimCudaOps::kOwner) == 0) return ember::cuda::optim_ops_table();
      if (std::strcmp(owner, DataCudaOps::kOwner) == 0) return ember::cuda::data_ops_table();
      if (std::strcmp(owner, NcclOps::kOwner) == 0) return ember::cuda::nccl_ops_table();
      return nullptr;
    };
    return a;
  }();
  return &api;
}
