/// @file
/// Communicator: the one collective interface of data-parallel training, over the flat f32
/// buffers of this process's members (N local members, M processes).
///
/// Implementations (one per transport, chosen by the Strategy):
/// @code{.unparsed}
///   host group         N CPU replicas of one process driven by one thread: a sum in member
///                      order (Mirrored on CPUs; distribute/local_communicator.h)
///   LocalCommunicator  one member per thread of one process (tests; MultiWorker without MPI)
///   MpiCommunicator    one rank per process, MPI_Allreduce on host buffers (multiworker, CPU)
///   NcclCommunicator   GPU buffers: all GPUs of a process in one object (one NCCL group per
///                      call), or one per process across processes (distribute/nccl_communicator.h)
/// @endcode
/// Every collective must be entered by all members in the same order and gives up after
/// `timeout` with a CollectiveError naming the collective, the step and who is missing, instead
/// of hanging. The host communicators block until the collective is done; the NCCL one queues
/// it on the GPU's stream (ordered with the kernels around it) and waits, bounded, only before
/// the next one and in wait()/barrier(). A member that fails calls abort(): the others'
/// collectives then throw at once.
#pragma once

#include <chrono>
#include <memory>
#include <span>
#include <string>

#include "../core/error.h"
#include "../core/tensor.h"

namespace ember {

/// A collective timed out or was aborted by another member: names the collective, the step and
/// who is missing.
class CollectiveError : public Error {
 public:
  using Error::Error;
};

/// The collectives of data-parallel training over this process's members' buffers (see
/// communicator.h). Implementations override the do_ functions and the pure virtuals.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;                 ///< the global index of this process's first member
  virtual int size() const = 0;                 ///< members in all processes together
  virtual int local_size() const { return 1; }  ///< members in this process: buffers per call
  virtual std::string name() const = 0;         ///< "host sum", "local threads", "MPI", "NCCL"

  /// bufs[i] is local member i's buffer (local_size() of them; f32, contiguous, all one size).
  /// Afterwards every buffer holds the sum over all members, in a fixed order, so results are
  /// reproducible run to run: on the CPU transports the pairwise tree by doubling strides
  /// ((m0 + m1) + (m2 + m3), ...; MPI with 2 ranks alike), the order a Model sums its
  /// slices in (what makes replicas bit for bit under ConvAlgorithms::Exact); NCCL and MPI with
  /// more ranks their own. ArgumentError for a wrong buffer count.
  void all_reduce_sum(std::span<Tensor* const> bufs);
  /// all_reduce_sum() of a process with one member: `buf` is its buffer.
  void all_reduce_sum(Tensor& buf) {
    Tensor* b = &buf;
    all_reduce_sum(std::span<Tensor* const>(&b, 1));
  }
  /// Every buffer = member `root`'s (a global member index).
  void broadcast(std::span<Tensor* const> bufs, int root);
  /// broadcast() of a process with one member: `buf` is its buffer.
  void broadcast(Tensor& buf, int root) {
    Tensor* b = &buf;
    broadcast(std::span<Tensor* const>(&b, 1), root);
  }
  /// Returns when every member has entered it (bounded by the timeout, as every collective).
  virtual void barrier() = 0;
  /// Waits (bounded) until every collective queued so far is done. The host communicators are
  /// done when a call returns; NCCL queues its calls on the buffers' streams.
  virtual void wait() {}
  /// Seconds inside collectives so far: host time, or for NCCL the device time of those waited for.
  virtual double busy_seconds() const { return busy_seconds_; }
  /// Tells the other members this one failed (reason is passed on); never throws.
  virtual void abort(const std::string& reason) noexcept = 0;

  /// Context for error messages: the training step the next collective belongs to.
  void set_step(int64_t step) { step_ = step; }
  /// How long a collective waits for the other members before CollectiveError (60 s by default).
  void set_timeout(std::chrono::milliseconds t) { timeout_ = t; }
  std::chrono::milliseconds timeout() const { return timeout_; }  ///< See set_timeout().

 protected:
  /// The transport's part of all_reduce_sum(); the buffer count is checked already.
  virtual void do_all_reduce_sum(std::span<Tensor* const> bufs) = 0;
  /// The transport's part of broadcast(); the buffer count is checked already.
  virtual void do_broadcast(std::span<Tensor* const> bufs, int root) = 0;

  int64_t step_ = -1;                         ///< set_step()'s step, for messages (-1: none)
  std::chrono::milliseconds timeout_{60000};  ///< set_timeout()'s timeout
  double busy_seconds_ = 0;                   ///< what busy_seconds() returns: a transport adds its time
};

}  // namespace ember
