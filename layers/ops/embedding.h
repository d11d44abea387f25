// Embedding's dispatch: i32 ids on either backend; the ids kept in `state` for the backward.
// Private to the library.
#pragma once

#include <memory>

#include "../../core/tensor.h"
#include "../layer.h"

namespace ember::detail {

// The table's rows for the ids: (..., C).
const Tensor& embedding_forward(std::unique_ptr<OpState>& state, const Tensor& table, const Tensor& ids);
// After a forward: dtable written (=).
void embedding_backward(std::unique_ptr<OpState>& state, const Tensor& dy, Tensor& dtable);

}  // namespace ember::detail
