// BatchNormalization on cuDNN's batch-norm calls (forward training, forward inference,
// backward), descriptors per shape, cached. cuDNN's running variance already carries Bessel's
// correction and its exponential average factor is the CPU contract's `factor`, so its results
// are the CPU twin's up to rounding.
#include "batchnorm.h"

#include <memory>

#include "../../core/cuda/check.h"
#include "cudnn_desc.h"
#include "plan_cache.h"

namespace ember::cuda {

namespace {
struct Plan {
  TensorDesc x;   // x, y, dy, dx
  TensorDesc bn;  // the (C,) tensors, as cuDNN derives them from x
  cudnnBatchNormMode_t mode = CUDNN_BATCHNORM_SPATIAL;
};

int i32(int64_t v) { return static_cast<int>(v); }

// x's (N, C, H, W) as cuDNN sees it: a 2-D (N, F) input is (N, F, 1, 1), normalised per feature.
struct BnShape {
  int64_t n = 0, c = 0, h = 1, w = 1;
  bool nhwc = false;
  bool per_activation = false;
};

std::unique_ptr<Plan> make_plan(const BnShape& s) {
  auto p = std::make_unique<Plan>();
  p->mode = s.per_activation ? CUDNN_BATCHNORM_PER_ACTIVATION : CUDNN_BATCHNORM_SPATIAL;
  p->x = nchw_desc(i32(s.n), i32(s.c), i32(s.h), i32(s.w), s.nhwc);
  EMBER_CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(p->bn, p->x, p->mode));
  return p;
}

// Found through the op's slot (plan_cache.h): no lock or map lookup in the steady state.
Plan& plan_for(const BnShape& s, ::ember::detail::GpuPlanSlot& slot) {
  static auto* cache = new PlanCache<6, Plan>();
  const PlanCache<6, Plan>::Key key{s.n, s.c, s.h, s.w, s.nhwc, s.per_activation};
  return cache->get(slot, key, [&] { return make_plan(s); });
}

// x's shape for cuDNN, after checking that x is f32 (N, C, H, W) NCHW/NHWC or (N, F) row-major
// on the context's device.
BnShape bn_shape(const Context& ctx, const Tensor& x) {
  const bool rank_ok = (x.rank() == 4) || (x.rank() == 2 && x.layout() == Layout::RowMajor);
  EMBER_CHECK(rank_ok && x.dtype() == DType::F32 && x.device() == Device::cuda(ctx.device()), ShapeError,
              "batchnorm (cuda): input must be an f32 (N, C, H, W) NCHW/NHWC or row-major (N, F) tensor on cuda:" +
                  std::to_string(ctx.device()) + ", got " + x.str());
  BnShape s;
  s.n = x.dim(0);
  s.c = x.dim(1);
  if (x.rank() == 4) {
    s.h = x.dim(2);
    s.w = x.dim(3);
    s.nhwc = x.layout() == Layout::NHWC;
  } else {
    s.per_activation = true;
  }
  return s;
}

void check_like_x(const Tensor& t, const Tensor& x, const char* what) {
  EMBER_CHECK(t.shape() == x.shape() && t.layout() == x.layout() && t.dtype() == DType::F32 && t.device() == x.device(),
              ShapeError, std::string("batchnorm (cuda): ") + what + " must be like " + x.str() + ", got " + t.str());
}

void check_channels(const Tensor& t, const Tensor& x, const char* what) {
  EMBER_CHECK(t.shape() == Shape{x.dim(1)} && t.dtype() == DType::F32 && t.device() == x.device(), ShapeError,
              std::string("batchnorm (cuda): ") + what + " must be f32 (" + std::to_string(x.dim(1)) + ",) on " +
                  x.device().str() + ", got " + t.str());
}
}  // namespace

void batchnorm_forward_training(Context& ctx, const Tensor& x, const Tensor& gamma, const Tensor& beta, float factor,
                                float eps, Tensor& y, Tensor& running_mean, Tensor& running_var, Tensor& save_mean,
                                Tensor& save_invstd, ::ember::detail::GpuPlanSlot& slot) {
  const BnShape s = bn_shape(ctx, x);
  check_like_x(y, x, "output");
  check_channels(gamma, x, "gamma");
  check_channels(beta, x, "beta");
  check_channels(running_mean, x, "moving mean");
  check_channels(running_var, x, "moving variance");
  check_channels(save_mean, x, "saved mean");
  check_channels(save_invstd, x, "saved inverse deviation");
  if (x.numel() == 0) return;
  Plan& p = plan_for(s, slot);
  const float one = 1.0f, zero = 0.0f;
  EMBER_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
      ctx.dnn(), p.mode, &one, &zero, p.x, x.raw(), p.x, y.raw(), p.bn, gamma.raw(), beta.raw(),
      static_cast<double>(factor), running_mean.raw(), running_var.raw(), static_cast<double>(eps), save_mean.raw(),
      save_invstd.raw()));
}

void batchnorm_forward_inference(Context& ctx, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                 const Tensor& running_mean, const Tensor& running_var, float eps, Tensor& y,
                                 ::ember::detail::GpuPlanSlot& slot) {
  const BnShape s = bn_shape(ctx, x);
  check_like_x(y, x, "output");
  check_channels(gamma, x, "gamma");
  check_channels(beta, x, "beta");
  check_channels(running_mean, x, "moving mean");
  check_channels(running_var, x, "moving variance");
  if (x.numel() == 0) return;
  Plan& p = plan_for(s, slot);
  const float one = 1.0f, zero = 0.0f;
  EMBER_CUDNN_CHECK(cudnnBatchNormalizationForwardInference(ctx.dnn(), p.mode, &one, &zero, p.x, x.raw(), p.x, y.raw(),
                                                            p.bn, gamma.raw(), beta.raw(), running_mean.raw(),
                                                            running_var.raw(), static_cast<double>(eps)));
}

void batchnorm_backward(Context& ctx, const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& save_mean,
                        const Tensor& save_invstd, float eps, Tensor& dx, Tensor& dgamma, Tensor& dbeta,
                        ::ember::detail::GpuPlanSlot& slot) {
  const BnShape s = bn_shape(ctx, x);
  check_like_x(dy, x, "output gradient");
  check_like_x(dx, x, "input gradient");
  check_channels(gamma, x, "gamma");
  check_channels(save_mean, x, "saved mean");
  check_channels(save_invstd, x, "saved inverse deviation");
  check_channels(dgamma, x, "gamma gradient");
  check_channels(dbeta, x, "beta gradient");
  if (x.numel() == 0) {  // sums over no rows: still written (=)
    EMBER_CUDA_CHECK(cudaMemsetAsync(dgamma.raw(), 0, dgamma.nbytes(), ctx.stream()));
    EMBER_CUDA_CHECK(cudaMemsetAsync(dbeta.raw(), 0, dbeta.nbytes(), ctx.stream()));
    return;
  }
  Plan& p = plan_for(s, slot);
  // Beta factors 0: dx, dgamma and dbeta are written (=), as the CPU contract says.
  const float one = 1.0f, zero = 0.0f;
  EMBER_CUDNN_CHECK(cudnnBatchNormalizationBackward(
      ctx.dnn(), p.mode, &one, &zero, &one, &zero, p.x, x.raw(), p.x, dy.raw(), p.x, dx.raw(), p.bn, gamma.raw(),
      dgamma.raw(), dbeta.raw(), static_cast<double>(eps), save_mean.raw(), save_invstd.raw()));
}

}  // namespace ember::cuda
