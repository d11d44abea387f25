// Activation names, and the elementwise op behind each activation a layer applies to its output.
#include "activation.h"

namespace ember {

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::None:
      return "linear";
    case Activation::ReLU:
      return "relu";
    case Activation::Sigmoid:
      return "sigmoid";
    case Activation::Tanh:
      return "tanh";
    case Activation::GELU:
      return "gelu";
    case Activation::GELUTanh:
      return "gelu_tanh";
  }
  return "linear";
}

namespace detail {

std::optional<Pointwise> pointwise_of(Activation a) {
  switch (a) {
    case Activation::Sigmoid:
      return Pointwise::Sigmoid;
    case Activation::Tanh:
      return Pointwise::Tanh;
    case Activation::GELU:
      return Pointwise::Gelu;
    case Activation::GELUTanh:
      return Pointwise::GeluTanh;
    case Activation::None:
    case Activation::ReLU:
      return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace detail

}  // namespace ember
