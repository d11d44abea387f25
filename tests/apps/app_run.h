// Running the train_mnist app as a user runs it, for the app tests: the binary under test, a
// command line's exit code and output, and a checkpoint's values.
#pragma once

#include <poll.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/safetensors.h"

namespace ember::test {

struct AppRun {
  int code = -1;
  std::string output;  // stdout and stderr
};

// The app under test: the one built with the tests, or EMBER_TRAIN_MNIST_BIN (a bundle moved
// to another machine, scripts/gpu_check.sh).
inline std::string train_mnist_bin() {
  const char* env = std::getenv("EMBER_TRAIN_MNIST_BIN");
  return env && *env ? env : EMBER_TRAIN_MNIST;
}

// Runs a shell command line; its exit code and its stdout and stderr together.
inline AppRun run_raw(const std::string& cmd) {
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

inline AppRun run(const std::string& args) { return run_raw(train_mnist_bin() + " " + args); }

// An app started in the background (train_mnist, or a whole command line), its stdout and stderr
// in one pipe.
class Child {
 public:
  // Runs train_mnist with `args`, or `args` as a whole shell command line when `whole_command`.
  explicit Child(const std::string& args, bool whole_command = false) {
    int fds[2];
    if (pipe(fds) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fds[1], 1);
      dup2(fds[1], 2);
      close(fds[0]);
      close(fds[1]);
      const std::string cmd = whole_command ? args : "exec " + train_mnist_bin() + " " + args;  // exec: pid = app
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
  // Reads output until it holds `needle`, the app closes its output or `limit` passes; whether it
  // was seen.
  bool wait_for(const std::string& needle, std::chrono::seconds limit = std::chrono::seconds(300)) {
    const auto until = std::chrono::steady_clock::now() + limit;
    std::array<char, 4096> buf{};
    while (output_.find(needle) == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      pollfd p{out_, POLLIN, 0};
      if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) <= 0) {
        timed_out_ = true;
        return false;
      }
      const ssize_t n = read(out_, buf.data(), buf.size());
      if (n <= 0) return false;
      output_.append(buf.data(), static_cast<size_t>(n));
    }
    return true;
  }
  const std::string& output() const { return output_; }
  pid_t pid() const { return pid_; }
  void signal(int sig) const { kill(pid_, sig); }
  // Whether the app still runs (an exited one stays a zombie until finish() reaps it).
  bool running() const {
    siginfo_t info{};
    return waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == 0;
  }
  // Waits for the end: the exit code (128 + N when killed by signal N) and all output. An app
  // whose output has not ended within `limit` is killed (SIGKILL: 137), not waited for for ever.
  AppRun finish(std::chrono::seconds limit = std::chrono::seconds(300)) {
    timed_out_ = false;
    wait_for(std::string(1, '\0'), limit);  // to the end of its output
    if (timed_out_) kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
    reaped_ = true;
    return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), output_};
  }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
  bool reaped_ = false, timed_out_ = false;
  std::string output_;
};

// Every f32 value of a checkpoint, tensor after tensor in the file's order.
inline std::vector<float> all_values(const std::string& path) {
  std::vector<float> out;
  for (const auto& [name, t] : read_safetensors(path).tensors)
    if (t.dtype() == DType::F32) {
      const auto v = t.to_vector();
      out.insert(out.end(), v.begin(), v.end());
    }
  return out;
}

}  // namespace ember::test
