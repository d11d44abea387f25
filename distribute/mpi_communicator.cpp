// MPI collectives on host buffers, with a watchdog (see mpi_communicator.h).
#include "mpi_communicator.h"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ember::detail {

namespace {

#define EMBER_MPI_CHECK(stmt)                                                                                     \
  do {                                                                                                            \
    const int ember_rc_ = (stmt);                                                                                 \
    if (ember_rc_ != MPI_SUCCESS) {                                                                               \
      char ember_msg_[MPI_MAX_ERROR_STRING];                                                                      \
      int ember_len_ = 0;                                                                                         \
      MPI_Error_string(ember_rc_, ember_msg_, &ember_len_);                                                       \
      throw ::ember::MpiError(::ember::detail::failure_message("MPI", #stmt, std::string(ember_msg_, ember_len_), \
                                                               __FILE__, __LINE__, __func__));                    \
    }                                                                                                             \
  } while (0)

// MPI_Init waits for every rank of the job (a host unreachable, a rank that never starts or
// never calls MPI): bounded by the collective timeout too (at least 10 s). Ends the process
// (exit 3) when the deadline passes before the guard is destroyed.
class InitDeadline {
 public:
  // At least 10 s (a start-up across hosts may take longer than a short collective timeout),
  // at most a day (a "no limit" value must not overflow the wait).
  explicit InitDeadline(std::chrono::milliseconds timeout)
      : timeout_(std::clamp<std::chrono::milliseconds>(timeout, std::chrono::seconds(10), std::chrono::hours(24))),
        rank_(launcher_rank()),
        thread_([this] {
          std::unique_lock lock(mu_);
          if (cv_.wait_for(lock, timeout_, [this] { return done_; })) return;
          std::fprintf(stderr,
                       "rank %s: MPI_Init waited more than %g s (--collective-timeout, at least 10 s) for the other "
                       "ranks: a host unreachable or a rank that never started MPI; ending this rank\n",
                       rank_.c_str(), static_cast<double>(timeout_.count()) / 1000);
          std::fflush(stderr);
          std::_Exit(3);
        }) {}
  ~InitDeadline() {
    {
      std::lock_guard lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  InitDeadline(const InitDeadline&) = delete;
  InitDeadline& operator=(const InitDeadline&) = delete;

 private:
  // The rank as the launcher set it (read here, before MPI_Init may change the environment).
  static std::string launcher_rank() {
    for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"})
      if (const char* v = std::getenv(name)) return v;
    return "?";
  }
  const std::chrono::milliseconds timeout_;
  const std::string rank_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;  // last: starts after the members it uses
};

class MpiCommunicator : public Communicator {
 public:
  explicit MpiCommunicator(std::chrono::milliseconds timeout) {
    timeout_ = timeout;
    int initialized = 0;
    EMBER_MPI_CHECK(MPI_Initialized(&initialized));
    if (!initialized) {
      InitDeadline deadline(timeout);
      int provided = 0;
      EMBER_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
      owns_mpi_ = true;
    }
    int level = 0;
    EMBER_MPI_CHECK(MPI_Query_thread(&level));
    EMBER_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
    EMBER_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
    // The watchdogs' own channel: only where MPI lets a second thread call it.
    if (level >= MPI_THREAD_MULTIPLE) EMBER_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &side_));
    watchdog_ = std::thread([this] { watch(); });
  }
  ~MpiCommunicator() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    watchdog_.join();
    if (side_ != MPI_COMM_NULL) MPI_Comm_free(&side_);
    int finalized = 0;
    if (owns_mpi_ && MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized) MPI_Finalize();
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "MPI"; }

  void do_all_reduce_sum(std::span<Tensor* const> bufs) override {
    Tensor& buf = *bufs[0];
    check(buf, "all_reduce");
    Guard g(*this, "all_reduce");
    EMBER_MPI_CHECK(
        MPI_Allreduce(MPI_IN_PLACE, buf.f32(), static_cast<int>(buf.numel()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
  }
  void do_broadcast(std::span<Tensor* const> bufs, int root) override {
    Tensor& buf = *bufs[0];
    check(buf, "broadcast");
    Guard g(*this, "broadcast");
    EMBER_MPI_CHECK(MPI_Bcast(buf.f32(), static_cast<int>(buf.numel()), MPI_FLOAT, root, MPI_COMM_WORLD));
  }
  void barrier() override {
    Guard g(*this, "barrier");
    EMBER_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
  }
  void abort(const std::string& reason) noexcept override {
    std::fprintf(stderr, "rank %d failed: %s; ending all %d ranks\n", rank_, reason.c_str(), size_);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }

 private:
  struct Guard {  // marks a collective in flight for the watchdog
    Guard(MpiCommunicator& c, const char* what) : c_(c) {
      std::lock_guard lock(c_.mu_);
      c_.in_flight_ = what;
      c_.since_ = std::chrono::steady_clock::now();
      ++c_.entered_;
    }
    ~Guard() {
      std::lock_guard lock(c_.mu_);
      c_.in_flight_ = nullptr;
    }
    MpiCommunicator& c_;
  };

  void check(const Tensor& buf, const char* what) const {
    EMBER_CHECK(buf.dtype() == DType::F32 && buf.device().is_cpu() && buf.numel() < (int64_t{1} << 31), ArgumentError,
                std::string("MPI ") + what + ": expects an f32 cpu buffer under 2^31 elements, got " + buf.str());
  }

  // The watchdogs' exchange: a query (tag kQuery) is answered with {collectives entered, in
  // one now, its step} (tag kReply).
  static constexpr int kQuery = 7301, kReply = 7302;

  // Answers the queries that came in (watchdog thread, mu_ held).
  void answer_queries() {
    for (;;) {
      int flag = 0;
      MPI_Status st;
      if (MPI_Iprobe(MPI_ANY_SOURCE, kQuery, side_, &flag, &st) != MPI_SUCCESS || !flag) return;
      long long q = 0;
      MPI_Recv(&q, 1, MPI_LONG_LONG, st.MPI_SOURCE, kQuery, side_, MPI_STATUS_IGNORE);
      const long long state[3] = {static_cast<long long>(entered_), in_flight_ ? 1 : 0, static_cast<long long>(step_)};
      MPI_Send(state, 3, MPI_LONG_LONG, st.MPI_SOURCE, kReply, side_);
    }
  }

  // Asks every other rank's watchdog how far it got (waiting at most ~2 s, answering others'
  // queries meanwhile) and says who is missing from this rank's collective.
  std::string who_is_missing() {
    if (side_ == MPI_COMM_NULL) return "another rank failed or hangs";
    const int peers = size_ - 1;
    std::vector<long long> replies(static_cast<size_t>(3 * size_), -1);
    std::vector<MPI_Request> reqs;
    static const long long q = 1;  // the query's payload: must outlive the freed send
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      MPI_Request r;
      MPI_Isend(&q, 1, MPI_LONG_LONG, p, kQuery, side_, &r);
      MPI_Request_free(&r);
      MPI_Irecv(&replies[static_cast<size_t>(3 * p)], 3, MPI_LONG_LONG, p, kReply, side_, &r);
      reqs.push_back(r);
    }
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    int done = 0;
    while (std::chrono::steady_clock::now() < until) {
      answer_queries();
      MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE);
      if (done) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!done)
      for (MPI_Request& r : reqs) {
        int got = 0;
        MPI_Test(&r, &got, MPI_STATUS_IGNORE);
        if (!got) {
          MPI_Cancel(&r);
          MPI_Request_free(&r);
        }
      }
    std::string never, silent;
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      const long long* r = &replies[static_cast<size_t>(3 * p)];
      if (r[0] < 0) {
        silent += (silent.empty() ? "" : ", ") + std::to_string(p);
      } else if (r[0] < entered_) {  // not yet in this collective
        never += (never.empty() ? "" : ", ") + std::to_string(p) + " (at step " + std::to_string(r[2]) + ")";
      }
    }
    std::string why;
    if (!never.empty())
      why = "rank" + std::string(never.find(',') != std::string::npos ? "s " : " ") + never +
            " never reached it: hung or stuck in its own work";
    if (!silent.empty())
      why += (why.empty() ? "" : "; ") + std::string("rank") + (silent.find(',') != std::string::npos ? "s " : " ") +
             silent + " did not answer: dead or its process stuck";
    if (why.empty()) why = "all " + std::to_string(peers) + " other ranks are in it: the transport is stuck";
    return why;
  }

  void watch() {
    std::unique_lock lock(mu_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds(100));
      if (side_ != MPI_COMM_NULL) answer_queries();
      if (in_flight_ && std::chrono::steady_clock::now() - since_ > timeout_) {
        const std::string why = who_is_missing();
        std::fprintf(stderr, "rank %d: %s at step %lld waited more than %lld s: %s; ending all %d ranks\n", rank_,
                     in_flight_, static_cast<long long>(step_),
                     static_cast<long long>(std::chrono::duration_cast<std::chrono::seconds>(timeout_).count()),
                     why.c_str(), size_);
        std::fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 3);
      }
    }
  }

  int rank_ = 0, size_ = 1;
  bool owns_mpi_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  const char* in_flight_ = nullptr;
  int64_t entered_ = 0;  // collectives entered so far (the watchdogs compare them)
  MPI_Comm side_ = MPI_COMM_NULL;
  std::chrono::steady_clock::time_point since_;
  std::thread watchdog_;
};

}  // namespace

}  // namespace ember::detail

// The MPI module's entry points (libember_mpi, loaded by distribute/mpi_loader.cpp): the
// interface version it was built against, and a new communicator (owned by the caller, deleted
// through its virtual destructor while the module stays loaded).
extern "C" {
__attribute__((visibility("default"))) uint32_t ember_mpi_abi_v1() { return ember::detail::kMpiModuleAbi; }
__attribute__((visibility("default"))) const char* ember_mpi_version_v1() { return EMBER_VERSION; }
__attribute__((visibility("default"))) ember::Communicator* ember_mpi_communicator_v1(int64_t timeout_ms) {
  return new ember::detail::MpiCommunicator(std::chrono::milliseconds(timeout_ms));
}
}
