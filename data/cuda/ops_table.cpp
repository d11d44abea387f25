// The data pipeline's op table of the CUDA module (data/cuda_ops.h).
#include "../cuda_ops.h"
#include "gather.h"

namespace ember::cuda {

const ::ember::detail::DataCudaOps* data_ops_table() {
  static const ::ember::detail::DataCudaOps table = [] {
    ::ember::detail::DataCudaOps a{};
    a.gather_batch = [](const Tensor& features, const Tensor& targets, float scale, const Tensor& order,
                        int64_t shard_offset, int64_t count, int64_t advance, Tensor& x, Tensor& y) {
      // A call for a further target has no features (undefined: on no device): the order's device.
      gather_batch(context_of(order), features, targets, scale, order, shard_offset, count, advance, x, y);
    };
    return a;
  }();
  return &table;
}

}  // namespace ember::cuda
