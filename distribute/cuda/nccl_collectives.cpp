// NCCL communicators for the Mirrored (one process, N GPUs) and MultiWorker (one GPU per
// process) strategies.
//
// One process, N GPUs: ncclCommInitAll; one host thread drives every GPU, so each collective
// is issued for all of them inside ncclGroupStart/End (NCCL would deadlock otherwise).
// Across processes: ncclCommInitRankConfig with a non-blocking config, the unique id broadcast
// by MPI. Non-blocking, because only then can a wait give up: every call may return
// ncclInProgress, and the communicator is polled (ncclCommGetAsyncError) until it settles or
// the timeout passes, when it is aborted (ncclCommAbort) and the wait throws CollectiveError.
//
// Collectives are queued on the device's context stream, after the backward kernels that wrote
// the gradients and before the optimizer kernels that read them: stream order, no host sync.
// Each records an event; the next collective first waits (polling, bounded) for the previous
// one, so the host runs at most one step ahead and a dead peer is noticed within the timeout.
// The events also time the collective on the device (busy_seconds) for the per-epoch report.
#include "nccl_collectives.h"

#include "../../core/cuda_module.h"

#ifdef EMBER_WITH_NCCL
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "../../core/cuda/context.h"
#include "../../core/cuda/nccl_check.h"
#include "../communicator.h"

namespace ember::cuda {

namespace {

using Clock = std::chrono::steady_clock;

struct Comm;
// The communicators ncclCommInitAll made together: within a process, all must be aborted when
// one is (NVIDIA/nccl#863); destroying the others would wait for ever on the aborted one.
struct Clique {
  std::vector<Comm*> members;
};

struct Comm {
  std::shared_ptr<Clique> clique;  // null for one made from a unique id (one per process)
  ncclComm_t comm = nullptr;
  int device = 0;
  bool nonblocking = false;
  bool aborted = false;
  cudaEvent_t start = nullptr, done = nullptr;
  bool pending = false;     // a collective was queued and not yet waited for
  double busy_seconds = 0;  // device time of the collectives waited for
  const char* last = "";    // the last collective's name, for messages
};

Comm* as_comm(void* p) { return static_cast<Comm*>(p); }

void make_events(Comm& c) {
  EMBER_CUDA_CHECK(cudaSetDevice(c.device));
  EMBER_CUDA_CHECK(cudaEventCreate(&c.start));
  EMBER_CUDA_CHECK(cudaEventCreate(&c.done));
}

void abort_one(Comm& c) noexcept {
  if (c.comm && !c.aborted) {
    cudaSetDevice(c.device);
    ncclCommAbort(c.comm);
    c.aborted = true;
  }
}

// Aborts `c` and every communicator of its clique: after a failure or a timeout, the others'
// kernels still wait for the aborted one, and only an abort (not a destroy) ends them.
void abort_comm(Comm& c) noexcept {
  if (!c.clique) return abort_one(c);
  const std::shared_ptr<Clique> keep = c.clique;
  for (Comm* m : keep->members) abort_one(*m);
}

// Runs `body`; when it throws, every communicator of `comms` (and of their cliques) is aborted
// first, so that no member is left waiting for one that gave up.
template <typename Body>
void aborting_all_on_error(const std::vector<void*>& comms, Body&& body) {
  try {
    body();
  } catch (...) {
    for (void* p : comms) abort_comm(*as_comm(p));
    throw;
  }
}

// Polls a non-blocking communicator until its last call settles; aborts it and throws on a
// timeout or an asynchronous error.
void settle(Comm& c, Clock::time_point deadline, const char* what) {
  if (!c.nonblocking) return;
  for (;;) {
    ncclResult_t state = ncclSuccess;
    EMBER_NCCL_CHECK(ncclCommGetAsyncError(c.comm, &state));
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) {
      const std::string why = ncclGetErrorString(state);
      abort_comm(c);
      throw NcclError(std::string("NCCL ") + what + " on cuda:" + std::to_string(c.device) + " failed: " + why + " (" +
                      ncclGetLastError(nullptr) + "); communicator aborted");
    }
    if (Clock::now() > deadline) {
      abort_comm(c);
      throw CollectiveError(std::string("NCCL ") + what + " on cuda:" + std::to_string(c.device) +
                            " did not complete in time (another rank failed or hangs); communicator aborted");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

// Waits for the last queued collective to finish on the device, bounded by the timeout.
void wait_done(Comm& c, int64_t timeout_ms) {
  if (!c.pending) return;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  EMBER_CUDA_CHECK(cudaSetDevice(c.device));
  for (;;) {
    const cudaError_t q = cudaEventQuery(c.done);
    if (q == cudaSuccess) break;
    if (q != cudaErrorNotReady) EMBER_CUDA_CHECK(q);
    ncclResult_t state = ncclSuccess;
    EMBER_NCCL_CHECK(ncclCommGetAsyncError(c.comm, &state));
    if (state != ncclSuccess && state != ncclInProgress) {
      const std::string why = ncclGetErrorString(state);
      abort_comm(c);
      throw NcclError(std::string("NCCL ") + c.last + " on cuda:" + std::to_string(c.device) + " failed: " + why +
                      "; communicator aborted");
    }
    if (Clock::now() > deadline) {
      abort_comm(c);
      throw CollectiveError(std::string("NCCL ") + c.last + " on cuda:" + std::to_string(c.device) +
                            " not done after " + std::to_string(timeout_ms) +
                            " ms (another rank failed or hangs); communicator aborted");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  float ms = 0;
  EMBER_CUDA_CHECK(cudaEventElapsedTime(&ms, c.start, c.done));
  c.busy_seconds += ms / 1e3;
  c.pending = false;
}

void check_buffers(const std::vector<void*>& comms, const std::vector<Tensor*>& bufs, const char* what) {
  EMBER_CHECK(!comms.empty() && comms.size() == bufs.size(), ArgumentError,
              std::string("NCCL ") + what + ": one buffer per communicator");
  for (size_t i = 0; i < comms.size(); ++i) {
    const Comm& c = *as_comm(comms[i]);
    const Tensor& t = *bufs[i];
    EMBER_CHECK(!c.aborted, CollectiveError,
                std::string("NCCL ") + what + ": the communicator of cuda:" + std::to_string(c.device) +
                    " was aborted after an earlier failure");
    EMBER_CHECK(
        t.dtype() == DType::F32 && t.device() == Device::cuda(c.device) && t.numel() == bufs[0]->numel(), ArgumentError,
        std::string("NCCL ") + what + ": expects f32 buffers of one size, each on its communicator's GPU (cuda:" +
            std::to_string(c.device) + "), got " + t.str());
  }
}

// Queues `op(comm, buffer, stream)` for every member inside one group, framed by the events
// (buffers checked by the caller, check_buffers).
template <typename Op>
void grouped(const std::vector<void*>& comms, const std::vector<Tensor*>& bufs, int64_t timeout_ms, const char* what,
             Op op) {
  for (void* p : comms) wait_done(*as_comm(p), timeout_ms);  // bounded run-ahead: one collective
  for (void* p : comms) {
    Comm& c = *as_comm(p);
    EMBER_CUDA_CHECK(cudaSetDevice(c.device));
    EMBER_CUDA_CHECK(cudaEventRecord(c.start, context(c.device).stream()));
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  EMBER_NCCL_CHECK(ncclGroupStart());
  for (size_t i = 0; i < comms.size(); ++i) {
    Comm& c = *as_comm(comms[i]);
    EMBER_CUDA_CHECK(cudaSetDevice(c.device));
    const ncclResult_t r = op(c, *bufs[i], context(c.device).stream());
    if (r != ncclSuccess && r != ncclInProgress) {
      (void)ncclGroupEnd();
      EMBER_NCCL_CHECK(r);
    }
  }
  const ncclResult_t end = ncclGroupEnd();
  if (end != ncclInProgress) EMBER_NCCL_CHECK(end);
  for (void* p : comms) settle(*as_comm(p), deadline, what);
  for (void* p : comms) {
    Comm& c = *as_comm(p);
    EMBER_CUDA_CHECK(cudaSetDevice(c.device));
    EMBER_CUDA_CHECK(cudaEventRecord(c.done, context(c.device).stream()));
    c.pending = true;
    c.last = what;
  }
}

void init_all(const std::vector<int>& devices, std::vector<void*>* out) {
  EMBER_CHECK(!devices.empty(), ArgumentError, "NCCL: no devices");
  std::vector<ncclComm_t> raw(devices.size());
  for (int d : devices) context(d);  // the streams exist before the communicators use them
  EMBER_NCCL_CHECK(ncclCommInitAll(raw.data(), static_cast<int>(devices.size()), devices.data()));
  out->clear();
  auto clique = std::make_shared<Clique>();
  for (size_t i = 0; i < devices.size(); ++i) {
    auto c = std::make_unique<Comm>();
    c->clique = clique;
    c->comm = raw[i];
    c->device = devices[i];
    try {
      make_events(*c);
    } catch (...) {
      for (size_t j = i; j < raw.size(); ++j) ncclCommDestroy(raw[j]);
      throw;
    }
    clique->members.push_back(c.get());
    out->push_back(c.release());
  }
}

void unique_id(std::string* out) {
  ncclUniqueId id;
  EMBER_NCCL_CHECK(ncclGetUniqueId(&id));
  out->assign(id.internal, sizeof id.internal);
}

void* init_rank(const std::string& id_bytes, int nranks, int rank, int device, int64_t timeout_ms) {
  EMBER_CHECK(id_bytes.size() == NCCL_UNIQUE_ID_BYTES, ArgumentError, "NCCL: a unique id is 128 bytes");
  ncclUniqueId id;
  std::memcpy(id.internal, id_bytes.data(), sizeof id.internal);
  context(device);
  EMBER_CUDA_CHECK(cudaSetDevice(device));
  auto c = std::make_unique<Comm>();
  c->device = device;
  c->nonblocking = true;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const ncclResult_t r = ncclCommInitRankConfig(&c->comm, nranks, id, rank, &config);
  if (r != ncclInProgress) EMBER_NCCL_CHECK(r);
  try {
    settle(*c, Clock::now() + std::chrono::milliseconds(timeout_ms), "init");
    make_events(*c);
  } catch (...) {
    abort_comm(*c);
    throw;
  }
  return c.release();
}

void destroy(void* p) noexcept {
  Comm* c = as_comm(p);
  if (!c) return;
  cudaSetDevice(c->device);
  if (c->comm && !c->aborted) {
    if (c->nonblocking) {
      // Finalize flushes queued work; give it a bounded time, else abort.
      const ncclResult_t f = ncclCommFinalize(c->comm);
      ncclResult_t state = f == ncclSuccess ? ncclInProgress : f;  // then polled until it settles
      const auto deadline = Clock::now() + std::chrono::seconds(10);
      while (state == ncclInProgress && Clock::now() < deadline) {
        if (ncclCommGetAsyncError(c->comm, &state) != ncclSuccess) break;
        if (state == ncclInProgress) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      if (state == ncclSuccess)
        ncclCommDestroy(c->comm);
      else
        ncclCommAbort(c->comm);
    } else {
      ncclCommDestroy(c->comm);
    }
  }
  if (c->start) cudaEventDestroy(c->start);
  if (c->done) cudaEventDestroy(c->done);
  if (c->clique) std::erase(c->clique->members, c);  // a later abort of the others must not reach it
  delete c;
}

}  // namespace

const ::ember::detail::NcclOps* nccl_ops_table() {
  static const ::ember::detail::NcclOps table = [] {
    ::ember::detail::NcclOps api{};
    api.init_all = init_all;
    api.unique_id = unique_id;
    api.init_rank = init_rank;
    api.destroy = destroy;
    api.abort = [](void* p) noexcept {
      if (p) abort_comm(*as_comm(p));
    };
    api.all_reduce_sum = [](const std::vector<void*>& comms, const std::vector<Tensor*>& bufs, int64_t timeout_ms) {
      check_buffers(comms, bufs, "all_reduce");  // a wrong call aborts nothing
      aborting_all_on_error(comms, [&] {
        grouped(comms, bufs, timeout_ms, "all_reduce", [](Comm& c, Tensor& t, cudaStream_t s) {
          return ncclAllReduce(t.raw(), t.raw(), static_cast<size_t>(t.numel()), ncclFloat, ncclSum, c.comm, s);
        });
      });
    };
    api.broadcast = [](const std::vector<void*>& comms, const std::vector<Tensor*>& bufs, int root,
                       int64_t timeout_ms) {
      check_buffers(comms, bufs, "broadcast");
      aborting_all_on_error(comms, [&] {
        grouped(comms, bufs, timeout_ms, "broadcast", [root](Comm& c, Tensor& t, cudaStream_t s) {
          return ncclBroadcast(t.raw(), t.raw(), static_cast<size_t>(t.numel()), ncclFloat, root, c.comm, s);
        });
      });
    };
    api.wait = [](const std::vector<void*>& comms, int64_t timeout_ms) {
      aborting_all_on_error(comms, [&] {
        for (void* p : comms) wait_done(*as_comm(p), timeout_ms);
      });
    };
    api.busy_seconds = [](void* p) { return as_comm(p)->busy_seconds; };
    return api;
  }();
  return &table;
}

}  // namespace ember::cuda

#else  // a CUDA build without NCCL: the entries stay null, and libember says so

namespace ember::cuda {
const ::ember::detail::NcclOps* nccl_ops_table() { return nullptr; }
}  // namespace ember::cuda

#endif
