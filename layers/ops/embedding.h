// Embedding's dispatch: i32 ids on either backend; the ids kept in `state` for the backward.
// Private to the library.
#pragma once

#include <memory>

#include "../../core/tensor.h"
#include "../layer.h"

namespace ember::detail {

// The table's rows for the ids: (..., C). check_ids: on a GPU, wait for the device to report an id
// outside the table (layers/cuda/embedding.h); the CPU always checks.
const Tensor& embedding_forward(std::unique_ptr<OpState>& state, const Tensor& table, const Tensor& ids,
                                bool check_ids = true);
// After a forward: dtable written (=).
void embedding_backward(std::unique_ptr<OpState>& state, const Tensor& dy, Tensor& dtable);

}  // namespace ember::detail
