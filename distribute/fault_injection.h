// Fault injection, for tests of failure handling (tests, train_mnist --inject-fault): private,
// not part of the Strategy interface.
#pragma once

#include <cstdint>

namespace ember {
class Strategy;
}

namespace ember::detail {

struct FaultPlan {
  int member = -1;    // the replica (MultiWorker: the rank) that fails
  int64_t step = -1;  // at the start of this training step, counted from 0 over the whole fit
  bool hang = false;  // stop responding (sleep for an hour) instead of throwing
};

// Member `member` throws "injected fault in replica R at step S" at the start of step `step`, or
// with `hang` stops responding there so that the others' collectives must time out.
// ArgumentError for a strategy without replicas to fail (Default).
void inject_fault(Strategy& strategy, int member, int64_t step, bool hang = false);

}  // namespace ember::detail
