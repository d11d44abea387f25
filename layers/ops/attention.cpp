// Attention dispatch.
#include "attention.h"

#include "../../core/dispatch.h"
#include "../../core/error.h"
#include "../../core/runtime.h"
#include "../cpu/attention.h"
#include "../cpu/dropout.h"
#include "../cuda_ops.h"
#include "op_state.h"

namespace ember::detail {

namespace {
struct AttentionState : OpState {
  AttentionShape g;
  Tensor qkv, probs, out, dout_copy, dqkv, scratch;
  bool dropped = false;               // the last forward dropped probabilities
  cpu::AttentionDropout cpu_dropout;  // its mask's key (the CPU draws the mask again)
  float scale = 1.0f;                 // its 1 / (1 - rate)
  Tensor dropped_probs, mask;         // on a GPU: the Dropout kernel's output and mask
};
}  // namespace

const Tensor& attention_forward(std::unique_ptr<OpState>& state, const AttentionShape& g, const Tensor& qkv,
                                const AttentionDropoutStep* dropout) {
  auto& s = state_as<AttentionState>(state);
  s.g = g;
  s.qkv = qkv;
  s.dropped = dropout != nullptr;
  ensure(s.probs, Shape{g.n * g.heads, g.t, g.t}, DType::F32, qkv.device());
  ensure(s.out, Shape{g.n * g.t, g.heads * g.value_dim}, DType::F32, qkv.device());
  if (dropout) {
    EMBER_CHECK(dropout->counter && dropout->counter->device() == qkv.device(), Error,
                "attention: the dropout counter must be on " + qkv.device().str());
    s.scale = dropout->params.scale;
  }
  if (on_gpu(qkv)) {
    const auto& ops = layer_cuda_ops();
    ops.attention_scores(g, qkv, s.probs);
    const Tensor* used = &s.probs;
    if (dropout) {
      ensure(s.dropped_probs, s.probs.shape(), DType::F32, qkv.device());
      ensure(s.mask, s.probs.shape(), DType::U8, qkv.device());
      const bool fold = fused_advance();  // the Dropout kernel's last block advances the counter
      ops.dropout_forward(dropout->params, *dropout->counter, s.probs, s.dropped_probs, s.mask, fold);
      if (!fold) ops.dropout_advance(*dropout->counter);
      used = &s.dropped_probs;
    }
    ops.attention_values(g, *used, qkv, s.out);
    return s.out;
  }
  if (dropout) {
    s.cpu_dropout = {.key = step_key(dropout->params.seed, counter_value(dropout->counter->f32())),
                     .threshold = dropout->params.threshold,
                     .scale = dropout->params.scale};
    cpu::dropout_advance(*dropout->counter);
  }
  cpu::attention_forward(g, qkv, s.probs, s.out, s.scratch, dropout ? &s.cpu_dropout : nullptr);
  return s.out;
}

const Tensor& attention_backward(std::unique_ptr<OpState>& state, const Tensor& dout) {
  auto& s = state_as<AttentionState>(state);
  EMBER_CHECK(s.qkv.defined(), Error, "attention: backward before forward");
  const Tensor& g = as_layout(dout, Layout::RowMajor, s.dout_copy);
  ensure(s.dqkv, s.qkv.shape(), DType::F32, s.qkv.device());
  if (on_gpu(g)) {
    const auto& ops = layer_cuda_ops();
    ops.attention_backward_values(s.g, s.qkv, s.dropped ? s.dropped_probs : s.probs, g, s.dqkv, s.scratch);
    if (s.dropped) ops.dropout_backward(s.scale, s.mask, s.scratch, s.scratch);  // dP through the mask, in place
    ops.attention_backward_scores(s.g, s.qkv, s.probs, s.scratch, s.dqkv);
  } else {
    cpu::attention_backward(s.g, s.qkv, s.probs, g, s.dqkv, s.scratch, s.dropped ? &s.cpu_dropout : nullptr);
  }
  return s.dqkv;
}

}  // namespace ember::detail
