// The checks and timing every communicator shares (see communicator.h).
#include "communicator.h"

#include <chrono>

namespace ember {

namespace {
void check_count(const Communicator& c, std::span<Tensor* const> bufs, const char* what) {
  EMBER_CHECK(static_cast<int>(bufs.size()) == c.local_size(), ArgumentError,
              c.name() + " " + what + ": " + std::to_string(bufs.size()) + " buffers for " +
                  std::to_string(c.local_size()) + " local members");
}
}  // namespace

void Communicator::all_reduce_sum(std::span<Tensor* const> bufs) {
  check_count(*this, bufs, "all_reduce");
  const auto t0 = std::chrono::steady_clock::now();
  do_all_reduce_sum(bufs);
  busy_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void Communicator::broadcast(std::span<Tensor* const> bufs, int root) {
  check_count(*this, bufs, "broadcast");
  EMBER_CHECK(root >= 0 && root < size(), ArgumentError,
              name() + " broadcast: root " + std::to_string(root) + " outside 0.." + std::to_string(size() - 1));
  do_broadcast(bufs, root);
}

}  // namespace ember
