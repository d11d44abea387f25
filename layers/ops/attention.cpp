// Attention dispatch.
#include "attention.h"

#include "../../core/dispatch.h"
#include "../../core/error.h"
#include "../cpu/attention.h"
#include "../cuda_ops.h"
#include "op_state.h"

namespace ember::detail {

namespace {
struct AttentionState : OpState {
  AttentionShape g;
  Tensor qkv, probs, out, dout_copy, dqkv, scratch;
};
}  // namespace

const Tensor& attention_forward(std::unique_ptr<OpState>& state, const AttentionShape& g, const Tensor& qkv) {
  auto& s = state_as<AttentionState>(state);
  s.g = g;
  s.qkv = qkv;
  ensure(s.probs, Shape{g.n * g.heads, g.t, g.t}, DType::F32, qkv.device());
  ensure(s.out, Shape{g.n * g.t, g.heads * g.value_dim}, DType::F32, qkv.device());
  if (on_gpu(qkv))
    layer_cuda_ops().attention_forward(g, qkv, s.probs, s.out);
  else
    cpu::attention_forward(g, qkv, s.probs, s.out);
  return s.out;
}

const Tensor& attention_backward(std::unique_ptr<OpState>& state, const Tensor& dout) {
  auto& s = state_as<AttentionState>(state);
  EMBER_CHECK(s.qkv.defined(), Error, "attention: backward before forward");
  const Tensor& g = as_layout(dout, Layout::RowMajor, s.dout_copy);
  ensure(s.dqkv, s.qkv.shape(), DType::F32, s.qkv.device());
  if (on_gpu(g))
    layer_cuda_ops().attention_backward(s.g, s.qkv, s.probs, g, s.dqkv, s.scratch);
  else
    cpu::attention_backward(s.g, s.qkv, s.probs, g, s.dqkv, s.scratch);
  return s.dqkv;
}

}  // namespace ember::detail
