/// @file
/// Activation choices shared by the layers and their backends (padding and sizes: geometry.h).
#pragma once

#include <optional>

#include "geometry.h"

namespace ember {

/// The activation a layer applies to its output (Conv2D, Dense), Keras' `activation=`: none, ReLU
/// (fused into the layer's own kernels), or an elementwise function run on the layer's output by
/// the same op as its layer of its own (Sigmoid, Tanh, GELU exact, GELU's tanh approximation: the
/// same bits as the layer followed by that activation layer).
enum class Activation { None, ReLU, Sigmoid, Tanh, GELU, GELUTanh };

/// Keras' name of `a`: "linear", "relu", "sigmoid", "tanh", "gelu" (x Phi(x)); "gelu_tanh" for the
/// tanh approximation (PyTorch's approximate="tanh"; Keras spells it gelu(approximate=True)).
const char* activation_name(Activation a);

namespace detail {
// The elementwise activations with a layer of their own (Sigmoid, Tanh, LeakyReLU, GELU exact and
// tanh-approximated), as their backends' ops name them.
enum class Pointwise { Sigmoid, Tanh, LeakyReLU, Gelu, GeluTanh };

// The elementwise op that applies `a` after a layer's output; none for None and ReLU (which the
// layers fuse into their own kernels).
std::optional<Pointwise> pointwise_of(Activation a);
}  // namespace detail

}  // namespace ember
