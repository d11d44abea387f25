// The batch gather on the CPU: the twin of data/cuda/gather.h.
#pragma once

#include <cstdint>
#include <span>

#include "../../core/tensor.h"

namespace ember::cpu {

// x[b] = features[indices[b]] * scale (u8 or f32 features, f32 x; i32 features: ids copied as they
// are into i32 x, scale 1) and y[b] = targets[indices[b]] (i32 or f32 targets, y of their dtype) for
// every b. features (N, ...), targets (N, ...); x and
// y allocated by the caller, B = indices.size() rows. ArgumentError names an index outside [0, N).
// Undefined targets: x alone (y untouched).
void gather_batch(const Tensor& features, const Tensor& targets, float scale, std::span<const int64_t> indices,
                  Tensor& x, Tensor& y);

}  // namespace ember::cpu
