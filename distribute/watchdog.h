// A deadline on the replicas' work in this process (private to distribute/). Mirrored CPU
// replicas are driven by one thread, so no collective can time out on them: a replica stuck in
// its computation would hang the job for good. The step arms the watchdog before each replica's
// part and disarms it after; a replica armed for longer than the timeout ends the process (exit
// code 3, as the MPI watchdog ends an MPI job), naming the replica and the step: a thread stuck
// in a computation cannot be cancelled, and waiting longer only hides the fault.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "../core/device.h"

namespace ember::detail {

class ReplicaWatchdog {
 public:
  // `on_expiry` gets the message (tests); by default it is printed and the process ends.
  ReplicaWatchdog(std::string kind, std::chrono::milliseconds timeout,
                  std::function<void(const std::string&)> on_expiry = {});
  ~ReplicaWatchdog();
  ReplicaWatchdog(const ReplicaWatchdog&) = delete;
  ReplicaWatchdog& operator=(const ReplicaWatchdog&) = delete;

  void arm(int member, Device device, int64_t step);  // a mutex and a clock read (no string)
  void disarm();

 private:
  void watch();

  std::string kind_;
  std::chrono::milliseconds timeout_;
  std::function<void(const std::string&)> on_expiry_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false, armed_ = false;
  int member_ = -1;
  Device device_;
  int64_t step_ = -1;
  std::chrono::steady_clock::time_point since_;
  std::thread thread_;
};

}  // namespace ember::detail
