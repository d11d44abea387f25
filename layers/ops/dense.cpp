// Dense dispatch.
#include "dense.h"

#include <vector>

#include "../../core/dispatch.h"
#include "../../core/error.h"
#include "../../core/runtime.h"
#include "../cpu/dense.h"
#include "../cpu/matmul_bf16.h"
#include "../cuda_ops.h"
#include "op_state.h"

namespace ember::detail {

namespace {
struct DenseState : OpState {
  Tensor x, y;
  Tensor dz;  // dy * (y > 0), when the ReLU's mask is applied here
  Tensor dx;
  Tensor dw_unused, db_unused;              // a frozen layer's parameter gradients where the backend needs them
  GpuPlanSlot forward_slot, backward_slot;  // the cuBLASLt plans under set_fused_dense (one each)
  std::vector<float> group_sums;            // the CPU weight gradient's per-group sums
  bool bf16 = false;                        // the forward ran in bf16 (the backward follows it)
  cpu::Bf16Buffers bf16_keep;
};
}  // namespace

const Tensor& dense_forward(std::unique_ptr<OpState>& state, const Tensor& x, const Tensor& w, const Tensor& b,
                            bool relu) {
  auto& s = state_as<DenseState>(state);
  s.x = x;
  ensure(s.y, Shape{x.dim(0), w.dim(0)}, DType::F32, x.device());
  s.bf16 = false;
  if (on_gpu(x)) {
    s.bf16 = gpu_precision(x.device().index) == Precision::MixedBFloat16;
    layer_cuda_ops().dense_forward(s.x, w, b, relu, s.y, s.forward_slot, s.bf16);
  } else if (cpu_precision() == Precision::MixedBFloat16) {
    s.bf16 = true;
    cpu::dense_forward_bf16(s.x, w, b, relu, s.y, s.bf16_keep);
  } else {
    cpu::dense_forward(s.x, w, b, relu, s.y);
  }
  return s.y;
}

const Tensor* dense_backward(std::unique_ptr<OpState>& state, const Tensor& w, const Tensor& dy, bool mask_relu,
                             bool want_dx, Tensor& dw, Tensor& db) {
  auto& s = state_as<DenseState>(state);
  EMBER_CHECK(s.y.defined(), Error, "dense: backward before forward");
  if (mask_relu) ensure(s.dz, dy.shape(), DType::F32, dy.device());
  Tensor* dx = nullptr;
  if (want_dx) {
    ensure(s.dx, s.x.shape(), DType::F32, s.x.device());
    dx = &s.dx;
  }
  if (!dw.defined() && !dx) return nullptr;        // frozen, and nothing before it trains
  if (!dw.defined() && (on_gpu(s.x) || s.bf16)) {  // these compute them: into scratch
    ensure(s.dw_unused, w.shape(), DType::F32, w.device());
    ensure(s.db_unused, Shape{w.dim(0)}, DType::F32, w.device());
  }
  Tensor& dw_to = dw.defined() ? dw : s.dw_unused;
  Tensor& db_to = db.defined() ? db : s.db_unused;
  if (on_gpu(s.x))
    layer_cuda_ops().dense_backward(s.x, w, s.y, dy, mask_relu, s.dz, dx, dw_to, db_to, s.backward_slot, s.bf16);
  else if (s.bf16)
    cpu::dense_backward_bf16(w, s.y, dy, mask_relu, s.dz, dx, dw_to, db_to, s.bf16_keep);
  else
    cpu::dense_backward(s.x, w, s.y, dy, mask_relu, s.dz, dx, dw, db, &s.group_sums);
  return dx;
}

std::string dense_kernel_info(Device device, int64_t batch, int64_t in, int64_t units) {
  if (device.is_cuda())
    return gpu_precision(device.index) == Precision::MixedBFloat16
               ? "cuBLAS GemmEx bf16 (fp32 accumulation) + ember kernel bias"
               : "cuBLAS sgemm + ember kernel bias";
  if (cpu_precision() == Precision::MixedBFloat16)  // as dense_forward decides
    return "oneDNN matmul " + cpu::matmul_bf16_kernel_info(false, true, batch, units, in) +
           " (bf16, fp32 accumulation) + ember bias";
  return "oneDNN sgemm + ember bias";
}

}  // namespace ember::detail
