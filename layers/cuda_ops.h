// The layers' GPU ops as the CUDA module offers them (filled in layers/cuda/ops_table.cpp):
// the same contracts as their ember::cpu twins, on the stream of the tensors' device,
// activations row-major (NCHW). Layers reach them with layer_cuda_ops(). Private to the library.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "../core/tensor.h"
#include "activation.h"
#include "attention_math.h"
#include "augment_math.h"
#include "elementwise.h"
#include "geometry.h"
#include "losses_kinds.h"
#include "random_bits.h"

namespace ember::detail {

// What a GPU op keeps in its layer's op state so that a call in the steady state finds its
// cuDNN plan without a lock or a map lookup: the plan (owned by the module's process-wide cache,
// never freed), the cache it came from and the key it was made for (shape, device, settings:
// plain integers compared on every call). Dropped with the op state (an inference pass releases
// it); the next call finds the plan in the cache again.
struct GpuPlanSlot {
  static constexpr size_t kMaxKey = 24;
  const void* cache = nullptr;
  void* plan = nullptr;
  std::array<int64_t, kMaxKey> key{};
};

struct LayerCudaOps {
  static constexpr const char* kOwner = "layers";
  // bf16: the mixed_bf16 policy's path (cuDNN's and cuBLAS's bf16 calls, layers/cuda/{conv2d,dense}.h);
  // the backward takes the forward's choice.
  void (*conv2d_forward)(const Conv2dShape& g, const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y,
                         GpuPlanSlot& slot, bool bf16);
  void (*conv2d_backward)(const Conv2dShape& g, const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& dy,
                          Tensor* dx, Tensor& dw, Tensor& db, bool dy_premasked, GpuPlanSlot& slot, bool bf16);
  std::string (*conv2d_kernel_info)(int device, const Conv2dShape& g, bool bf16);
  void (*maxpool2d_forward)(const Pool2dShape& g, const Tensor& x, Tensor& y, Tensor* indices, GpuPlanSlot& slot);
  void (*maxpool2d_backward)(const Pool2dShape& g, const Tensor& x, const Tensor& y, const Tensor& dy,
                             const Tensor* indices, Tensor& dx, bool relu_input, GpuPlanSlot& slot);
  void (*dense_forward)(const Tensor& x, const Tensor& w, const Tensor& b, bool relu, Tensor& y, GpuPlanSlot& slot,
                        bool bf16);
  void (*dense_backward)(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& dy, bool relu, Tensor& dz,
                         Tensor* dx, Tensor& dw, Tensor& db, GpuPlanSlot& slot, bool bf16);
  void (*matmul)(const Tensor& a, const Tensor& b, Tensor& c);
  void (*relu_forward)(const Tensor& x, Tensor& y);
  void (*relu_backward)(const Tensor& y, const Tensor& dy, Tensor& dx);
  void (*softmax_xent_backward)(const Tensor& probs, const Tensor& labels, Tensor& dlogits, int64_t mean_rows);
  int64_t (*count_correct)(const Tensor& logits, const Tensor& labels);
  void (*softmax_xent_accumulate)(const Tensor& logits, const Tensor& labels, Tensor& probs, Tensor& sums,
                                  int64_t positions);
  // The two above in one single-block kernel where the batch is small enough (set_fused_loss);
  // the same bits as the two calls.
  void (*softmax_xent_accumulate_backward)(const Tensor& logits, const Tensor& labels, Tensor& probs, Tensor& sums,
                                           Tensor& dlogits, int64_t mean_rows, int64_t positions);
  // Pointwise, softmax, dropout, batch normalization and average-pool layers; contracts of the
  // CPU twins in layers/cpu/{pointwise,softmax,dropout,batchnorm,avgpool2d}.h, except that 4-D
  // activations may be NCHW or NHWC here.
  void (*pointwise_forward)(Pointwise f, float alpha, const Tensor& x, Tensor& y);
  void (*pointwise_backward)(Pointwise f, float alpha, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx);
  void (*softmax_forward)(const Tensor& x, Tensor& y);
  void (*softmax_backward)(const Tensor& y, const Tensor& dy, Tensor& dx);
  // advance: the forward's last block also advances the counter (fused_advance(); dropout_advance's bits).
  void (*dropout_forward)(const DropoutParams& p, Tensor& counter, const Tensor& x, Tensor& y, Tensor& mask,
                          bool advance);
  void (*dropout_advance)(Tensor& counter);
  void (*dropout_backward)(float scale, const Tensor& mask, const Tensor& dy, Tensor& dx);
  // The augmentation layers' map (layers/cpu/augment.h's contract; row-major (N, C, H, W)); the
  // forward draws from the counter (null: no draw), writes the value it drew from to `drawn` (the
  // backward's) and, with `advance`, its last block advances the counter.
  void (*augment_forward)(const AugmentSpec& s, Tensor* counter, Tensor* drawn, const Tensor& x, Tensor& y, int64_t n,
                          int64_t c, bool advance);
  void (*augment_backward)(const AugmentSpec& s, const Tensor* drawn, const Tensor& dy, Tensor& dx, int64_t n,
                           int64_t c);
  void (*batchnorm_forward_training)(const Tensor& x, const Tensor& gamma, const Tensor& beta, float factor, float eps,
                                     Tensor& y, Tensor& running_mean, Tensor& running_var, Tensor& save_mean,
                                     Tensor& save_invstd, GpuPlanSlot& slot);
  void (*batchnorm_forward_inference)(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                      const Tensor& running_mean, const Tensor& running_var, float eps, Tensor& y,
                                      GpuPlanSlot& slot);
  void (*batchnorm_backward)(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& save_mean,
                             const Tensor& save_invstd, float eps, Tensor& dx, Tensor& dgamma, Tensor& dbeta,
                             GpuPlanSlot& slot);
  // Layer normalisation over the last axis (layers/cpu/layernorm.h).
  void (*layernorm_forward)(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, Tensor& y,
                            Tensor& mean, Tensor& invstd);
  void (*layernorm_backward)(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean,
                             const Tensor& invstd, Tensor* dx, Tensor& dgamma, Tensor& dbeta, Tensor& scratch);
  // Attention between MultiHeadAttention's projections (layers/cpu/attention.h), in the phases of
  // layers/cuda/attention.h (attention dropout runs between them).
  void (*attention_scores)(const AttentionShape& g, const Tensor& qkv, Tensor& probs);
  void (*attention_values)(const AttentionShape& g, const Tensor& probs, const Tensor& qkv, Tensor& out);
  void (*attention_backward_values)(const AttentionShape& g, const Tensor& qkv, const Tensor& probs, const Tensor& dout,
                                    Tensor& dqkv, Tensor& dprobs);
  void (*attention_backward_scores)(const AttentionShape& g, const Tensor& qkv, const Tensor& probs, Tensor& dprobs,
                                    Tensor& dqkv);
  // Embedding lookups and their table gradient (layers/cpu/embedding.h).
  void (*embedding_forward)(const Tensor& ids, const Tensor& table, Tensor& y, bool check_ids);
  void (*embedding_backward)(const Tensor& ids, const Tensor& dy, Tensor& dtable, Tensor& scratch);
  void (*avgpool2d_forward)(const Pool2dShape& g, const Tensor& x, Tensor& y);
  void (*avgpool2d_backward)(const Pool2dShape& g, const Tensor& dy, Tensor& dx);
  // The merge layers' and the model engine's elementwise ops (layers/cpu/elementwise.h).
  void (*binary)(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& y);
  void (*scale)(float alpha, const Tensor& x, Tensor& y);
  void (*maximum_grad)(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& claimed, Tensor& dx);
  void (*copy_columns)(const Tensor& src, int64_t src_stride, int64_t src_offset, Tensor& dst, int64_t dst_stride,
                       int64_t dst_offset, int64_t rows, int64_t cols);
  // The losses and metrics beyond sparse softmax cross-entropy (layers/cpu/losses.h).
  void (*point_loss_accumulate)(PointLoss f, float param, const Tensor& z, const Tensor& t, Tensor& sums);
  void (*point_loss_backward)(PointLoss f, float param, const Tensor& z, const Tensor& t, Tensor& dz,
                              int64_t mean_rows);
  void (*categorical_xent_accumulate)(float smoothing, const Tensor& z, const Tensor& t, Tensor& probs, Tensor& sums);
  void (*categorical_xent_backward)(float smoothing, const Tensor& probs, const Tensor& t, Tensor& dz,
                                    int64_t mean_rows);
  void (*metric_accumulate)(MetricKind m, float param, const Tensor& z, const Tensor& t, Tensor& sums, int64_t slot);
};

// The table, or DeviceError saying why there is none (no CUDA module, ...).
const LayerCudaOps& layer_cuda_ops();

}  // namespace ember::detail
