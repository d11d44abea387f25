// bench_train: the reference CNN's training step, per batch size, two ways (three on a GPU):
//   step  - forward, loss, backward and Adam on a batch already in memory (data excluded)
//   data  - the same plus the DataLoader's gather and normalisation (data included)
//   graph - (GPU) 'data' captured once as a CUDA graph, one replay per step (fit's cuda_graphs)
// Median of --steps timed steps after --warmup; images/s and achieved GFLOP/s.
//   bench_train [--batch-sizes 32,64,128,256,512,1024] [--steps 100] [--csv out.csv]
#include <cstdio>
#include <fstream>

#include "apps/cli.h"
#include "apps/reference_cnn.h"
#include "bench/harness.h"
#include "ember.h"

int main(int argc, char** argv) {
  using namespace ember;
  std::string batches = "32,64,128,256,512,1024", csv, data_dir = "data/mnist", device_name = "cpu";
  int steps = 100, warmup = 20, threads = 0;
  bool tf32 = false, nhwc = false;
  CLI::App app{"Training-step time of the reference CNN per batch size (medians).", "bench_train"};
  app.option_defaults()->always_capture_default();
  app.add_option("--batch-sizes", batches, "Comma-separated batch sizes");
  app.add_option("--steps", steps, "Timed steps per configuration")->check(CLI::Range(1, 100000));
  app.add_option("--warmup", warmup, "Untimed steps first")->check(CLI::Range(0, 100000));
  app.add_option("--threads", threads, "CPU threads (0: all cores)")->check(CLI::Range(0, 4096));
  app.add_option("--device", device_name,
                 "cpu, gpu or gpu:N (on a GPU, 'data' mode gathers batches there from the data set held on the GPU)");
  app.add_flag("--allow-tf32", tf32, "GPU: TF32 tensor-core math in cuBLAS/cuDNN (PyTorch's default for convolutions)");
  app.add_flag("--nhwc", nhwc, "GPU: channels-last activations for cuDNN (set_gpu_nhwc)");
  app.add_option("--data-dir", data_dir, "MNIST for the 'data' mode (synthetic images when absent)");
  app.add_option("--csv", csv, "Also write the results as CSV to this path");
  if (const int code = ember::apps::parse_command_line(app, argc, argv); code >= 0) return code;
  try {
    set_num_threads(threads);
    enable_flush_to_zero();
    Dataset train;
    try {
      train = load_mnist(data_dir).train;
    } catch (const IoError&) {
      Tensor images = Tensor::empty(Shape{60000, 1, 28, 28}, DType::U8),
             labels = Tensor::empty(Shape{60000}, DType::I32);
      Rng rng(1);
      for (int64_t i = 0; i < images.numel(); ++i) images.data<uint8_t>()[i] = static_cast<uint8_t>(rng.below(256));
      for (int64_t i = 0; i < 60000; ++i) labels.data<int32_t>()[i] = static_cast<int32_t>(rng.below(10));
      train = Dataset(images, labels, 10, "synthetic");
    }
    const Device device = resolve_device(Device::parse(device_name), /*strict=*/true);
    set_allow_tf32(tf32);
    set_gpu_nhwc(nhwc);
    // The step fit() runs: train_step adding to device-side MetricSums, no host read inside it.
    // On a GPU the work is only queued, so each timed step ends with synchronize(device): the
    // clock stops when the device is done, one wait per step (PyTorch's reference does the same).
    std::printf("bench_train: reference CNN, %s%s, %d threads, data: %s\n", device.str().c_str(),
                device.is_cuda()
                    ? (std::string(tf32 ? " (TF32 allowed" : " (FP32 math") + (nhwc ? ", NHWC)" : ")")).c_str()
                    : "",
                num_threads(), train.name().c_str());
    std::printf("%6s %6s %10s %10s %12s %9s\n", "batch", "mode", "median ms", "min ms", "images/s", "GFLOP/s");
    std::vector<std::string> rows;
    for (int64_t batch : bench::parse_list(batches)) {
      Sequential model;
      apps::add_reference_cnn(model);
      model.build(Shape{1, 28, 28}, 1);
      model.compile(std::make_unique<Adam>());
      model.to(device);
      const double flop = apps::training_flop(model, batch);
      // On a GPU the loader holds the data set there and gathers each batch with a kernel.
      DataLoader loader(train, {.batch_size = batch, .shuffle = true, .seed = 1, .device = device});
      loader.start_epoch(0);
      Batch fixed;
      loader.next(fixed);
      auto copy_of = [](const Tensor& t) {  // the loader reuses its batch buffers
        Tensor c = Tensor::empty(t.shape(), t.dtype(), t.device());
        c.copy_from(t);
        return c;
      };
      const Tensor x = copy_of(fixed.x), y = copy_of(fixed.y);
      Batch b;
      int64_t epoch = 0;
      auto next = [&] {
        if (!loader.next(b)) {
          loader.start_epoch(++epoch);
          loader.next(b);
        }
      };
      MetricSums sums(device);
      // "graph" (GPU): the 'data' step (gather included) captured once as a CUDA graph, each
      // timed step one replay, as fit(cuda_graphs) runs it.
      DataLoader graph_loader(train, {.batch_size = batch,
                                      .shuffle = true,
                                      .seed = 1,
                                      .prefetch = false,
                                      .device = device,
                                      .defer_device_gather = device.is_cuda()});
      Batch gb;
      int64_t graph_epoch = 0;
      graph_loader.start_epoch(0);
      auto graph_next = [&] {  // the next full batch; a skipped short one still moves the cursor
        for (;;) {
          if (!graph_loader.next(gb)) {
            graph_loader.start_epoch(++graph_epoch);
            continue;
          }
          if (gb.x.dim(0) == batch) return;
          gb.gather();
        }
      };
      CudaGraph graph;
      std::vector<const char*> modes{"step", "data"};
      if (device.is_cuda()) {
        modes.push_back("graph");
        for (int i = 0; i < 2; ++i) {  // warm: plans, workspaces, optimizer state
          graph_next();
          gb.gather();
          model.train_step(gb.x, gb.y, sums);
        }
        graph_next();
        graph = CudaGraph::capture(device, [&] {
          gb.gather();
          model.train_step(gb.x, gb.y, sums);
        });
        graph.launch();
      }
      for (const char* mode : modes) {
        const bool with_data = mode[0] == 'd', graphed = mode[0] == 'g';
        const bench::Stats s = bench::time_ms(
            [&] {
              if (graphed) {
                graph_next();
                graph.launch();
                model.optimizer()->count_step();
              } else if (with_data) {
                next();
                if (b.x.dim(0) != batch) next();  // keep the batch size fixed (skip an epoch's last)
                model.train_step(b.x, b.y, sums);
              } else {
                model.train_step(x, y, sums);
              }
            },
            warmup, steps, [&] { synchronize(device); });
        const double ips = static_cast<double>(batch) / (s.median / 1e3);
        std::printf("%6lld %6s %10.3f %10.3f %12.0f %9.1f\n", static_cast<long long>(batch), mode, s.median, s.min, ips,
                    flop / s.median / 1e6);
        std::fflush(stdout);
        char row[256];
        std::snprintf(row, sizeof row, "ember,%s,%lld,%s,%.4f,%.4f,%.1f,%.2f", device.is_cuda() ? "cuda" : "cpu",
                      static_cast<long long>(batch), mode, s.median, s.min, ips, flop / s.median / 1e6);
        rows.push_back(row);
      }
    }
    if (!csv.empty()) {
      std::ofstream f(csv);
      f << "framework,device,batch,mode,median_ms,min_ms,images_per_s,gflops\n";
      for (const auto& r : rows) f << r << "\n";
      if (!f) throw IoError("cannot write " + csv);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_train: error: %s\n", e.what());
    return 1;
  }
}
