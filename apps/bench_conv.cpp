// bench_conv: the tutorials' convolution experiment: N random 128x128 RGB images through a
// Conv2D of 32 filters of 8x8, forward + backward + Adam update, per N and device (medians; on
// a GPU the clock stops after a synchronisation, the data already on the device).
//   bench_conv [--images 20,40,60,80,100,200] [--devices cpu,gpu] [--csv out.csv]
#include <cstdio>

#include "apps/cli.h"
#include "apps/paths.h"
#include "bench/harness.h"
#include "ember.h"

namespace {
// "cpu,gpu:1" -> devices; ArgumentError on a bad name.
std::vector<ember::Device> parse_devices(const std::string& list) {
  std::vector<ember::Device> out;
  for (size_t start = 0; start <= list.size();) {
    const size_t end = std::min(list.find(',', start), list.size());
    out.push_back(ember::Device::parse(list.substr(start, end - start)));
    start = end + 1;
  }
  return out;
}
}  // namespace

int main(int argc, char** argv) {
  using namespace ember;
  std::string images = "20,40,60,80,100,200", csv, devices = "cpu,gpu";
  int repeats = 10, threads = 0;
  bool tf32 = false;
  CLI::App app{"Conv2D(32, 8x8) training step on N random 128x128x3 images (medians).", "bench_conv"};
  ember::apps::set_up_help(app, "  0  success\n  1  runtime error\n  2  bad command line");
  app.option_defaults()->always_capture_default();
  app.add_option("--images", images, "Comma-separated image counts N")
      ->type_name("LIST")
      ->check(ember::apps::integer_list_in(1, int64_t{1} << 20));
  app.add_option("--repeats", repeats, "Timed repeats per N")->check(ember::apps::integer_in(1, 10000));
  app.add_option("--threads", threads, "CPU threads")
      ->check(ember::apps::integer_in(0, 4096))
      ->default_str("all cores");
  app.add_option("--devices", devices,
                 "Comma-separated devices (cpu, gpu, gpu:N); a missing GPU is skipped, saying why")
      ->type_name("LIST")
      ->check([](const std::string& list) {
        try {
          parse_devices(list);
          return std::string();
        } catch (const std::exception& e) {
          return std::string(e.what());
        }
      });
  app.add_option("--csv", csv, "Also write the results as CSV to this path")->type_name("PATH");
  app.add_flag("--allow-tf32", tf32, "GPU: TF32 tensor-core math (else FP32, as the CPU)");
  if (const int code = ember::apps::parse_command_line(app, argc, argv); code >= 0) return code;
  try {
    if (!csv.empty()) check_output_path(csv, "--csv");  // now, not after the benchmark
    set_num_threads(threads);
    enable_flush_to_zero();
    check_cpu_support();
    set_allow_tf32(tf32);  // explicit: the library's default is TF32
    std::vector<Device> targets;
    for (const Device& d : parse_devices(devices)) {
      if (d.is_cuda() && !cuda_available())
        std::printf("bench_conv: %s skipped: %s\n", d.str().c_str(), cuda_status().reason.c_str());
      else
        targets.push_back(resolve_device(d, /*strict=*/true));
    }
    std::printf("bench_conv: Conv2D 32x8x8 on 128x128x3, %d CPU threads, GPU math %s\n", num_threads(),
                tf32 ? "TF32" : "FP32");
    std::printf("%8s %6s %10s %10s %10s\n", "device", "N", "median ms", "min ms", "GFLOP/s");
    std::vector<std::string> rows;
    for (int64_t n : bench::parse_list(images)) {
      for (const Device& dev : targets) {
        Conv2D conv(32, Size2{8, 8});
        const Shape out = conv.build(Shape{3, 128, 128});
        Tensor params = Tensor::zeros(Shape{conv.num_params()}, DType::F32, Device::cpu());
        Rng rng(1);
        auto bind = [&](Tensor& ps, Tensor& gs) {
          std::vector<Tensor> p, g;
          int64_t off = 0;
          for (const auto& spec : conv.param_specs()) {
            p.push_back(ps.view(off, spec.shape));
            g.push_back(gs.view(off, spec.shape));
            off += spec.shape.numel();
          }
          conv.bind(p, g);
        };
        Tensor grads = Tensor::zeros(params.shape(), DType::F32, Device::cpu());
        bind(params, grads);
        conv.init_params(rng);
        if (dev.is_cuda()) {  // the same values, moved; the layer then runs on cuDNN
          params = params.to(dev);
          grads = Tensor::zeros(params.shape(), DType::F32, dev);
          bind(params, grads);
        }
        const Tensor x = Tensor::uniform(Shape{n, 3, 128, 128}, 0.0f, 1.0f, 2, dev);
        const Tensor dy = Tensor::uniform(out.with_batch(n), -1e-3f, 1e-3f, 3, dev);
        conv.set_needs_input_grad(true);  // a layer inside a network computes its input gradient
        Adam adam;
        const bench::Stats s = bench::time_ms(
            [&] {
              conv.forward(x, true);
              conv.backward(dy);
              adam.step(params, grads);
            },
            2, repeats, [&] { synchronize(dev); });
        // forward, input gradient and weight gradient: 3 x 2 x N x K x C x R x S x P x Q
        const double flop = 3.0 * 2.0 * double(n) * 32 * 3 * 64 * double(out[1] * out[2]);
        std::printf("%8s %6lld %10.3f %10.3f %10.1f\n", dev.str().c_str(), static_cast<long long>(n), s.median, s.min,
                    flop / s.median / 1e6);
        std::fflush(stdout);
        char row[160];
        std::snprintf(row, sizeof row, "%s,%lld,%.4f,%.4f,%.2f", dev.is_cuda() ? "cuda" : "cpu",
                      static_cast<long long>(n), s.median, s.min, flop / s.median / 1e6);
        rows.push_back(row);
      }
    }
    if (!csv.empty()) apps::write_csv(csv, "device,images,median_ms,min_ms,gflops", rows);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_conv: error: %s\n", e.what());
    return 1;
  }
}
