// Small kernels of the GPU Dense layer (launchers; kernels in dense_kernels.cu).
#pragma once

#include "../../core/cuda/context.h"

namespace ember::cuda {

// y (rows, cols) += bias (cols), then max(., 0) when relu.
void bias_activation(Context& ctx, float* y, const float* bias, int rows, int cols, bool relu);
// out (cols) = sum over rows of m (rows, cols), written (=).
void column_sums(Context& ctx, const float* m, float* out, int rows, int cols);

}  // namespace ember::cuda
