// Activation choices shared by the layers and their backends (padding and sizes: geometry.h).
#pragma once

#include "geometry.h"

namespace ember {

enum class Activation { None, ReLU };

const char* activation_name(Activation a);

}  // namespace ember
