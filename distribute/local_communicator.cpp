// Thread-local collectives (see local_communicator.h).
#include "local_communicator.h"

#include <algorithm>
#include <cstring>

#include "../core/pairwise_sum.h"

namespace ember {

namespace {
// Element i's sum over n members' buffers in the batch's sum order (core/pairwise_sum.h): with a
// power-of-two number of replicas, each holding an aligned power-of-two run of the batch's groups,
// the replicas' sum is the one model's bit for bit.
float pairwise_sum(float* const* b, int64_t n, int64_t i) {
  return ember::pairwise_sum(0, n, i, [b](int64_t j, int64_t e) { return b[j][e]; });
}
}  // namespace

LocalGroup::LocalGroup(int size)
    : size_(size),
      present_(static_cast<size_t>(size)),
      buffers_(static_cast<size_t>(size)),
      sizes_(static_cast<size_t>(size)) {
  EMBER_CHECK(size >= 1, ArgumentError, "LocalGroup: size must be >= 1");
}

void LocalGroup::arrive_and_wait(int rank, const char* what, int64_t step, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  if (aborted_) throw CollectiveError(std::string(what) + " at step " + std::to_string(step) + ": " + abort_reason_);
  const int64_t gen = generation_;
  present_[static_cast<size_t>(rank)] = true;
  if (++arrived_ == size_) {
    arrived_ = 0;
    std::fill(present_.begin(), present_.end(), false);
    ++generation_;
    cv_.notify_all();
    return;
  }
  const bool done = cv_.wait_for(lock, timeout, [&] { return generation_ != gen || aborted_; });
  if (aborted_) throw CollectiveError(std::string(what) + " at step " + std::to_string(step) + ": " + abort_reason_);
  if (!done) {
    std::string missing;
    for (int r = 0; r < size_; ++r)
      if (!present_[static_cast<size_t>(r)]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    aborted_ = true;
    abort_reason_ = "replica(s) " + missing + " did not arrive within " + std::to_string(timeout.count()) + " ms";
    cv_.notify_all();
    throw CollectiveError(std::string(what) + " stuck at step " + std::to_string(step) + ": " + abort_reason_);
  }
}

LocalCommunicator::LocalCommunicator(std::shared_ptr<LocalGroup> group, int rank)
    : group_(std::move(group)), rank_(rank) {
  EMBER_CHECK(rank >= 0 && rank < group_->size(), ArgumentError, "LocalCommunicator: rank out of range");
}

void LocalCommunicator::publish(Tensor& buf, const char* what) {
  EMBER_CHECK(buf.dtype() == DType::F32 && buf.device().is_cpu(), ArgumentError,
              std::string(what) + ": expects an f32 cpu buffer, got " + buf.str());
  std::lock_guard lock(group_->mu_);
  group_->buffers_[static_cast<size_t>(rank_)] = buf.f32();
  group_->sizes_[static_cast<size_t>(rank_)] = buf.numel();
}

void LocalCommunicator::do_all_reduce_sum(std::span<Tensor* const> bufs) {
  Tensor& buf = *bufs[0];
  publish(buf, "all_reduce");
  group_->arrive_and_wait(rank_, "all_reduce", step_, timeout_);  // every buffer published
  const int n = group_->size();
  const int64_t count = buf.numel();
  for (int r = 0; r < n; ++r)
    if (group_->sizes_[static_cast<size_t>(r)] != count) {
      abort("all_reduce: replica " + std::to_string(r) + " has " +
            std::to_string(group_->sizes_[static_cast<size_t>(r)]) + " values, replica " + std::to_string(rank_) +
            " has " + std::to_string(count));
      throw CollectiveError("all_reduce: buffer sizes differ between replicas");
    }
  // My slice: the pairwise sum over members (pairwise_sum), then copied to every member.
  const int64_t lo = count * rank_ / n, hi = count * (rank_ + 1) / n;
  std::vector<float*>& b = group_->buffers_;
  for (int64_t i = lo; i < hi; ++i) {
    const float s = pairwise_sum(b.data(), n, i);
    for (int r = 0; r < n; ++r) b[static_cast<size_t>(r)][i] = s;
  }
  group_->arrive_and_wait(rank_, "all_reduce", step_, timeout_);  // every slice written
}

void LocalCommunicator::do_broadcast(std::span<Tensor* const> bufs, int root) {
  Tensor& buf = *bufs[0];
  publish(buf, "broadcast");
  group_->arrive_and_wait(rank_, "broadcast", step_, timeout_);
  const float* src = group_->buffers_[static_cast<size_t>(root)];
  if (rank_ != root) {
    if (group_->sizes_[static_cast<size_t>(root)] != buf.numel()) {
      abort("broadcast: buffer sizes differ");
      throw CollectiveError("broadcast: buffer sizes differ between replicas");
    }
    std::memcpy(buf.f32(), src, static_cast<size_t>(buf.numel()) * sizeof(float));
  }
  group_->arrive_and_wait(rank_, "broadcast", step_, timeout_);
}

void LocalCommunicator::barrier() { group_->arrive_and_wait(rank_, "barrier", step_, timeout_); }

void LocalCommunicator::abort(const std::string& reason) noexcept {
  try {
    std::lock_guard lock(group_->mu_);
    if (!group_->aborted_) {
      group_->aborted_ = true;
      group_->abort_reason_ = "replica " + std::to_string(rank_) + " failed: " + reason;
    }
    group_->cv_.notify_all();
  } catch (...) {
  }
}

std::vector<std::unique_ptr<Communicator>> make_local_communicators(int n) {
  auto group = std::make_shared<LocalGroup>(n);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < n; ++r) out.push_back(std::make_unique<LocalCommunicator>(group, r));
  return out;
}

namespace {
class HostGroup : public Communicator {
 public:
  explicit HostGroup(int n) : n_(n) {}
  int rank() const override { return 0; }
  int size() const override { return n_; }
  int local_size() const override { return n_; }
  std::string name() const override { return "host sum"; }
  void barrier() override {}
  void abort(const std::string&) noexcept override {}

 protected:
  void do_all_reduce_sum(std::span<Tensor* const> bufs) override {
    check(bufs, "all_reduce");
    const int64_t len = bufs[0]->numel();
    const size_t n = bufs.size();
    // GPU members (several replicas on one GPU, where NCCL cannot have two ranks): staged
    // through host copies, summed in the same order, copied back. Slow (two host waits per member per step),
    // and meant for checking the replica logic on a one-GPU machine, not for speed.
    const bool on_gpu = !bufs[0]->device().is_cpu();
    if (on_gpu) {
      staging_.resize(n);
      for (size_t r = 0; r < n; ++r) {
        // Host memory whatever the caller's DeviceScope (a GPU scope would put it on the GPU).
        if (!staging_[r].defined() || staging_[r].numel() != len)
          staging_[r] = Tensor::empty(Shape{len}, DType::F32, Device::cpu());
        staging_[r].copy_from(*bufs[r]);
      }
    }
    std::vector<float*> b(n);
    for (size_t r = 0; r < n; ++r) b[r] = on_gpu ? staging_[r].f32() : bufs[r]->f32();
      // Each element's pairwise sum over members (the same bits as LocalCommunicator), elements
      // split over the OpenMP threads.
#pragma omp parallel for schedule(static) if (len > 65536)
    for (int64_t i = 0; i < len; ++i) {
      const float s = pairwise_sum(b.data(), static_cast<int64_t>(n), i);
      for (size_t r = 0; r < n; ++r) b[r][i] = s;
    }
    if (on_gpu)
      for (size_t r = 0; r < n; ++r) bufs[r]->copy_from(staging_[r]);
  }
  void do_broadcast(std::span<Tensor* const> bufs, int root) override {
    check(bufs, "broadcast");
    for (size_t r = 0; r < bufs.size(); ++r)
      if (static_cast<int>(r) != root) bufs[r]->copy_from(*bufs[static_cast<size_t>(root)]);
  }

 private:
  static void check(std::span<Tensor* const> bufs, const char* what) {
    for (const Tensor* t : bufs)
      EMBER_CHECK(t->dtype() == DType::F32 && t->device().is_cpu() == bufs[0]->device().is_cpu() &&
                      t->numel() == bufs[0]->numel(),
                  ArgumentError,
                  std::string("host sum ") + what +
                      ": expects f32 buffers of one size, all on the cpu or all on GPUs, got " + t->str());
  }
  int n_;
  std::vector<Tensor> staging_;  // host copies of GPU members' buffers, reused every step
};
}  // namespace

std::unique_ptr<Communicator> make_host_group(int n) {
  EMBER_CHECK(n >= 1, ArgumentError, "host group: needs at least one member");
  return std::make_unique<HostGroup>(n);
}

}  // namespace ember
