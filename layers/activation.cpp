// Activation names.
#include "activation.h"

namespace ember {

const char* activation_name(Activation a) { return a == Activation::ReLU ? "relu" : "linear"; }

}  // namespace ember
