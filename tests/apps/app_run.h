// Running the train_mnist app as a user runs it, for the app tests: the binary under test, a
// command line's exit code and output, and a checkpoint's values.
#pragma once

#include <sys/wait.h>

#include <array>
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
