// CPU threads: set_num_threads is the process's (a new std::thread's model calls run on it, not on
// OpenMP's per-thread default), a model's own setting wins and the calling thread's is restored
// after, a predict too small to split runs on one thread, and the work estimate behind that.
#include <gtest/gtest.h>
#include <omp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <thread>
#include <utility>

#include "apps/model_zoo.h"
#include "core/cpu/cpu_load.h"
#include "test_util.h"

namespace ember {
namespace {

// Passes its input through and records the OpenMP thread count its forward ran under.
class ThreadProbe : public Layer {
 public:
  std::string type() const override { return "ThreadProbe"; }
  Shape build(const Shape& sample_shape) override { return sample_shape; }
  int seen = 0;

 protected:
  const Tensor& do_forward(const Tensor& x, bool /*training*/) override {
    seen = omp_get_max_threads();
    return x;
  }
  const Tensor& do_backward(const Tensor& dy) override { return dy; }
};

struct Probed {
  Sequential model;
  ThreadProbe* probe = nullptr;
};

// Dense(4) -> probe -> Dense(2) on 3 features: a few multiply-adds per sample.
void make(Probed& p) {
  p.model.add<Dense>(4);
  p.probe = &p.model.add<ThreadProbe>();
  p.model.add<Dense>(2);
  p.model.build(Shape{3}, 1);
  p.model.compile(std::make_unique<Adam>());
}

class Threads : public ::testing::Test {
 protected:
  void SetUp() override {
    if (omp_get_num_procs() < 2) GTEST_SKIP() << "needs 2 cores";
  }
  void TearDown() override { set_num_threads(0); }
};

TEST_F(Threads, TheProcessSettingReachesANewThread) {
  Probed p;
  make(p);
  set_num_threads(1);
  const Tensor x = test::random_tensor(Shape{8, 3}, 1);
  const Tensor y = test::cycling_labels(8, 2);
  int outside = 0;
  std::thread([&] {
    outside = omp_get_max_threads();  // OpenMP's default for a new thread: every core
    p.model.train_step(x, y);
  }).join();
  if (!std::getenv("OMP_NUM_THREADS")) {
    EXPECT_EQ(outside, omp_get_num_procs());  // OpenMP's initial default
  }
  EXPECT_NE(outside, 1) << "the test needs OpenMP's default for a new thread above 1";
  EXPECT_EQ(p.probe->seen, 1);
  EXPECT_EQ(num_threads(), 1);
}

TEST_F(Threads, AModelsOwnSettingWinsAndTheCallersIsRestored) {
  Probed p;
  make(p);
  set_num_threads(1);
  p.model.set_num_threads(2);
  EXPECT_EQ(p.model.num_threads(), 2);
  const Tensor x = test::random_tensor(Shape{8, 3}, 1);
  p.model.train_step(x, test::cycling_labels(8, 2));
  EXPECT_EQ(p.probe->seen, 2);
  EXPECT_EQ(omp_get_max_threads(), 1);  // this thread's setting, as before the call
  p.model.set_num_threads(0);
  EXPECT_EQ(p.model.num_threads(), 1);
  EXPECT_THROW(p.model.set_num_threads(-2), ArgumentError);  // -1 is kFreeCores
}

// The estimate: each parameter once per output position. The reference CNN: conv2d 320 values x
// 26 x 26 positions, conv2d_1 18,496 x 11 x 11, conv2d_2 36,928 x 3 x 3, dense 36,928, dense_1 650.
TEST_F(Threads, APredictTooSmallToSplitRunsOnOneThread) {
  Sequential cnn;
  apps::add_reference_cnn(cnn);
  EXPECT_EQ(cnn.macs_per_sample(), 0);  // before build
  cnn.build(Shape{1, 28, 28}, 1);
  EXPECT_EQ(cnn.macs_per_sample(), 320 * 676 + 18496 * 121 + 36928 * 9 + 36928 + 650);

  Probed p;
  make(p);
  set_num_threads(2);
  const int64_t per_sample = p.model.macs_per_sample();  // 3 x 4 + 4 weights and biases, then 4 x 2 + 2
  EXPECT_EQ(per_sample, 16 + 10);
  (void)p.model.predict(test::random_tensor(Shape{4, 3}, 2));
  EXPECT_EQ(p.probe->seen, 1);
  const int64_t rows = Model::kSplitMacs / per_sample + 1;  // just enough work to split
  const Tensor many = test::random_tensor(Shape{rows, 3}, 3);
  (void)p.model.predict(many, rows);
  EXPECT_EQ(p.probe->seen, 2);
  (void)p.model.predict(many, 256);  // the same rows in passes of 256: each too small to split
  EXPECT_EQ(p.probe->seen, 1);
}

// Passes its input through, running `during` (once) inside its forward: while it runs, the model's
// call holds the model.
class Hook : public Layer {
 public:
  std::string type() const override { return "Hook"; }
  Shape build(const Shape& sample_shape) override { return sample_shape; }
  std::function<void()> during;

 protected:
  const Tensor& do_forward(const Tensor& x, bool /*training*/) override {
    if (during) std::exchange(during, nullptr)();
    return x;
  }
  const Tensor& do_backward(const Tensor& dy) override { return dy; }
};

// Two threads on one model would share its activations and scratch: the second call is an Error
// that says so (was heap corruption); the claim ends with the call, also when the call throws.
TEST(OneCallAtATime, ACallFromAnotherThreadWhileOneRunsIsAnErrorNotARace) {
  Sequential m;
  m.add<Dense>(4);
  Hook& hook = m.add<Hook>();
  m.add<Dense>(2);
  m.build(Shape{3}, 1);
  m.compile(std::make_unique<Adam>());
  const Tensor x = test::random_tensor(Shape{8, 3}, 1);
  std::string other;
  hook.during = [&] {
    std::thread([&] {
      try {
        m.predict(x);
      } catch (const Error& e) {
        other = e.what();
      }
    }).join();
  };
  m.train_step(x, test::cycling_labels(8, 2));
  EXPECT_NE(other.find("predict: this model is running a call on another thread"), std::string::npos) << other;
  hook.during = [&] {  // a save from another thread would read parameters a step is writing
    std::thread([&] {
      try {
        m.save(::testing::TempDir() + "ember_one_call.safetensors");
        other = "saved";
      } catch (const Error& e) {
        other = e.what();
      }
    }).join();
  };
  m.train_step(x, test::cycling_labels(8, 2));
  EXPECT_NE(other.find("save: this model is running a call on another thread"), std::string::npos) << other;
  EXPECT_THROW(m.predict(x, /*batch_size=*/0), ArgumentError);
  std::thread([&] { EXPECT_NO_THROW(m.predict(x)); }).join();
  const Dataset d = Dataset::from_tensors(x, test::cycling_labels(8, 2));
  EXPECT_NO_THROW(m.fit(d, {.epochs = 1, .batch_size = 4, .verbose = 0}, &d));  // its validation: a call inside
}

// kFreeCores' count: /proc/stat's runnable tasks less this process's running threads.
TEST(FreeCores, CountsWhatOtherProcessesKeepBusy) {
  EXPECT_EQ(detail::procs_running_of("cpu  1 2 3\nctxt 9\nprocs_running 3\nprocs_blocked 0\n"), 3);
  EXPECT_EQ(detail::procs_running_of("cpu  1 2 3\nprocs_blocked 0\n"), -1);
  EXPECT_EQ(detail::procs_running_of("\nprocs_running \n"), -1);
  EXPECT_EQ(detail::free_cores_from(2, 1, 1, 2), 2);  // only this process runs
  EXPECT_EQ(detail::free_cores_from(2, 3, 1, 2), 1);  // two others: at least one core still
  EXPECT_EQ(detail::free_cores_from(8, 4, 2, 8), 6);
  EXPECT_EQ(detail::free_cores_from(2, 1, 3, 2), 2);    // readings a moment apart: never more than the cores
  EXPECT_EQ(detail::free_cores_from(4, 33, 1, 64), 2);  // 4 of 64 CPUs: 32 others count as 2 here
  EXPECT_EQ(detail::free_cores_from(4, 5, 1, 64), 4);   // 4 others spread over 64 CPUs: none here
}

// One busy child process per core: a model set to kFreeCores runs its next fit on one thread.
TEST_F(Threads, BusyProcessesLeaveAFreeCoresModelOneThread) {
  std::ifstream stat("/proc/stat");
  const std::string text{std::istreambuf_iterator<char>(stat), std::istreambuf_iterator<char>()};
  if (detail::procs_running_of("\n" + text) < 0) GTEST_SKIP() << "no /proc/stat here";
  // The children end with this process (or after 30 s), whatever happens to the test.
  struct Children {
    std::vector<pid_t> pids;
    ~Children() {
      for (const pid_t pid : pids) kill(pid, SIGKILL);
      for (const pid_t pid : pids) waitpid(pid, nullptr, 0);
    }
  } busy;
  for (int i = 0; i < omp_get_num_procs(); ++i) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0) << "fork failed";
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      alarm(30);
      std::atomic<uint64_t> spin{0};
      for (;;) spin.fetch_add(1, std::memory_order_relaxed);
    }
    busy.pids.push_back(pid);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the children running
  Probed p;
  make(p);
  p.model.set_num_threads(kFreeCores);
  FitOptions opt;
  opt.verbose = 0;
  opt.batch_size = 8;
  Tensor x = test::random_tensor(Shape{32, 3}, 1);
  const Dataset data = Dataset::from_tensors(x, test::cycling_labels(32, 2), {.num_classes = 2});
  p.model.fit(data, opt);
  EXPECT_EQ(detail::free_cores(5), 1);
  EXPECT_EQ(p.probe->seen, 1);
}

// Inside a model call (a fit's steps, its validation) kFreeCores keeps the outer call's count:
// a fit never changes its thread count midway.
TEST(FreeCores, ACallInsideAnotherKeepsItsCount) {
  {
    const detail::ThreadScope outer(3);
    EXPECT_EQ(detail::resolve_threads(kFreeCores, /*fresh=*/true), 3);
    const detail::ThreadScope inner(1);
    EXPECT_EQ(detail::resolve_threads(kFreeCores, true), 3);
    EXPECT_EQ(detail::resolve_threads(2, true), 2);  // an explicit count is itself
  }
  const int now = detail::resolve_threads(kFreeCores, true);  // outside any call: counted
  EXPECT_GE(now, 1);
  EXPECT_LE(now, omp_get_num_procs());
}

}  // namespace
}  // namespace ember
