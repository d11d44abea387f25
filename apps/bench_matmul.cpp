// bench_matmul: the CPU-vs-GPU matmul experiment of the TensorFlow tutorials, timed right:
// warm-up, synchronisation before the clock stops, median of repeats, GFLOP/s and speed-up.
//   bench_matmul [--sizes 50,100,500,1000,2000,5000,7000,10000] [--csv out.csv]
// The naive triple loop runs only up to --naive-max (default 1000; it is O(n^3) at ~1 GFLOP/s).
// --bf16 adds the CPU's bf16 product (the mixed_bf16 policy's GEMM, layers/cpu/matmul_bf16.h: bf16
// operands converted beforehand, fp32 accumulation and result), the peak its steps are measured against.
#include <cstdio>

#include "apps/bench_gpu_matmul.h"
#include "apps/cli.h"
#include "apps/paths.h"
#include "bench/harness.h"
#include "ember.h"
#include "layers/cpu/matmul_bf16.h"

namespace {

void naive_matmul(const float* a, const float* b, float* c, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0;
      for (int64_t k = 0; k < n; ++k) acc += a[i * n + k] * b[k * n + j];
      c[i * n + j] = acc;
    }
}

std::string num(double v, const char* f = "%.3f") {
  char buf[32];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ember;
  std::string sizes = "50,100,500,1000,2000,5000,7000,10000", csv;
  int64_t naive_max = 1000;
  int threads = 0;
  bool bf16 = false;
  CLI::App app{"CPU vs GPU square matmul, synchronised and warmed up (medians).", "bench_matmul"};
  ember::apps::set_up_help(app, "  0  success\n  1  runtime error\n  2  bad command line");
  app.option_defaults()->always_capture_default();
  app.add_option("--sizes", sizes, "Comma-separated matrix sizes")
      ->type_name("LIST")
      ->check(ember::apps::integer_list_in(1, 65536));
  app.add_option("--naive-max", naive_max, "Largest size for the naive triple loop (O(n^3) at ~1 GFLOP/s)")
      ->check(ember::apps::integer_in(0, int64_t{1} << 20));
  app.add_option("--threads", threads, "CPU threads")
      ->check(ember::apps::integer_in(0, 4096))
      ->default_str("all cores");
  app.add_flag("--bf16", bf16, "Also time the CPU's bf16 product (AVX512-BF16 or AMX; operands converted beforehand)");
  app.add_option("--csv", csv, "Also write the table as CSV to this path")->type_name("PATH");
  if (const int code = ember::apps::parse_command_line(app, argc, argv); code >= 0) return code;
  try {
    if (!csv.empty()) check_output_path(csv, "--csv");  // now, not after the benchmark
    const std::vector<int64_t> ns = bench::parse_list(sizes);
    set_num_threads(threads);
    check_cpu_support();
    std::string why;
    std::printf("bench_matmul: %d CPU threads (oneDNN sgemm); GPU: %s\n", num_threads(),
                cuda_available() ? cuda_status().gpus[0].name.c_str() : cuda_status().reason.c_str());
    if (bf16 && !cpu_bf16().available) throw DeviceError("--bf16: this CPU has " + cpu_bf16().isa);
    if (bf16) std::printf("bf16 columns: the product on %s\n", cpu_bf16().isa.c_str());
    const std::string header =
        "n,naive_ms,cpu_ms,cpu_gflops,gpu_ms,gpu_gflops,gpu_with_copies_ms,gpu_launch_only_ms,gpu_speedup,bf16_ms,bf16_"
        "gflops";
    std::vector<std::string> rows;
    std::printf("%6s %11s %11s %10s %11s %10s %13s %13s %8s\n", "n", "naive ms", "cpu ms", "cpu GF/s", "gpu ms",
                "gpu GF/s", "gpu+copy ms", "launch-only", "speedup");
    for (int64_t n : ns) {
      Tensor a = Tensor::empty(Shape{n, n}), b = Tensor::empty(Shape{n, n}), c = Tensor::empty(Shape{n, n});
      Rng rng(static_cast<uint64_t>(n));
      for (int64_t i = 0; i < n * n; ++i) a.f32()[i] = rng.uniform(-1, 1), b.f32()[i] = rng.uniform(-1, 1);
      const double flop = 2.0 * double(n) * double(n) * double(n);
      // Enough repeats for a stable median, few enough that 10000^3 stays under a minute.
      const int repeats = n <= 500 ? 20 : n <= 2000 ? 7 : 3;
      std::string naive = "";
      if (n <= naive_max)
        naive = num(bench::time_ms([&] { naive_matmul(a.f32(), b.f32(), c.f32(), n); }, 1, n <= 500 ? 5 : 1).median);
      const bench::Stats cpu = bench::time_ms([&] { matmul(a, b, c); }, 1, repeats);
      const auto gpu = bench::gpu_matmul(n, 2, repeats, &why);
      std::string b_ms, b_gf;
      if (bf16) {
        std::vector<cpu::bf16> a16(size_t(n * n)), b16(size_t(n * n));
        cpu::to_bf16(a.f32(), a16.data(), n * n);
        cpu::to_bf16(b.f32(), b16.data(), n * n);
        const bench::Stats t = bench::time_ms(
            [&] { cpu::matmul_bf16(false, false, n, n, n, a16.data(), b16.data(), c.f32()); }, 1, repeats);
        b_ms = num(t.median);
        b_gf = num(flop / t.median / 1e6, "%.1f");
      }
      const double cpu_gf = flop / cpu.median / 1e6;
      std::string g_ms, g_gf, g_copy, g_launch, speed;
      if (gpu) {
        g_ms = num(gpu->kernel.median);
        g_gf = num(flop / gpu->kernel.median / 1e6, "%.1f");
        g_copy = num(gpu->with_copies.median);
        g_launch = num(gpu->launch_only.median, "%.4f");
        speed = num(cpu.median / gpu->kernel.median, "%.1f");
      }
      std::printf("%6lld %11s %11.3f %10.1f %11s %10s %13s %13s %8s%s\n", static_cast<long long>(n),
                  naive.empty() ? "-" : naive.c_str(), cpu.median, cpu_gf, g_ms.empty() ? "-" : g_ms.c_str(),
                  g_gf.empty() ? "-" : g_gf.c_str(), g_copy.empty() ? "-" : g_copy.c_str(),
                  g_launch.empty() ? "-" : g_launch.c_str(), speed.empty() ? "-" : speed.c_str(),
                  bf16 ? ("   bf16 " + b_ms + " ms " + b_gf + " GF/s").c_str() : "");
      std::fflush(stdout);
      rows.push_back(std::to_string(n) + "," + naive + "," + num(cpu.median) + "," + num(cpu_gf, "%.1f") + "," + g_ms +
                     "," + g_gf + "," + g_copy + "," + g_launch + "," + speed + "," + b_ms + "," + b_gf);
    }
    if (!why.empty()) std::printf("GPU columns empty: %s\n", why.c_str());
    if (!csv.empty()) apps::write_csv(csv, header, rows);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_matmul: error: %s\n", e.what());
    return 1;
  }
}
