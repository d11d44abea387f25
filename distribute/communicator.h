// Communicator: the collectives data-parallel training needs, over one flat f32 buffer.
//
// Implementations (one per transport, chosen by the Strategy):
//   LocalCommunicator  N replicas on threads of one process (CPU replicas; tests)
//   MpiCommunicator    one rank per process, MPI_Allreduce on host buffers (multiworker, CPU)
//   NcclCommunicator   GPU buffers: one per GPU of a process, or one per process across
//                      processes (distribute/nccl_communicator.h)
// Every collective must be entered by all members in the same order and gives up after
// `timeout` with a CollectiveError naming the collective, the step and who is missing, instead
// of hanging. The host communicators block until the collective is done; the NCCL one queues
// it on the GPU's stream (ordered with the kernels around it) and waits, bounded, only before
// the next one and in wait()/barrier(). A member that fails calls abort(): the others'
// collectives then throw at once.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "../core/error.h"
#include "../core/tensor.h"

namespace ember {

class CollectiveError : public Error {
 public:
  using Error::Error;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;  // "local threads", "MPI", ...
  // buf (f32, contiguous) = sum over members of their buf, in place. The order of the sum is
  // fixed (member 0 first), so results are reproducible run to run.
  virtual void all_reduce_sum(Tensor& buf) = 0;
  // buf = root's buf on every member.
  virtual void broadcast(Tensor& buf, int root) = 0;
  virtual void barrier() = 0;
  // Tells the other members this one failed (reason is passed on); never throws.
  virtual void abort(const std::string& reason) noexcept = 0;

  // Context for error messages: the training step the next collective belongs to.
  void set_step(int64_t step) { step_ = step; }
  void set_timeout(std::chrono::milliseconds t) { timeout_ = t; }
  std::chrono::milliseconds timeout() const { return timeout_; }

 protected:
  int64_t step_ = -1;
  std::chrono::milliseconds timeout_{60000};
};

}  // namespace ember
