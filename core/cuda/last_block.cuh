// The last-block ticket (set_fused_advance): a kernel whose every block reads a device-side
// counter (the loader's cursor, Adam's step, Dropout's counter) may advance it itself, instead of
// a one-thread kernel after it. Every block takes a ticket after its last read of the counter; the
// block that draws the last one knows that no block will read the counter again, so it may write
// it. CUDA code only (included by .cu files).
#pragma once

#include <cuda/atomic>

namespace ember::cuda {

// Called by every thread of the block after the block's last read of the counter and before any
// thread returns; `ticket` is a file-local `__device__ unsigned` that is 0 when the launch starts.
// True in the one thread (thread 0 of the last block to finish) that may then advance the counter;
// it sets the ticket back to 0 for the next launch (eager, or a CUDA graph's replay: a module
// variable, per device, at a fixed address; one per file suffices, as a device's ops run on one
// stream, so no two launches that use it overlap). The barrier orders every thread's read before
// thread 0's ticket; the ticket's release and the last block's acquire order every block's reads
// before that block's write.
__device__ __forceinline__ bool last_block_to_read(unsigned& ticket) {
  __syncthreads();
  if (threadIdx.x != 0) return false;
  ::cuda::atomic_ref<unsigned, ::cuda::thread_scope_device> t(ticket);
  if (t.fetch_add(1u, ::cuda::memory_order_acq_rel) != gridDim.x - 1) return false;
  t.store(0u, ::cuda::memory_order_relaxed);  // the next launch sees it once this one ends
  return true;
}

}  // namespace ember::cuda
