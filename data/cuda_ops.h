// The data pipeline's GPU op as the CUDA module offers it (filled in data/cuda/ops_table.cpp).
// Private to the library.
#pragma once

#include <cstdint>

#include "../core/tensor.h"

namespace ember::detail {

struct DataCudaOps {
  static constexpr const char* kOwner = "data";
  // The DataLoader's batch from a device-resident dataset (data/cuda/gather.h).
  void (*gather_batch)(const Tensor& features, const Tensor& targets, float scale, const Tensor& order,
                       int64_t shard_offset, int64_t count, int64_t advance, Tensor& x, Tensor& y);
};

// The table, or DeviceError saying why there is none.
const DataCudaOps& data_cuda_ops();

}  // namespace ember::detail
