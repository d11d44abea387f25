/// @file
/// Activation choices shared by the layers and their backends (padding and sizes: geometry.h).
#pragma once

#include "geometry.h"

namespace ember {

/// The activation a layer fuses after its output (Conv2D, Dense): none, or ReLU.
enum class Activation { None, ReLU };

/// Keras' name of `a`: "linear" or "relu".
const char* activation_name(Activation a);

namespace detail {
// The elementwise activations with a layer of their own (Sigmoid, Tanh, LeakyReLU, GELU exact and
// tanh-approximated), as their backends' ops name them.
enum class Pointwise { Sigmoid, Tanh, LeakyReLU, Gelu, GeluTanh };
}  // namespace detail

}  // namespace ember
