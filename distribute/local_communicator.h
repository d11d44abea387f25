// LocalCommunicator: N members on threads of one process, sharing a LocalGroup; and the host
// group, N members of one process driven by one thread.
// all_reduce_sum: every member publishes its buffer, then member r sums slice r of the buffer
// over members 0..N-1 (a fixed order: bit-reproducible) and writes the sum back to every
// member's slice; the work is split N ways like a reduce-scatter + all-gather.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "communicator.h"

namespace ember {

class LocalGroup {
 public:
  explicit LocalGroup(int size);
  int size() const { return size_; }

 private:
  friend class LocalCommunicator;
  // A reusable barrier with a deadline and an abort flag; throws CollectiveError.
  void arrive_and_wait(int rank, const char* what, int64_t step, std::chrono::milliseconds timeout);

  int size_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  int64_t generation_ = 0;
  std::vector<bool> present_;
  bool aborted_ = false;
  std::string abort_reason_;
  std::vector<float*> buffers_;
  std::vector<int64_t> sizes_;
};

class LocalCommunicator : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<LocalGroup> group, int rank);
  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  std::string name() const override { return "local threads"; }
  void barrier() override;
  void abort(const std::string& reason) noexcept override;

 protected:
  void do_all_reduce_sum(std::span<Tensor* const> bufs) override;
  void do_broadcast(std::span<Tensor* const> bufs, int root) override;

 private:
  void publish(Tensor& buf, const char* what);

  std::shared_ptr<LocalGroup> group_;
  int rank_;
};

// N communicators sharing one group, for N replica threads.
std::vector<std::unique_ptr<Communicator>> make_local_communicators(int n);

// One communicator for n members of this process driven by one thread (Mirrored on CPUs, or
// several replicas on one GPU): local_size() == size() == n; the sum runs on the calling thread
// as a pairwise tree over members (the same order as LocalCommunicator's, so the two give the same bits);
// nothing ever waits for another member. GPU buffers are summed through host copies.
std::unique_ptr<Communicator> make_host_group(int n);

}  // namespace ember
