// PlanCache: cuDNN descriptors and algorithm choices made once per shape and kept for the
// process (the GPU Conv2D and MaxPool2D). Thread-safe; never destroyed (plans may be used by
// tensors freed during exit), so callers hold it through a leaked pointer.
#pragma once

#include <map>
#include <memory>
#include <mutex>

namespace ember::cuda {

template <typename Key, typename Plan>
class PlanCache {
 public:
  // The plan for `key`, made by make() (a std::unique_ptr<Plan>) the first time it is asked
  // for; a make() that throws leaves nothing behind, so the next call tries again.
  template <typename Make>
  Plan& get(const Key& key, Make&& make) {
    std::lock_guard lock(mu_);
    auto it = plans_.find(key);
    if (it != plans_.end()) return *it->second;
    return *plans_.emplace(key, make()).first->second;
  }

 private:
  std::mutex mu_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace ember::cuda
