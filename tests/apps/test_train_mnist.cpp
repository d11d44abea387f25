// The train_mnist app, run as a user runs it: bad flags exit 2 with one line, missing data
// exits 1 naming the file, and a short run on synthetic MNIST-format data learns.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include "ember.h"
#include "idx_fixtures.h"

namespace {

struct AppRun {
  int code = -1;
  std::string output;  // stdout and stderr
};

// The app under test: the one built with the tests, or EMBER_TRAIN_MNIST_BIN (a bundle moved
// to another machine, scripts/gpu_check.sh).
std::string train_mnist_bin() {
  const char* env = std::getenv("EMBER_TRAIN_MNIST_BIN");
  return env && *env ? env : EMBER_TRAIN_MNIST;
}

// Runs a shell command line; its exit code and its stdout and stderr together.
AppRun run_raw(const std::string& cmd) {
  AppRun r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

AppRun run(const std::string& args) { return run_raw(train_mnist_bin() + " " + args); }

TEST(TrainMnist, BadFlagsExitWithCode2AndOneLine) {
  for (const char* args : {"--epochs 0",
                           "--epochs abc",
                           "--batch-size 0",
                           "--no-such-flag",
                           "--dataset cifar",
                           "--device tpu",
                           "--lr -1",
                           "--threads -3",
                           "--seed -5",
                           "--seed 99999999999999999999999",
                           "--lr nan",
                           "--lr 1e39",
                           "--lr inf",
                           "--collective-timeout nan",
                           "--gpu-memory-fraction inf",
                           "--save ''",
                           "--history ''",
                           "--checkpoint-dir ''",
                           "--inject-fault x:y",
                           "--inject-fault 1:2:sleep"}) {
    const AppRun r = run(args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << args << ": " << r.output;
  }
}

// Every output path is checked before the first step: a special file is refused (and left as
// it was), not replaced by a file after training. Private special files only, never /dev's.
TEST(TrainMnist, OutputPathsAreCheckedBeforeTrainingAndSpecialFilesAreNeverReplaced) {
  namespace fs = std::filesystem;
  const std::string dir = ember::test::temp_dir("outputs");
  ember::test::write_synthetic_mnist(dir, 64, 32, /*gzip=*/false);
  ASSERT_EQ(::mkfifo((dir + "/fifo").c_str(), 0644), 0);
  fs::create_directory(dir + "/folder");
  const bool node = ::mknod((dir + "/null").c_str(), S_IFCHR | 0644, makedev(1, 3)) == 0;  // root only
  const std::string base = "--device cpu --epochs 1 --batch-size 32 --data-dir " + dir + " ";
  std::vector<std::pair<std::string, std::string>> cases = {
      {"--save " + dir + "/fifo", "is a FIFO"},
      {"--history " + dir + "/folder", "is a directory"},
      {"--save " + dir + "/missing/m.safetensors", "does not exist"},
      {"--history /proc/ember-test.json", "cannot create a file"},
      {"--resume " + dir + "/fifo", "not a regular file"}};  // would block in open() for ever
  if (node) cases.emplace_back("--save " + dir + "/null", "is a device node");
  for (const auto& [args, needle] : cases) {
    const AppRun r = run(base + args);
    EXPECT_EQ(r.code, 1) << args << ": " << r.output;
    EXPECT_NE(r.output.find(needle), std::string::npos) << args << ": " << r.output;
    EXPECT_EQ(r.output.find("Epoch 1/1"), std::string::npos) << args << ": trained first";
  }
  EXPECT_TRUE(fs::is_fifo(dir + "/fifo"));
  EXPECT_TRUE(fs::is_directory(dir + "/folder"));
  if (node) {
    EXPECT_TRUE(fs::is_character_file(dir + "/null"));
  }
  // A link is followed to its (new) target and stays a link.
  fs::create_symlink("history-target.json", dir + "/history-link.json");
  const AppRun r = run(base + "--quiet --history " + dir + "/history-link.json");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(dir + "/history-link.json")));
  std::ifstream f(dir + "/history-target.json");
  EXPECT_EQ(nlohmann::json::parse(f)["history"].size(), 1u);
  fs::remove_all(dir);
}

TEST(TrainMnist, ACheckpointDirOfAnotherRunIsRefusedUnlessResumeOrOverwrite) {
  namespace fs = std::filesystem;
  const std::string dir = ember::test::temp_dir("ckdir");
  ember::test::write_synthetic_mnist(dir, 64, 32, /*gzip=*/false);
  const std::string base =
      "--device cpu --quiet --batch-size 32 --data-dir " + dir + " --checkpoint-dir " + dir + "/ck";
  ASSERT_EQ(run(base + " --epochs 1").code, 0);
  ASSERT_TRUE(fs::exists(dir + "/ck/best.safetensors"));
  const auto written = fs::last_write_time(dir + "/ck/epoch-001.safetensors");
  const AppRun again = run(base + " --epochs 1");
  EXPECT_EQ(again.code, 1) << again.output;
  EXPECT_NE(again.output.find("--overwrite"), std::string::npos) << again.output;
  EXPECT_EQ(fs::last_write_time(dir + "/ck/epoch-001.safetensors"), written) << "the old run's checkpoint was touched";
  EXPECT_EQ(run(base + " --epochs 2 --resume " + dir + "/ck/epoch-001.safetensors").code, 0);
  EXPECT_TRUE(fs::exists(dir + "/ck/epoch-002.safetensors"));
  EXPECT_EQ(run(base + " --epochs 1 --overwrite").code, 0);
  EXPECT_FALSE(fs::exists(dir + "/ck/epoch-002.safetensors")) << "an epoch file of the replaced run was left";
  EXPECT_TRUE(fs::exists(dir + "/ck/epoch-001.safetensors"));
  fs::remove_all(dir);
}

TEST(TrainMnist, HelpListsFlagsWithDefaults) {
  const AppRun r = run("--help");
  EXPECT_EQ(r.code, 0);
  for (const char* flag : {"--device", "--epochs", "--batch-size", "--lr", "--seed", "--data-dir", "--dataset",
                           "--steps", "--threads", "--history", "--quiet"})
    EXPECT_NE(r.output.find(flag), std::string::npos) << flag;
  EXPECT_NE(r.output.find("64"), std::string::npos) << "batch size default";
}

TEST(TrainMnist, MissingDataExitsWith1AndSaysHowToFetch) {
  const std::string dir = ember::test::temp_dir("empty");
  const AppRun r = run("--device cpu --data-dir " + dir);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("train-images-idx3-ubyte"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("fetch_data.sh"), std::string::npos) << r.output;
  std::filesystem::remove_all(dir);
}

TEST(TrainMnist, ShortRunLowersTheLossAndWritesHistory) {
  const std::string dir = ember::test::temp_dir("synth");
  ember::test::write_synthetic_mnist(dir, 640, 200, /*gzip=*/true);
  const std::string history = dir + "/history.json";
  const AppRun r = run("--device cpu --epochs 3 --batch-size 32 --seed 2 --data-dir " + dir + " --history " + history);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("Total params: 93,322"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Epoch 3/3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("val_accuracy"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find('\r'), std::string::npos) << "no carriage returns when stdout is not a terminal";
  std::ifstream f(history);
  const nlohmann::json j = nlohmann::json::parse(f);
  ASSERT_EQ(j["history"].size(), 3u);
  const double first = j["history"][0]["loss"], last = j["history"][2]["loss"];
  EXPECT_LT(last, 0.5 * first) << r.output;
  EXPECT_GT(double(j["test"]["accuracy"]), 0.9) << r.output;  // 10 well-separated classes
  EXPECT_GT(double(j["history"][0]["images_per_second"]), 0.0);
  std::filesystem::remove_all(dir);
}

TEST(TrainMnist, StepsLimitAndQuiet) {
  const std::string dir = ember::test::temp_dir("steps");
  ember::test::write_synthetic_mnist(dir, 320, 50, /*gzip=*/false);
  // --epochs twice: the last wins (scripts/train.sh sets --epochs 5 before the user's flags).
  const AppRun r =
      run("--device cpu --epochs 5 --epochs 2 --steps 3 --quiet --data-dir " + dir + " --history " + dir + "/h.json");
  ASSERT_EQ(r.code, 0) << r.output;
  std::ifstream f(dir + "/h.json");
  EXPECT_EQ(int(nlohmann::json::parse(f)["epochs"]), 2);
  EXPECT_EQ(r.output.find("Epoch"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Test accuracy"), std::string::npos) << r.output;
  std::filesystem::remove_all(dir);
}

TEST(TrainMnist, GpuRequestWithoutGpuFallsBackOrFailsWhenStrict) {
  const std::string dir = ember::test::temp_dir("gpu");
  ember::test::write_synthetic_mnist(dir, 64, 16, false);
  const AppRun soft = run("--device gpu --steps 1 --epochs 1 --quiet --data-dir " + dir);
  EXPECT_EQ(soft.code, 0) << soft.output;
  EXPECT_NE(soft.output.find("running on cpu"), std::string::npos) << soft.output;
  const AppRun strict = run("--device gpu --strict-placement --steps 1 --data-dir " + dir);
  EXPECT_EQ(strict.code, 1) << strict.output;
  EXPECT_NE(strict.output.find("cannot place on cuda:0"), std::string::npos) << strict.output;
  std::filesystem::remove_all(dir);
}

TEST(TrainMnist, GpuReplicasWithoutGpuFallBackToCpuReplicasOrFailWhenStrict) {
  if (ember::cuda_available()) GTEST_SKIP() << "a GPU is usable here: the fallback cannot be produced";
  const std::string dir = ember::test::temp_dir("gpus");
  ember::test::write_synthetic_mnist(dir, 64, 16, false);
  const std::string args = " --strategy mirrored --gpus 0,1 --steps 1 --epochs 1 --batch-size 16 --data-dir " + dir;
  const AppRun soft = run("--device gpu" + args);
  EXPECT_EQ(soft.code, 0) << soft.output;
  EXPECT_NE(soft.output.find("2 CPU replicas instead"), std::string::npos) << soft.output;
  EXPECT_NE(soft.output.find("mirrored (2 cpu replicas)"), std::string::npos) << soft.output;
  EXPECT_EQ(run("--device gpu --strict-placement" + args).code, 1);
  EXPECT_EQ(run("--device cpu" + args).code, 1);         // GPU replicas asked for on the cpu
  EXPECT_EQ(run("--gpus 0 --data-dir " + dir).code, 2);  // --gpus without --strategy mirrored
  EXPECT_EQ(run("--strategy mirrored --gpus 0,x --data-dir " + dir).code, 2);
  std::filesystem::remove_all(dir);
}

}  // namespace

namespace {

std::vector<float> all_values(const std::string& path) {
  std::vector<float> out;
  for (const auto& [name, t] : ember::read_safetensors(path).tensors)
    if (t.dtype() == ember::DType::F32) {
      const auto v = t.to_vector();
      out.insert(out.end(), v.begin(), v.end());
    }
  return out;
}

TEST(TrainMnist, ResumeEqualsUninterruptedAndCheckpointsAreUsable) {
  const std::string dir = ember::test::temp_dir("resume");
  ember::test::write_synthetic_mnist(dir, 256, 64, false);
  const std::string common = " --device cpu --batch-size 32 --seed 3 --quiet --data-dir " + dir;
  ASSERT_EQ(run("--epochs 2 --save " + dir + "/straight.st" + common).code, 0);
  ASSERT_EQ(run("--epochs 1 --save " + dir + "/half.st --checkpoint-dir " + dir + "/ckpts" + common).code, 0);
  EXPECT_TRUE(std::filesystem::exists(dir + "/ckpts/epoch-001.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/ckpts/best.safetensors"));
  const AppRun resumed = run("--epochs 2 --resume " + dir + "/half.st --save " + dir + "/resumed.st" + common);
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  const auto a = all_values(dir + "/straight.st"), b = all_values(dir + "/resumed.st");
  ASSERT_EQ(a.size(), b.size());
  EXPECT_TRUE(a == b) << "weights and optimizer state after resume differ from the uninterrupted run";

  const AppRun eval = run("--evaluate-only --resume " + dir + "/straight.st" + common);
  EXPECT_EQ(eval.code, 0) << eval.output;
  EXPECT_NE(eval.output.find("Test accuracy"), std::string::npos) << eval.output;
  EXPECT_EQ(run("--evaluate-only" + common).code, 2);  // needs --resume

  // A corrupt checkpoint: one line, exit 1, and the file named.
  std::ofstream(dir + "/bad.st") << "not a checkpoint at all";
  const AppRun bad = run("--resume " + dir + "/bad.st" + common);
  EXPECT_EQ(bad.code, 1) << bad.output;
  EXPECT_NE(bad.output.find("bad.st"), std::string::npos) << bad.output;
  std::filesystem::remove_all(dir);
}

}  // namespace

namespace {

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) worst = std::max(worst, std::abs(double(a[i]) - b[i]));
  return worst;
}

// Tolerance for N replicas vs one: see kReplicaTolerance in test_distribute.cpp (measured 6e-8
// there); 40 Adam steps of the reference CNN here.
constexpr double kAppReplicaTolerance = 1e-5;

class TrainMnistStrategies : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ember::test::temp_dir("strat");
    ember::test::write_synthetic_mnist(dir_, 320, 64, false);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string common() const {
    return " --device cpu --epochs 1 --steps 40 --batch-size 32 --seed 4 --data-dir " + dir_;
  }
  std::string dir_;
};

TEST_F(TrainMnistStrategies, MirroredEqualsDefault) {
  ASSERT_EQ(run("--quiet --save " + dir_ + "/default.st" + common()).code, 0);
  const AppRun m = run("--strategy mirrored --replicas 2 --save " + dir_ + "/mirrored.st" + common());
  ASSERT_EQ(m.code, 0) << m.output;
  EXPECT_NE(m.output.find("per replica"), std::string::npos) << m.output;
  EXPECT_LE(max_abs_diff(all_values(dir_ + "/default.st"), all_values(dir_ + "/mirrored.st")), kAppReplicaTolerance);
  EXPECT_EQ(run("--strategy mirrored --replicas 3" + common()).code, 1);  // 32 does not split over 3
}

// Mirrored CPU replicas share one thread, so no collective can notice a hung one: the replica
// deadline (--collective-timeout) ends the job naming it, instead of hanging for good.
TEST_F(TrainMnistStrategies, AHungCpuReplicaEndsTheMirroredJobNamingIt) {
  const auto t0 = std::chrono::steady_clock::now();
  const AppRun m = run("--strategy mirrored --replicas 2 --collective-timeout 1 --inject-fault 1:3:hang" + common());
  EXPECT_EQ(m.code, 3) << m.output;
  EXPECT_NE(m.output.find("mirrored: replica 1 (cpu) has not finished its part of step 3 within 1 s"),
            std::string::npos)
      << m.output;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));  // not the injected hour
}

#ifdef EMBER_MPIEXEC
std::string mpirun(int np) {
  // As root OpenMPI needs --allow-run-as-root; 2 cores need --oversubscribe for np > 2.
  return std::string(EMBER_MPIEXEC) + " --allow-run-as-root --oversubscribe --bind-to none -np " + std::to_string(np) +
         " " + train_mnist_bin();
}

TEST_F(TrainMnistStrategies, MultiWorkerOverMpiEqualsDefaultAndOnlyRankZeroPrints) {
  ASSERT_EQ(run("--quiet --save " + dir_ + "/default.st" + common()).code, 0);
  const AppRun m = run_raw(mpirun(2) + " --strategy multiworker --threads 1 --save " + dir_ + "/mpi.st" + common());
  ASSERT_EQ(m.code, 0) << m.output;
  size_t epochs = 0;
  for (size_t pos = m.output.find("Epoch 1/1"); pos != std::string::npos; pos = m.output.find("Epoch 1/1", pos + 1))
    ++epochs;
  EXPECT_EQ(epochs, 1u) << m.output;
  EXPECT_NE(m.output.find("2 ranks, MPI"), std::string::npos) << m.output;
  EXPECT_LE(max_abs_diff(all_values(dir_ + "/default.st"), all_values(dir_ + "/mpi.st")), kAppReplicaTolerance);
}

TEST_F(TrainMnistStrategies, AFailingRankEndsTheJobNamingIt) {
  const auto t0 = std::chrono::steady_clock::now();
  const AppRun m =
      run_raw(mpirun(2) + " --strategy multiworker --threads 1 --collective-timeout 20 --inject-fault 1:3" + common());
  EXPECT_NE(m.code, 0) << m.output;
  EXPECT_NE(m.output.find("rank 1 failed"), std::string::npos) << m.output;
  EXPECT_NE(m.output.find("step 3"), std::string::npos) << m.output;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(60));
}

TEST_F(TrainMnistStrategies, AHungRankIsNamedByTheWatchdogAndTheJobEnds) {
  const auto t0 = std::chrono::steady_clock::now();
  const AppRun m = run_raw(
      mpirun(2) + " --strategy multiworker --threads 1 --collective-timeout 2 --inject-fault 1:3:hang" + common());
  EXPECT_NE(m.code, 0) << m.output;
  // Named by the rank that waited, and the rank that hung is named too (not "another rank").
  EXPECT_NE(m.output.find("rank 0: all_reduce at step 3 waited more than 2 s: rank 1 (at step 3) never reached it"),
            std::string::npos)
      << m.output;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(60));  // not the injected hour
}
#endif

// GPU replicas at world size 1 (any single GPU): mirrored over NCCL and multiworker over NCCL
// bootstrapped by MPI run the same ops in the same order as the default strategy on that GPU;
// with deterministic cuDNN algorithms the parameters are the same bits.
TEST_F(TrainMnistStrategies, GpuStrategiesAtWorldSizeOneEqualDefaultOnTheGpu) {
  if (!ember::cuda_available()) GTEST_SKIP() << "no usable GPU: " << ember::cuda_status().reason;
  const std::string gpu =
      " --device gpu --strict-placement --deterministic --epochs 1 --steps 40 --batch-size 32 "
      "--seed 4 --data-dir " +
      dir_;
  ASSERT_EQ(run("--quiet --save " + dir_ + "/default.st" + gpu).code, 0);
  const AppRun m = run("--strategy mirrored --gpus 0 --save " + dir_ + "/mirrored.st" + gpu);
  ASSERT_EQ(m.code, 0) << m.output;
  EXPECT_NE(m.output.find("NCCL"), std::string::npos) << m.output;
  EXPECT_EQ(max_abs_diff(all_values(dir_ + "/default.st"), all_values(dir_ + "/mirrored.st")), 0.0);
#ifdef EMBER_MPIEXEC  // the GPU check's bundle is built without MPI: there, mirrored only
  const AppRun w = run_raw(mpirun(1) + " --strategy multiworker --save " + dir_ + "/mpi.st" + gpu);
  ASSERT_EQ(w.code, 0) << w.output;
  EXPECT_NE(w.output.find("NCCL over MPI"), std::string::npos) << w.output;
  EXPECT_EQ(max_abs_diff(all_values(dir_ + "/default.st"), all_values(dir_ + "/mpi.st")), 0.0);
#endif
}

}  // namespace

namespace {

TEST_F(TrainMnistStrategies, MirroredResumeEqualsUninterruptedBitForBit) {
  const std::string m =
      " --strategy mirrored --replicas 2 --quiet --device cpu --batch-size 32 --seed 6 --data-dir " + dir_;
  ASSERT_EQ(run("--epochs 2 --save " + dir_ + "/straight.st" + m).code, 0);
  ASSERT_EQ(run("--epochs 1 --save " + dir_ + "/half.st" + m).code, 0);
  const AppRun r = run("--epochs 2 --resume " + dir_ + "/half.st --save " + dir_ + "/resumed.st" + m);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(all_values(dir_ + "/straight.st") == all_values(dir_ + "/resumed.st"));
}

}  // namespace

// Signals: a real SIGINT/SIGTERM sent to a running train_mnist (as Ctrl-C or a scheduler does).
namespace {

// train_mnist started in the background, its stdout and stderr in one pipe.
class Child {
 public:
  explicit Child(const std::string& args) {
    int fds[2];
    if (pipe(fds) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fds[1], 1);
      dup2(fds[1], 2);
      close(fds[0]);
      close(fds[1]);
      const std::string cmd = "exec " + train_mnist_bin() + " " + args;  // exec: the pid is the app's
      execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    close(fds[1]);
    out_ = fds[0];
  }
  ~Child() {
    if (out_ >= 0) close(out_);
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  // Reads output until it holds `needle` or the app closes its output; whether it was seen.
  bool wait_for(const std::string& needle) {
    std::array<char, 4096> buf{};
    while (output_.find(needle) == std::string::npos) {
      const ssize_t n = read(out_, buf.data(), buf.size());
      if (n <= 0) return false;
      output_.append(buf.data(), static_cast<size_t>(n));
    }
    return true;
  }
  void signal(int sig) const { kill(pid_, sig); }
  // Whether the app still runs (an exited one stays a zombie until finish() reaps it).
  bool running() const {
    siginfo_t info{};
    return waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == 0;
  }
  // Waits for the end: the exit code (128 + N when killed by signal N) and all output.
  AppRun finish() {
    wait_for(std::string(1, '\0'));  // to the end of its output
    int status = 0;
    waitpid(pid_, &status, 0);
    reaped_ = true;
    return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), output_};
  }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
  bool reaped_ = false;
  std::string output_;
};

class TrainMnistSignals : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ember::test::temp_dir("sig");
    // 125 steps per epoch at batch 32: a signal sent when epoch 2 starts lands inside it.
    ember::test::write_synthetic_mnist(dir_, 4000, 100, false);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string common() const { return " --device cpu --batch-size 32 --seed 7 --data-dir " + dir_; }
  std::string dir_;
};

TEST_F(TrainMnistSignals, SigintFinishesTheStepSavesAResumableCheckpointAndExits130) {
  ASSERT_EQ(run("--epochs 3 --quiet --save " + dir_ + "/straight.st" + common()).code, 0);
  Child c("--epochs 3 --checkpoint-dir " + dir_ + "/ck --save " + dir_ + "/int.st" + common());
  ASSERT_TRUE(c.wait_for("Epoch 2/3"));
  c.signal(SIGINT);
  const AppRun r = c.finish();
  EXPECT_EQ(r.code, 130) << r.output;
  EXPECT_NE(r.output.find("stopped by SIGINT at epoch 2, step "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("/125: saved a resumable checkpoint to " + dir_ + "/ck/interrupted.safetensors and " + dir_ +
                          "/int.st"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("Epoch 3/3"), std::string::npos) << r.output;
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/ck/epoch-001.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/ck/epoch-002.safetensors"));
  const std::map<std::string, std::string> meta = ember::read_safetensors(dir_ + "/int.st").metadata;
  EXPECT_EQ(meta.at("epochs_done"), "1");
  EXPECT_GT(std::stoi(meta.at("batches_done")), 0);

  // Another batch size cannot continue mid-epoch; the same one continues bit for bit.
  const AppRun other = run("--epochs 3 --resume " + dir_ + "/int.st --device cpu --batch-size 64 --data-dir " + dir_);
  EXPECT_EQ(other.code, 1) << other.output;
  EXPECT_NE(other.output.find("resume it with that batch size"), std::string::npos) << other.output;
  const AppRun resumed = run("--epochs 3 --quiet --resume " + dir_ + "/ck/interrupted.safetensors --checkpoint-dir " +
                             dir_ + "/ck --save " + dir_ + "/resumed.st" + common());
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  EXPECT_TRUE(all_values(dir_ + "/straight.st") == all_values(dir_ + "/resumed.st"))
      << "a run stopped by SIGINT and resumed differs from the uninterrupted one";
}

TEST_F(TrainMnistSignals, SigtermExits143AndSaysNothingWasSavedWithoutOutputs) {
  Child c("--epochs 3" + common());
  ASSERT_TRUE(c.wait_for("Epoch 2/3"));
  c.signal(SIGTERM);
  const AppRun r = c.finish();
  EXPECT_EQ(r.code, 143) << r.output;
  EXPECT_NE(r.output.find("stopped by SIGTERM"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("nothing saved (no --save or --checkpoint-dir)"), std::string::npos) << r.output;
}

TEST_F(TrainMnistSignals, ASecondSignalExitsAtOnce) {
  // One batch of all 4000 images: epoch 2 is one step of ~0.5 s or more, which starts as
  // "Epoch 2/3" is printed. A signal still pending when the next is sent is merged with it, so
  // they go every 50 ms until the app is gone: the first one delivered asks for a stop, the
  // next (50 ms later, the step still running) must end it at once.
  Child c("--epochs 3 --batch-size 4000 --device cpu --seed 7 --save " + dir_ + "/never.st --data-dir " + dir_);
  ASSERT_TRUE(c.wait_for("Epoch 2/3"));
  for (int i = 0; i < 200 && c.running(); ++i) {
    c.signal(SIGINT);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const AppRun r = c.finish();
  EXPECT_EQ(r.code, 130) << r.output;
  EXPECT_NE(r.output.find("second signal: exiting at once"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/never.st"));
}

// A NaN loss ends the run (exit 1) naming the step; nothing of the diverged model is saved.
TEST_F(TrainMnistSignals, ANonFiniteLossStopsTheRunNamingTheStepAndSavesNothing) {
  ASSERT_EQ(run("--epochs 1 --quiet --limit-train 320 --save " + dir_ + "/e1.st" + common()).code, 0);
  ember::SafeTensors st = ember::read_safetensors(dir_ + "/e1.st");
  for (auto& [name, t] : st.tensors)
    if (name == "dense_1/bias") t.f32()[0] = std::numeric_limits<float>::quiet_NaN();
  ember::write_safetensors(dir_ + "/nan.st", st);
  const AppRun r = run("--epochs 3 --limit-train 320 --resume " + dir_ + "/nan.st --save " + dir_ +
                       "/out.st --checkpoint-dir " + dir_ + "/ck" + common());
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("the loss became NaN at epoch 2, step 1/10"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("nothing was saved"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/out.st"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/ck/epoch-002.safetensors"));
}

}  // namespace
