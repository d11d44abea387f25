// bench_conv: the tutorials' convolution experiment: N random 128x128 RGB images through a
// Conv2D of 32 filters of 8x8, forward + backward + Adam update, per N (medians).
//   bench_conv [--images 20,40,60,80,100,200] [--csv out.csv]
#include "apps/cli.h"

#include <cstdio>
#include <fstream>

#include "bench/harness.h"
#include "ember.h"

int main(int argc, char** argv) {
  using namespace ember;
  std::string images = "20,40,60,80,100,200", csv;
  int repeats = 10, threads = 0;
  CLI::App app{"Conv2D(32, 8x8) training step on N random 128x128x3 images (medians).", "bench_conv"};
  app.option_defaults()->always_capture_default();
  app.add_option("--images", images, "Comma-separated image counts N");
  app.add_option("--repeats", repeats, "Timed repeats per N")->check(CLI::Range(1, 10000));
  app.add_option("--threads", threads, "CPU threads (0: all cores)")->check(CLI::Range(0, 4096));
  app.add_option("--csv", csv, "Also write the results as CSV to this path");
  if (const int code = ember::apps::parse_command_line(app, argc, argv); code >= 0) return code;
  try {
    set_num_threads(threads);
    enable_flush_to_zero();
    check_cpu_support();
    std::printf("bench_conv: Conv2D 32x8x8 on 128x128x3, cpu, %d threads; GPU: %s\n", num_threads(),
                cuda_available() ? "not in this version's layers" : cuda_status().reason.c_str());
    std::printf("%6s %10s %10s %10s\n", "N", "median ms", "min ms", "GFLOP/s");
    std::vector<std::string> rows;
    for (int64_t n : bench::parse_list(images)) {
      Conv2D conv(32, Size2{8, 8});
      const Shape out = conv.build(Shape{3, 128, 128});
      std::vector<Tensor> p, g;
      Tensor params = Tensor::zeros(Shape{conv.num_params()}), grads = Tensor::zeros(Shape{conv.num_params()});
      int64_t off = 0;
      for (const auto& spec : conv.param_specs()) {
        p.push_back(params.view(off, spec.shape));
        g.push_back(grads.view(off, spec.shape));
        off += spec.shape.numel();
      }
      conv.bind(p, g);
      Rng rng(1);
      conv.init_params(rng);
      Tensor x = Tensor::empty(Shape{n, 3, 128, 128}), dy = Tensor::empty(out.with_batch(n));
      for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = rng.uniform();
      for (int64_t i = 0; i < dy.numel(); ++i) dy.f32()[i] = rng.uniform(-1e-3f, 1e-3f);
      conv.set_needs_input_grad(true);  // a layer inside a network computes its input gradient
      Adam adam;
      const bench::Stats s = bench::time_ms(
          [&] {
            conv.forward(x, true);
            conv.backward(dy);
            adam.step(params, grads);
          },
          2, repeats);
      // forward, input gradient and weight gradient: 3 x 2 x N x K x C x R x S x P x Q
      const double flop = 3.0 * 2.0 * double(n) * 32 * 3 * 64 * double(out[1] * out[2]);
      std::printf("%6lld %10.3f %10.3f %10.1f\n", static_cast<long long>(n), s.median, s.min, flop / s.median / 1e6);
      std::fflush(stdout);
      char row[160];
      std::snprintf(row, sizeof row, "cpu,%lld,%.4f,%.4f,%.2f", static_cast<long long>(n), s.median, s.min,
                    flop / s.median / 1e6);
      rows.push_back(row);
    }
    if (!csv.empty()) {
      std::ofstream f(csv);
      f << "device,images,median_ms,min_ms,gflops\n";
      for (const auto& r : rows) f << r << "\n";
      if (!f) throw IoError("cannot write " + csv);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_conv: error: %s\n", e.what());
    return 1;
  }
}
