// The dispatches' view of a layer's opaque backend state (detail::OpState in layers/layer.h).
// Private to the library.
#pragma once

#include <memory>

#include "../layer.h"

namespace ember::detail {

// The state of type T in `slot`, made fresh when the slot is empty or holds another backend's
// (the model moved between devices): a backend never reads scratch the other one left.
template <class T>
T& state_as(std::unique_ptr<OpState>& slot) {
  if (auto* s = dynamic_cast<T*>(slot.get())) return *s;
  auto fresh = std::make_unique<T>();
  T& ref = *fresh;
  slot = std::move(fresh);
  return ref;
}

}  // namespace ember::detail
