// PlanCache: cuDNN descriptors and algorithm choices made once per shape and kept for the
// process (the GPU Conv2D, MaxPool2D and BatchNormalization). Thread-safe; never destroyed (plans
// may be used by tensors freed during exit), so callers hold it through a leaked pointer. A key
// is an array of integers (shape, device, settings); an op that passes its GpuPlanSlot finds the
// plan there on every later call with the same key: no lock, no map lookup.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "../cuda_ops.h"

namespace ember::cuda {

template <size_t N, typename Plan>
class PlanCache {
  static_assert(N <= ::ember::detail::GpuPlanSlot::kMaxKey, "a plan key longer than a GpuPlanSlot holds");

 public:
  using Key = std::array<int64_t, N>;

  // The plan for `key`, made by make() (a std::unique_ptr<Plan>) the first time it is asked
  // for; a make() that throws leaves nothing behind, so the next call tries again.
  template <typename Make>
  Plan& get(const Key& key, Make&& make) {
    std::lock_guard lock(mu_);
    auto it = plans_.find(key);
    if (it != plans_.end()) return *it->second;
    return *plans_.emplace(key, make()).first->second;
  }

  // The same through the op's slot: the slot's plan when it was made by this cache for this key,
  // else get() (and the slot remembers it).
  template <typename Make>
  Plan& get(::ember::detail::GpuPlanSlot& slot, const Key& key, Make&& make) {
    if (Plan* p = in_slot(slot, key)) return *p;
    Plan& p = get(key, std::forward<Make>(make));
    slot.cache = this;
    slot.plan = &p;
    std::copy(key.begin(), key.end(), slot.key.begin());
    return p;
  }

  // The slot's plan when this cache made it for `key`, else null (makes nothing: what a call
  // inside a CUDA graph capture may use).
  Plan* in_slot(const ::ember::detail::GpuPlanSlot& slot, const Key& key) const {
    if (slot.cache == this && slot.plan && std::equal(key.begin(), key.end(), slot.key.begin()))
      return static_cast<Plan*>(slot.plan);
    return nullptr;
  }

 private:
  std::mutex mu_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace ember::cuda
