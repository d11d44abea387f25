// Thread-local collectives (see local_communicator.h).
#include "local_communicator.h"

#include <cstring>

namespace ember {

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

void LocalCommunicator::all_reduce_sum(Tensor& buf) {
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
  // My slice: sum over members in rank order, then copy the sum to every member.
  const int64_t lo = count * rank_ / n, hi = count * (rank_ + 1) / n;
  std::vector<float*>& b = group_->buffers_;
  for (int64_t i = lo; i < hi; ++i) {
    float s = b[0][i];
    for (int r = 1; r < n; ++r) s += b[static_cast<size_t>(r)][i];
    for (int r = 0; r < n; ++r) b[static_cast<size_t>(r)][i] = s;
  }
  group_->arrive_and_wait(rank_, "all_reduce", step_, timeout_);  // every slice written
}

void LocalCommunicator::broadcast(Tensor& buf, int root) {
  EMBER_CHECK(root >= 0 && root < size(), ArgumentError, "broadcast: root out of range");
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

}  // namespace ember
