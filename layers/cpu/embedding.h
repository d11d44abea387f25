// Embedding lookups on the CPU: ids i32 row-major (...) read as R positions, the table f32 (V, C),
// the output (..., C) row-major.
#pragma once

#include "../../core/tensor.h"

namespace ember::cpu {

// y[p] = table[ids[p]] for every position p. ArgumentError naming the id and its position for an
// id outside [0, V).
void embedding_forward(const Tensor& ids, const Tensor& table, Tensor& y);
// dtable (V, C), written (=): row v the sum of dy[p] over the positions p holding v, in the batch's
// sum order (layers/embedding_math.h); rows no position holds are exactly zero. scratch: i32,
// sized here (the positions sorted by id).
void embedding_backward(const Tensor& ids, const Tensor& dy, Tensor& dtable, Tensor& scratch);

}  // namespace ember::cpu
