// NcclCommunicator: the Communicator of GPU replicas (private to distribute/). NCCL itself lives
// in the CUDA module (distribute/cuda/nccl.cpp); this is its libember face.
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
  // One member per GPU of this process (ncclCommInitAll); member i works on devices[i] and
  // has rank i. Throws DeviceError in a build without NCCL or without those GPUs.
  static std::vector<std::unique_ptr<NcclCommunicator>> create_local(const std::vector<int>& devices,
                                                                     std::chrono::milliseconds timeout);
  // This process's member of a communicator spanning processes: rank and size from
  // `bootstrap` (MPI), which also carries NCCL's unique id from rank 0 to the others.
  static std::unique_ptr<NcclCommunicator> create_across(Communicator& bootstrap, int device,
                                                         std::chrono::milliseconds timeout);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "NCCL"; }
  int device() const { return device_; }
  void all_reduce_sum(Tensor& buf) override;
  void broadcast(Tensor& buf, int root) override;
  void barrier() override { wait(); }  // every member's queued collectives done
  void abort(const std::string& reason) noexcept override;
  // Waits (bounded) until this member's last collective has run on the device.
  void wait();
  // Device time spent in this member's collectives that have been waited for.
  double busy_seconds() const;

  // The collectives for several members of this process at once, in one NCCL group (how one
  // thread drives all GPUs of a Mirrored strategy): bufs[i] belongs to members[i].
  static void all_reduce_sum(std::span<NcclCommunicator* const> members, std::span<Tensor* const> bufs);
  static void broadcast(std::span<NcclCommunicator* const> members, std::span<Tensor* const> bufs, int root);
  static void wait(std::span<NcclCommunicator* const> members);

 private:
  NcclCommunicator(void* handle, int rank, int size, int device, std::chrono::milliseconds timeout);
  static std::vector<void*> handles(std::span<NcclCommunicator* const> members);
  // Runs fn, adding the step to the message of a collective that failed or timed out.
  template <typename Fn>
  static void with_context(std::span<NcclCommunicator* const> members, const char* what, Fn&& fn);

  void* handle_;
  int rank_, size_, device_;
};

}  // namespace ember::detail
