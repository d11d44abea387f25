// The replicas' deadline (see watchdog.h).
#include "watchdog.h"

#include <cstdio>
#include <cstdlib>

namespace ember::detail {

ReplicaWatchdog::ReplicaWatchdog(std::string kind, std::chrono::milliseconds timeout,
                                 std::function<void(const std::string&)> on_expiry)
    : kind_(std::move(kind)), timeout_(timeout), on_expiry_(std::move(on_expiry)) {
  thread_ = std::thread([this] { watch(); });
}

ReplicaWatchdog::~ReplicaWatchdog() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void ReplicaWatchdog::arm(int member, Device device, int64_t step) {
  std::lock_guard lock(mu_);
  armed_ = true;
  member_ = member;
  device_ = device;
  step_ = step;
  since_ = std::chrono::steady_clock::now();
}

void ReplicaWatchdog::disarm() {
  std::lock_guard lock(mu_);
  armed_ = false;
}

void ReplicaWatchdog::watch() {
  std::unique_lock lock(mu_);
  const auto tick =
      std::min<std::chrono::milliseconds>(timeout_ / 4 + std::chrono::milliseconds(1), std::chrono::milliseconds(100));
  while (!stop_) {
    cv_.wait_for(lock, tick);
    if (!armed_ || std::chrono::steady_clock::now() - since_ <= timeout_) continue;
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%g", std::chrono::duration<double>(timeout_).count());
    const std::string msg = kind_ + ": replica " + std::to_string(member_) + " (" + device_.str() +
                            ") has not finished its part of step " + std::to_string(step_) + " within " + seconds +
                            " s (--collective-timeout): it hangs; ending the job";
    armed_ = false;
    if (on_expiry_) {
      on_expiry_(msg);
      continue;
    }
    std::fflush(stdout);
    std::fprintf(stderr, "\n%s\n", msg.c_str());
    std::fflush(stderr);
    std::_Exit(3);  // the stuck thread cannot be joined, so no destructors
  }
}

}  // namespace ember::detail
