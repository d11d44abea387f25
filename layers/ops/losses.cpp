// Loss and metric dispatch.
#include "losses.h"

#include "../../core/dispatch.h"
#include "../cpu/losses.h"
#include "../cuda_ops.h"

namespace ember::detail {

namespace {
void check_mean_rows(int64_t mean_rows, const Tensor& z) {
  EMBER_CHECK(
      mean_rows >= z.dim(0) && mean_rows > 0, ArgumentError,
      "loss: the mean is over " + std::to_string(mean_rows) + " rows but " + std::to_string(z.dim(0)) + " are given");
}
}  // namespace

void point_loss_accumulate(PointLoss f, float param, const Tensor& z, const Tensor& t, Tensor& sums) {
  if (on_gpu(z))
    layer_cuda_ops().point_loss_accumulate(f, param, z, t, sums);
  else
    cpu::point_loss_accumulate(f, param, z, t, sums);
}

void point_loss_backward(PointLoss f, float param, const Tensor& z, const Tensor& t, Tensor& dz, int64_t mean_rows) {
  check_mean_rows(mean_rows, z);
  if (on_gpu(z))
    layer_cuda_ops().point_loss_backward(f, param, z, t, dz, mean_rows);
  else
    cpu::point_loss_backward(f, param, z, t, dz, mean_rows);
}

void categorical_xent_accumulate(float smoothing, const Tensor& z, const Tensor& t, Tensor& probs, Tensor& sums) {
  if (on_gpu(z))
    layer_cuda_ops().categorical_xent_accumulate(smoothing, z, t, probs, sums);
  else
    cpu::categorical_xent_accumulate(smoothing, z, t, probs, sums);
}

void categorical_xent_backward(float smoothing, const Tensor& probs, const Tensor& t, Tensor& dz, int64_t mean_rows) {
  check_mean_rows(mean_rows, probs);
  if (on_gpu(probs))
    layer_cuda_ops().categorical_xent_backward(smoothing, probs, t, dz, mean_rows);
  else
    cpu::categorical_xent_backward(smoothing, probs, t, dz, mean_rows);
}

void metric_accumulate(MetricKind m, float param, const Tensor& z, const Tensor& t, Tensor& sums, int64_t slot) {
  if (on_gpu(z))
    layer_cuda_ops().metric_accumulate(m, param, z, t, sums, slot);
  else
    cpu::metric_accumulate(m, param, z, t, sums, slot);
}

}  // namespace ember::detail
