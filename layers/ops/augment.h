// The augmentation layers' dispatch (layers/augmentation.h): one op, detail::AugmentSpec's map, on
// (N, C, H, W) batches (any layout in; row-major NCHW out), or on any tensor's memory for a rescale
// alone. Private to the library.
#pragma once

#include <memory>

#include "../../core/tensor.h"
#include "../augment_math.h"
#include "../layer.h"

namespace ember::detail {

// y = the spec's map of x. `counter` (the layer's step state; null when spec.random is false): the
// step's key is drawn from it (kept in `state` for the backward), and it advances by one.
const Tensor& augment_forward(std::unique_ptr<OpState>& state, const AugmentSpec& spec, Tensor* counter,
                              const Tensor& x);
// dx: dy moved back to the pixels it came from (scaled with rescale), zero elsewhere, under the
// last forward's draw.
const Tensor& augment_backward(std::unique_ptr<OpState>& state, const AugmentSpec& spec, const Tensor& dy);

}  // namespace ember::detail
