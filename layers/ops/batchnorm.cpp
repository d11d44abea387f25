// BatchNormalization dispatch.
#include "batchnorm.h"

#include "../../core/dispatch.h"
#include "../../core/error.h"
#include "../cpu/batchnorm.h"
#include "../cuda_ops.h"
#include "op_state.h"

namespace ember::detail {

namespace {
struct BatchNormState : OpState {
  Tensor x, x_copy, y, save_mean, save_invstd, dy_copy, dx;
  Tensor zeros;          // (C,): an inference backward's mean and shift
  bool trained = false;  // the last forward was a training one
  GpuPlanSlot gpu;       // the GPU's plan, found once
};
}  // namespace

const Tensor& batchnorm_forward(std::unique_ptr<OpState>& state, const BatchNormArgs& a, const Tensor& x,
                                bool training) {
  auto& s = state_as<BatchNormState>(state);
  // The CPU's kernels run channels-last; a GPU takes NCHW or NHWC as it comes.
  s.x = on_gpu(x) || x.rank() != 4 ? x : as_layout(x, Layout::NHWC, s.x_copy);
  ensure(s.y, s.x.shape(), DType::F32, s.x.device(), s.x.layout());
  const int64_t c = s.x.dim(1);
  s.trained = training;
  if (!training) {
    if (on_gpu(x))
      layer_cuda_ops().batchnorm_forward_inference(s.x, *a.gamma, *a.beta, *a.running_mean, *a.running_var, a.eps, s.y,
                                                   s.gpu);
    else
      cpu::batchnorm_forward_inference(s.x, *a.gamma, *a.beta, *a.running_mean, *a.running_var, a.eps, s.y);
    return s.y;
  }
  // One value per channel has no variance to correct (cuDNN's M / (M - 1) would make the moving
  // variance infinite): refused on every backend, as PyTorch does.
  const int64_t m = s.x.numel() / c;
  EMBER_CHECK(m > 1, ShapeError,
              "BatchNormalization: training needs more than one value per channel, got input " + s.x.shape().str() +
                  " (a batch of one after Dense? choose a batch size that leaves no last batch of one)");
  ensure(s.save_mean, Shape{c}, DType::F32, s.x.device());
  ensure(s.save_invstd, Shape{c}, DType::F32, s.x.device());
  if (on_gpu(x))
    layer_cuda_ops().batchnorm_forward_training(s.x, *a.gamma, *a.beta, a.factor, a.eps, s.y, *a.running_mean,
                                                *a.running_var, s.save_mean, s.save_invstd, s.gpu);
  else
    cpu::batchnorm_forward_training(s.x, *a.gamma, *a.beta, a.factor, a.eps, s.y, *a.running_mean, *a.running_var,
                                    s.save_mean, s.save_invstd);
  return s.y;
}

const Tensor& batchnorm_backward(std::unique_ptr<OpState>& state, const BatchNormArgs& a, const Tensor& dy,
                                 Tensor& dgamma, Tensor& dbeta) {
  auto& s = state_as<BatchNormState>(state);
  EMBER_CHECK(s.y.defined(), Error, "batchnorm: backward before forward");
  const Tensor& g = as_layout(dy, s.x.layout(), s.dy_copy);
  ensure(s.dx, s.x.shape(), DType::F32, s.x.device(), s.x.layout());
  if (!s.trained && !dgamma.defined()) {
    // Inference mode (a frozen layer): y = gamma (x - mean) / sqrt(var + eps) + beta is affine, so
    // dx = gamma dy / sqrt(var + eps): the inference forward on dy with a zero mean and shift.
    const int64_t c = a.gamma->numel();
    if (!s.zeros.defined() || s.zeros.numel() != c || s.zeros.device() != g.device())
      s.zeros = Tensor::zeros(Shape{c}, DType::F32, g.device());
    if (on_gpu(g))
      layer_cuda_ops().batchnorm_forward_inference(g, *a.gamma, s.zeros, s.zeros, *a.running_var, a.eps, s.dx, s.gpu);
    else
      cpu::batchnorm_forward_inference(g, *a.gamma, s.zeros, s.zeros, *a.running_var, a.eps, s.dx);
    return s.dx;
  }
  EMBER_CHECK(s.trained && s.save_mean.defined(), Error,
              "batchnorm: backward needs a training forward (forward(x, training=true)) before it");
  EMBER_CHECK(dgamma.defined() && dbeta.defined(), Error,
              "batchnorm: the layer was frozen between its training forward and its backward");
  if (on_gpu(g))
    layer_cuda_ops().batchnorm_backward(s.x, g, *a.gamma, s.save_mean, s.save_invstd, a.eps, s.dx, dgamma, dbeta,
                                        s.gpu);
  else
    cpu::batchnorm_backward(s.x, g, *a.gamma, s.save_mean, s.save_invstd, s.dx, dgamma, dbeta);
  return s.dx;
}

}  // namespace ember::detail
