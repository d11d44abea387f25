// Printing of op geometries (used in error messages and --log-device-placement).
#include "op_shapes.h"

namespace ember {

std::string Conv2dShape::str() const {
  auto s_ = [](int64_t v) { return std::to_string(v); };
  return "conv N" + s_(n) + " C" + s_(c) + " " + s_(h) + "x" + s_(w) + " -> K" + s_(k) + " " + s_(p) + "x" + s_(q) +
         " window " + s_(r) + "x" + s_(s) + (relu ? " +relu" : "");
}

std::string Pool2dShape::str() const {
  auto s_ = [](int64_t v) { return std::to_string(v); };
  return "pool N" + s_(n) + " C" + s_(c) + " " + s_(h) + "x" + s_(w) + " -> " + s_(p) + "x" + s_(q) + " window " + s_(r) +
         "x" + s_(s);
}

}  // namespace ember
