// The batch gather of a device-resident dataset (DataLoader with a GPU device): the same
// result as Dataset::gather on the CPU, built on the device from the epoch's sample order, so
// a training step copies nothing from the host.
#pragma once

#include <cstdint>

#include "../../core/cuda/context.h"
#include "../../core/tensor.h"

namespace ember::cuda {

// x[b] = images[order[offset + b]] / 255 (f32, row-major), y[b] = labels[order[offset + b]],
// for b in [0, count). images u8 (N, ...), labels i32 (N), order i32 (M) with every entry in
// [0, N) (the caller checks, once per epoch), all on the context's device.
void gather_batch(Context& ctx, const Tensor& images, const Tensor& labels, const Tensor& order, int64_t offset,
                  int64_t count, Tensor& x, Tensor& y);

}  // namespace ember::cuda
