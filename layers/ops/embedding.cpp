// Embedding dispatch.
#include "embedding.h"

#include "../../core/dispatch.h"
#include "../../core/error.h"
#include "../cpu/embedding.h"
#include "../cuda_ops.h"
#include "op_state.h"

namespace ember::detail {

namespace {
struct EmbeddingState : OpState {
  Tensor ids, ids_copy, y, dy_copy, scratch;
};
}  // namespace

const Tensor& embedding_forward(std::unique_ptr<OpState>& state, const Tensor& table, const Tensor& ids,
                                bool check_ids) {
  auto& s = state_as<EmbeddingState>(state);
  s.ids = as_layout(ids, Layout::RowMajor, s.ids_copy);
  std::vector<int64_t> out(ids.shape().begin(), ids.shape().end());
  out.push_back(table.dim(1));
  ensure(s.y, Shape(out), DType::F32, ids.device());
  if (on_gpu(ids))
    layer_cuda_ops().embedding_forward(s.ids, table, s.y, check_ids);
  else
    cpu::embedding_forward(s.ids, table, s.y);
  return s.y;
}

void embedding_backward(std::unique_ptr<OpState>& state, const Tensor& dy, Tensor& dtable) {
  auto& s = state_as<EmbeddingState>(state);
  EMBER_CHECK(s.ids.defined(), Error, "embedding: backward before forward");
  const Tensor& g = as_layout(dy, Layout::RowMajor, s.dy_copy);
  if (on_gpu(g))
    layer_cuda_ops().embedding_backward(s.ids, g, dtable, s.scratch);
  else
    cpu::embedding_backward(s.ids, g, dtable, s.scratch);
}

}  // namespace ember::detail
