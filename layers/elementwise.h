// The elementwise ops of the merge layers and of the model engine's gradient sums, as one small
// set every backend implements (layers/cpu/elementwise.h, layers/cuda/elementwise.h, dispatched by
// layers/ops/elementwise.h). Private to the library.
#pragma once

namespace ember::detail {

enum class BinaryOp { Add, Subtract, Multiply, Maximum };

}  // namespace ember::detail
