// MPI collectives on host buffers, with a watchdog (see mpi_communicator.h).
#include "mpi_communicator.h"

#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

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

class MpiCommunicator : public Communicator {
 public:
  explicit MpiCommunicator(std::chrono::milliseconds timeout) {
    timeout_ = timeout;
    int initialized = 0;
    EMBER_MPI_CHECK(MPI_Initialized(&initialized));
    if (!initialized) {
      int provided = 0;
      EMBER_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
      owns_mpi_ = true;
    }
    EMBER_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
    EMBER_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
    watchdog_ = std::thread([this] { watch(); });
  }
  ~MpiCommunicator() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    watchdog_.join();
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

  void watch() {
    std::unique_lock lock(mu_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds(100));
      if (in_flight_ && std::chrono::steady_clock::now() - since_ > timeout_) {
        std::fprintf(stderr,
                     "rank %d: %s stuck at step %lld for more than %lld s (another rank failed or hangs); "
                     "ending all %d ranks\n",
                     rank_, in_flight_, static_cast<long long>(step_),
                     static_cast<long long>(std::chrono::duration_cast<std::chrono::seconds>(timeout_).count()), size_);
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
  std::chrono::steady_clock::time_point since_;
  std::thread watchdog_;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(std::chrono::milliseconds timeout) {
  return std::make_unique<MpiCommunicator>(timeout);
}

}  // namespace ember::detail
