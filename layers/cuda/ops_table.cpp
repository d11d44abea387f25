// The layers' op table of the CUDA module (layers/cuda_ops.h): each entry finds the context of
// its tensors' device and calls the op.
#include "../../core/cuda/check.h"
#include "../../core/cuda/context.h"
#include "../cuda_ops.h"
#include "attention.h"
#include "augment.h"
#include "avgpool2d.h"
#include "batchnorm.h"
#include "conv2d.h"
#include "dense.h"
#include "dropout.h"
#include "elementwise.h"
#include "embedding.h"
#include "layernorm.h"
#include "losses.h"
#include "maxpool2d.h"
#include "pointwise.h"
#include "relu.h"
#include "softmax.h"
#include "softmax_xent.h"

namespace ember::cuda {

const ::ember::detail::LayerCudaOps* layer_ops_table() {
  static const ::ember::detail::LayerCudaOps table = [] {
    ::ember::detail::LayerCudaOps a{};
    a.conv2d_forward = [](const Conv2dShape& g, const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y,
                          ::ember::detail::GpuPlanSlot& slot,
                          bool bf16) { conv2d_forward(context_of(x), g, x, w, b, y, slot, bf16); };
    a.conv2d_backward = [](const Conv2dShape& g, const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& dy,
                           Tensor* dx, Tensor& dw, Tensor& db, bool premasked, ::ember::detail::GpuPlanSlot& slot,
                           bool bf16) {
      conv2d_backward(context_of(x), g, x, w, y, dy, dx, dw, db, premasked, slot, bf16);
    };
    a.conv2d_kernel_info = [](int device, const Conv2dShape& g, bool bf16) {
      return conv2d_kernel_info(context(device), g, bf16);
    };
    using ::ember::detail::GpuPlanSlot;
    a.maxpool2d_forward = [](const Pool2dShape& g, const Tensor& x, Tensor& y, Tensor* indices, GpuPlanSlot& slot) {
      maxpool2d_forward(context_of(x), g, x, y, indices, slot);
    };
    a.maxpool2d_backward = [](const Pool2dShape& g, const Tensor& x, const Tensor& y, const Tensor& dy,
                              const Tensor* indices, Tensor& dx, bool relu_input, GpuPlanSlot& slot) {
      maxpool2d_backward(context_of(x), g, x, y, dy, indices, dx, relu_input, slot);
    };
    a.dense_forward = [](const Tensor& x, const Tensor& w, const Tensor& b, bool relu, Tensor& y, GpuPlanSlot& slot,
                         bool bf16) { dense_forward(context_of(x), x, w, b, relu, y, &slot, bf16); };
    a.dense_backward = [](const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& dy, bool relu, Tensor& dz,
                          Tensor* dx, Tensor& dw, Tensor& db, GpuPlanSlot& slot,
                          bool bf16) { dense_backward(context_of(x), x, w, y, dy, relu, dz, dx, dw, db, &slot, bf16); };
    a.matmul = [](const Tensor& x, const Tensor& w, Tensor& y) { matmul(context_of(x), x, w, y); };
    a.relu_forward = [](const Tensor& x, Tensor& y) { relu_forward(context_of(x), x, y); };
    a.relu_backward = [](const Tensor& y, const Tensor& dy, Tensor& dx) { relu_backward(context_of(y), y, dy, dx); };
    a.softmax_xent_backward = [](const Tensor& p, const Tensor& y, Tensor& d, int64_t mean_rows) {
      softmax_xent_backward(context_of(p), p, y, d, mean_rows);
    };
    a.count_correct = [](const Tensor& z, const Tensor& y) { return count_correct(context_of(z), z, y); };
    a.softmax_xent_accumulate = [](const Tensor& z, const Tensor& y, Tensor& p, Tensor& sums, int64_t positions) {
      softmax_xent_accumulate(context_of(z), z, y, p, sums, positions);
    };
    a.softmax_xent_accumulate_backward = [](const Tensor& z, const Tensor& y, Tensor& p, Tensor& sums, Tensor& d,
                                            int64_t mean_rows, int64_t positions) {
      softmax_xent_accumulate_backward(context_of(z), z, y, p, sums, d, mean_rows, positions);
    };
    using ::ember::detail::DropoutParams;
    using ::ember::detail::Pointwise;
    a.pointwise_forward = [](Pointwise f, float alpha, const Tensor& x, Tensor& y) {
      pointwise_forward(context_of(x), f, alpha, x, y);
    };
    a.pointwise_backward = [](Pointwise f, float alpha, const Tensor& x, const Tensor& y, const Tensor& dy,
                              Tensor& dx) { pointwise_backward(context_of(x), f, alpha, x, y, dy, dx); };
    a.softmax_forward = [](const Tensor& x, Tensor& y) { softmax_forward(context_of(x), x, y); };
    a.softmax_backward = [](const Tensor& y, const Tensor& dy, Tensor& dx) {
      softmax_backward(context_of(y), y, dy, dx);
    };
    a.dropout_forward = [](const DropoutParams& p, Tensor& counter, const Tensor& x, Tensor& y, Tensor& mask,
                           bool advance) { dropout_forward(context_of(x), p, counter, x, y, mask, advance); };
    a.dropout_advance = [](Tensor& counter) { dropout_advance(context_of(counter), counter); };
    a.augment_forward = [](const ::ember::detail::AugmentSpec& s, Tensor* counter, Tensor* drawn, const Tensor& x,
                           Tensor& y, int64_t n, int64_t c,
                           bool advance) { augment_forward(context_of(x), s, counter, drawn, x, y, n, c, advance); };
    a.augment_backward = [](const ::ember::detail::AugmentSpec& s, const Tensor* drawn, const Tensor& dy, Tensor& dx,
                            int64_t n, int64_t c) { augment_backward(context_of(dy), s, drawn, dy, dx, n, c); };
    a.dropout_backward = [](float scale, const Tensor& mask, const Tensor& dy, Tensor& dx) {
      dropout_backward(context_of(dy), scale, mask, dy, dx);
    };
    a.batchnorm_forward_training = [](const Tensor& x, const Tensor& gamma, const Tensor& beta, float factor, float eps,
                                      Tensor& y, Tensor& running_mean, Tensor& running_var, Tensor& save_mean,
                                      Tensor& save_invstd, GpuPlanSlot& slot) {
      batchnorm_forward_training(context_of(x), x, gamma, beta, factor, eps, y, running_mean, running_var, save_mean,
                                 save_invstd, slot);
    };
    a.batchnorm_forward_inference = [](const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                       const Tensor& running_mean, const Tensor& running_var, float eps, Tensor& y,
                                       GpuPlanSlot& slot) {
      batchnorm_forward_inference(context_of(x), x, gamma, beta, running_mean, running_var, eps, y, slot);
    };
    a.batchnorm_backward = [](const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& save_mean,
                              const Tensor& save_invstd, float eps, Tensor& dx, Tensor& dgamma, Tensor& dbeta,
                              GpuPlanSlot& slot) {
      batchnorm_backward(context_of(x), x, dy, gamma, save_mean, save_invstd, eps, dx, dgamma, dbeta, slot);
    };
    a.layernorm_forward = [](const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, Tensor& y,
                             Tensor& mean, Tensor& invstd) {
      layernorm_forward(context_of(x), x, gamma, beta, eps, y, mean, invstd);
    };
    a.layernorm_backward = [](const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean,
                              const Tensor& invstd, Tensor* dx, Tensor& dgamma, Tensor& dbeta, Tensor& scratch) {
      layernorm_backward(context_of(x), x, dy, gamma, mean, invstd, dx, dgamma, dbeta, scratch);
    };
    a.attention_scores = [](const ::ember::detail::AttentionShape& g, const Tensor& qkv, Tensor& probs) {
      attention_scores(context_of(qkv), g, qkv, probs);
    };
    a.attention_values = [](const ::ember::detail::AttentionShape& g, const Tensor& probs, const Tensor& qkv,
                            Tensor& o) { attention_values(context_of(qkv), g, probs, qkv, o); };
    a.attention_backward_values = [](const ::ember::detail::AttentionShape& g, const Tensor& qkv, const Tensor& probs,
                                     const Tensor& dout, Tensor& dqkv, Tensor& dprobs) {
      attention_backward_values(context_of(qkv), g, qkv, probs, dout, dqkv, dprobs);
    };
    a.attention_backward_scores = [](const ::ember::detail::AttentionShape& g, const Tensor& qkv, const Tensor& probs,
                                     Tensor& dprobs, Tensor& dqkv) {
      attention_backward_scores(context_of(qkv), g, qkv, probs, dprobs, dqkv);
    };
    a.embedding_forward = [](const Tensor& ids, const Tensor& rows, Tensor& y, bool check_ids) {
      embedding_forward(context_of(ids), ids, rows, y, check_ids);
    };
    a.embedding_backward = [](const Tensor& ids, const Tensor& dy, Tensor& dtable, Tensor& scratch) {
      embedding_backward(context_of(ids), ids, dy, dtable, scratch);
    };
    a.avgpool2d_forward = [](const Pool2dShape& g, const Tensor& x, Tensor& y) {
      avgpool2d_forward(context_of(x), g, x, y);
    };
    a.avgpool2d_backward = [](const Pool2dShape& g, const Tensor& dy, Tensor& dx) {
      avgpool2d_backward(context_of(dy), g, dy, dx);
    };
    a.binary = [](::ember::detail::BinaryOp op, const Tensor& x, const Tensor& y, Tensor& z) {
      binary(context_of(x), op, x, y, z);
    };
    a.scale = [](float alpha, const Tensor& x, Tensor& y) { scale(context_of(x), alpha, x, y); };
    a.maximum_grad = [](const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& claimed, Tensor& dx) {
      maximum_grad(context_of(x), x, y, dy, claimed, dx);
    };
    a.copy_columns = [](const Tensor& src, int64_t ss, int64_t so, Tensor& dst, int64_t ds, int64_t dof, int64_t rows,
                        int64_t cols) { copy_columns(context_of(src), src, ss, so, dst, ds, dof, rows, cols); };
    using ::ember::detail::MetricKind;
    using ::ember::detail::PointLoss;
    a.point_loss_accumulate = [](PointLoss f, float param, const Tensor& z, const Tensor& t, Tensor& sums) {
      point_loss_accumulate(context_of(z), f, param, z, t, sums);
    };
    a.point_loss_backward = [](PointLoss f, float param, const Tensor& z, const Tensor& t, Tensor& dz,
                               int64_t mean_rows) {
      point_loss_backward(context_of(z), f, param, z, t, dz, mean_rows);
    };
    a.categorical_xent_accumulate = [](float s, const Tensor& z, const Tensor& t, Tensor& p, Tensor& sums) {
      categorical_xent_accumulate(context_of(z), s, z, t, p, sums);
    };
    a.categorical_xent_backward = [](float s, const Tensor& p, const Tensor& t, Tensor& dz, int64_t mean_rows) {
      categorical_xent_backward(context_of(p), s, p, t, dz, mean_rows);
    };
    a.metric_accumulate = [](MetricKind m, float param, const Tensor& z, const Tensor& t, Tensor& sums, int64_t slot) {
      metric_accumulate(context_of(z), m, param, z, t, sums, slot);
    };
    return a;
  }();
  return &table;
}

}  // namespace ember::cuda
