// NcclCommunicator: the Communicator of GPU replicas (private to distribute/). NCCL itself lives
// in the CUDA module (distribute/cuda/nccl_collectives.cpp); this is its libember face.
//
// Unlike the host communicators, its collectives do not block the host: they are queued on the
// buffer's device stream, in order with the kernels before and after them, like every GPU op.
// The host waits only in wait() and barrier(), and before each collective for the previous one
// (so it runs at most one step ahead); every wait is bounded by the timeout, after which the
// communicator is aborted and CollectiveError names the collective, the step and the device.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "communicator.h"

namespace ember::detail {

class NcclCommunicator : public Communicator {
 public:
  // Every GPU of this process in one object (ncclCommInitAll): member i works on devices[i] and
  // is rank i; each call is one NCCL group over all of them. Throws DeviceError in a build
  // without NCCL or without those GPUs.
  static std::unique_ptr<NcclCommunicator> create_local(const std::vector<int>& devices,
                                                        std::chrono::milliseconds timeout);
  // This process's one member of a communicator spanning processes: rank and size from
  // `bootstrap` (MPI), which also carries NCCL's unique id from rank 0 to the others.
  static std::unique_ptr<NcclCommunicator> create_across(Communicator& bootstrap, int device,
                                                         std::chrono::milliseconds timeout);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_size() const override { return static_cast<int>(handles_.size()); }
  std::string name() const override { return "NCCL"; }
  const std::vector<int>& devices() const { return devices_; }
  void barrier() override { wait(); }  // every queued collective done
  void abort(const std::string& reason) noexcept override;
  // Waits (bounded) until the last collective has run on every member's device.
  void wait() override;
  // Device time spent in the collectives waited for so far (on the first member's GPU).
  double busy_seconds() const override;

 protected:
  void do_all_reduce_sum(std::span<Tensor* const> bufs) override;
  void do_broadcast(std::span<Tensor* const> bufs, int root) override;

 private:
  NcclCommunicator(std::vector<void*> handles, int rank, int size, std::vector<int> devices,
                   std::chrono::milliseconds timeout);
  // Runs fn, adding the step to the message of a collective that failed or timed out.
  template <typename Fn>
  void with_context(const char* what, Fn&& fn);

  std::vector<void*> handles_;  // one per local member, owned
  int rank_, size_;
  std::vector<int> devices_;
};

}  // namespace ember::detail
