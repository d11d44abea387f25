// The batch gather of a device-resident dataset (DataLoader with a GPU device): the same
// result as Dataset::gather on the CPU, built on the device from the epoch's sample order, so
// a training step copies nothing from the host.
#pragma once

#include <cstdint>

#include "../../core/cuda/context.h"
#include "../../core/tensor.h"

namespace ember::cuda {

// The batch at the epoch's cursor: with c = order[M] (the cursor, the epoch's position, kept on
// the device behind the M sample indices so that a captured step replays the next batch),
// x[b] = features[order[c + shard_offset + b]] * scale (f32, row-major; i32 features: the ids as
// they are, i32 x, scale 1) and y[b] = targets[order[c + shard_offset + b]] for b in [0, count);
// then order[M] += advance. features u8, f32 or i32 (N, ...), targets i32 or f32 (N, ...), order
// i32 (M + 1) with every index in [0, N) (the caller checks, once per epoch, and that
// c + shard_offset + count <= M: rows past M are not read). Undefined targets: x alone (y untouched), for a model's
// further inputs; undefined features: y alone (x untouched), for its further outputs.
void gather_batch(Context& ctx, const Tensor& features, const Tensor& targets, float scale, const Tensor& order,
                  int64_t shard_offset, int64_t count, int64_t advance, Tensor& x, Tensor& y);

}  // namespace ember::cuda
