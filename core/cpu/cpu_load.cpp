// free_cores (cpu_load.h): /proc/stat's runnable count against this process's own running threads.
#include "cpu_load.h"

#include <omp.h>
#include <sys/sysinfo.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

namespace ember::detail {

int procs_running_of(std::string_view proc_stat) {
  constexpr std::string_view key = "\nprocs_running ";
  const size_t at = proc_stat.find(key);
  if (at == std::string_view::npos) return -1;
  int n = 0;
  bool digits = false;
  for (size_t i = at + key.size(); i < proc_stat.size() && proc_stat[i] >= '0' && proc_stat[i] <= '9'; ++i)
    n = n * 10 + (proc_stat[i] - '0'), digits = true;
  return digits ? n : -1;
}

int free_cores_from(int cores, int running, int ours, int online) {
  const int others = std::max(running - ours, 0);
  const int mine = online > cores ? (others * cores + online / 2) / online : others;  // the share on our CPUs
  return std::clamp(cores - mine, 1, std::max(cores, 1));
}

namespace {
std::string slurp(const std::filesystem::path& path) {
  std::ifstream f(path);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// This process's threads in state R (the field after the parenthesised command name).
int ours_running() {
  int n = 0;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    const std::string stat = slurp(task.path() / "stat");
    const size_t close = stat.rfind(')');
    if (close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'R') ++n;
  }
  return n;
}
}  // namespace

int free_cores(int samples) {
  const int cores = omp_get_num_procs(), online = get_nprocs();
  std::vector<int> free;
  for (int s = 0; s < std::max(samples, 1); ++s) {
    if (s > 0) std::this_thread::sleep_for(std::chrono::microseconds(500));
    const int running = procs_running_of("\n" + slurp("/proc/stat"));
    if (running < 0) return cores;
    free.push_back(free_cores_from(cores, running, ours_running(), online));
  }
  std::nth_element(free.begin(), free.begin() + free.size() / 2, free.end());
  return free[free.size() / 2];
}

}  // namespace ember::detail
