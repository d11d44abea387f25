// Benchmark harness: warm-up, a synchronisation hook before the clock stops (for GPUs, whose
// launches return before the work is done: the tutorials' "28.8 us for a 500x500 matmul"),
// repeats, and robust statistics (median first: two-thread timings swing 20-40% here).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

namespace ember::bench {

struct Stats {
  double median = 0, min = 0, max = 0, mean = 0;
  int repeats = 0;
};

inline Stats summarize(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.repeats = static_cast<int>(v.size());
  s.min = v.front();
  s.max = v.back();
  s.median = v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  for (double x : v) s.mean += x;
  s.mean /= static_cast<double>(v.size());
  return s;
}

// Times `work` in milliseconds: `warmup` untimed calls, then `repeats` timed ones; `sync`
// runs inside each timed interval after `work` (e.g. cudaDeviceSynchronize) and before `work`.
inline Stats time_ms(
    const std::function<void()>& work, int warmup, int repeats, const std::function<void()>& sync = [] {}) {
  for (int i = 0; i < warmup; ++i) work();
  sync();
  std::vector<double> samples;
  samples.reserve(static_cast<size_t>(repeats));
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    work();
    sync();
    samples.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return summarize(samples);
}

// Comma-separated integers ("32,64,128") -> values; throws std::invalid_argument on junk.
inline std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = s.find(',', start);
    const std::string item = s.substr(start, end == std::string::npos ? std::string::npos : end - start);
    size_t used = 0;
    const long long v = std::stoll(item, &used);
    if (used != item.size() || v <= 0) throw std::invalid_argument("not a positive integer: '" + item + "'");
    out.push_back(v);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

}  // namespace ember::bench
