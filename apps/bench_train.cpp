// bench_train: the reference CNN's training step, per batch size, two ways (three on a GPU):
//   step  - forward, loss, backward and Adam on a batch already in memory (data excluded)
//   data  - the same plus the DataLoader's gather and normalisation (data included)
//   graph - (GPU) 'data' captured once as a CUDA graph, one replay per step (fit's cuda_graphs)
//   eval  - inference on the batch in memory: forward (training=false) and the loss's sums,
//           what evaluate() runs per batch (its FLOP are a third of the step's: GFLOP/s shown
//           are of the forward's multiply-adds)
//   predict - Model::predict on the batch (its result copied to host memory): --batch-sizes 1 is
//           a single image's latency
// Median of --steps timed steps after --warmup; images/s and achieved GFLOP/s.
// --profile adds per-layer medians of the 'step' mode (each layer's forward and backward, the
// loss and the optimizer, timed one by one on the whole batch: no CPU micro-batches; the total
// is above the step's own median by the clock reads).
//   bench_train [--batch-sizes 32,64,128,256,512,1024] [--steps 100] [--profile] [--csv out.csv]
#include <chrono>
#include <cstdio>

#include "apps/cli.h"
#include "apps/model_zoo.h"
#include "apps/openmp_spin.h"
#include "apps/paths.h"
#include "bench/harness.h"
#include "ember.h"

namespace {
// Each layer's forward and backward, the loss and the optimizer, timed one by one (medians).
void profile_layers(ember::Sequential& model, const ember::Tensor& x, const ember::Tensor& y, int warmup, int steps,
                    ember::Device device) {
  using namespace ember;
  using clock = std::chrono::steady_clock;
  const auto& layers = model.layers();
  const size_t n = layers.size();
  std::vector<std::vector<double>> fwd(n), bwd(n);
  std::vector<double> loss_ms, opt_ms;
  SoftmaxCrossEntropy loss;
  MetricSums sums(device);
  auto lap = [&](clock::time_point& t0) {
    synchronize(device);
    const auto t1 = clock::now();
    const double ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
    t0 = t1;
    return ms;
  };
  // Stages: a layer, or a pair the model runs fused (timed as one, named after both).
  std::vector<std::pair<size_t, size_t>> stages;
  for (size_t i = 0; i < n; ++i) {
    const size_t end = model.fused_with_next(i) ? i + 2 : i + 1;
    stages.emplace_back(i, end);
    i = end - 1;
  }
  for (int it = 0; it < warmup + steps; ++it) {
    const bool keep = it >= warmup;
    synchronize(device);
    auto t0 = clock::now();
    const Tensor* h = &x;
    for (size_t k = 0; k < stages.size(); ++k) {
      h = &model.forward_layers(*h, true, stages[k].first, stages[k].second);
      const double ms = lap(t0);
      if (keep) fwd[k].push_back(ms);
    }
    loss.forward(*h, y, sums);
    const Tensor* g = &loss.backward();
    if (const double ms = lap(t0); keep) loss_ms.push_back(ms);
    for (size_t k = stages.size(); k-- > 0;) {
      g = &model.backward_layers(*g, stages[k].first, stages[k].second);
      const double ms = lap(t0);
      if (keep) bwd[k].push_back(ms);
    }
    model.apply_gradients();
    if (const double ms = lap(t0); keep) opt_ms.push_back(ms);
  }
  double total = 0;
  std::printf("  %-22s %10s %10s\n", "layer", "fwd ms", "bwd ms");
  for (size_t k = 0; k < stages.size(); ++k) {
    const double f = bench::summarize(fwd[k]).median, b = bench::summarize(bwd[k]).median;
    total += f + b;
    std::string name = layers[stages[k].first]->name();
    for (size_t i = stages[k].first + 1; i < stages[k].second; ++i) name += "+" + layers[i]->name();
    std::printf("  %-22s %10.3f %10.3f\n", name.c_str(), f, b);
  }
  const double l = bench::summarize(loss_ms).median, o = bench::summarize(opt_ms).median;
  std::printf("  %-22s %10.3f\n  %-22s %10.3f\n  %-22s %10.3f\n", "loss (fwd+bwd)", l, "optimizer", o, "sum of medians",
              total + l + o);
}

struct Options {
  std::string batches = "32,64,128,256,512,1024", csv, data_dir = "data/mnist", device_name = "cpu";
  std::string conv_algorithms = "fast", precision = "fp32";
  int steps = 100, warmup = 20, threads = 0;
  int64_t micro_batch = 64;
  bool tf32 = false, nhwc = false, profile = false, no_fusion = false, data_dir_given = false;
};

// The command line into o; -1 to go on, else the exit code (--help: 0, a bad line: 2).
int parse(int argc, char** argv, Options& o) {
  using namespace ember;
  CLI::App app{"Training-step time of the reference CNN per batch size (medians).", "bench_train"};
  apps::set_up_help(app, "  0  success\n  1  runtime error\n  2  bad command line");
  app.option_defaults()->always_capture_default();
  app.get_help_ptr()->group("Help");
  app.option_defaults()->group("Measurement");
  app.add_option("--batch-sizes", o.batches, "Comma-separated batch sizes")
      ->type_name("LIST")
      ->check(apps::integer_list_in(1, int64_t{1} << 20));
  app.add_option("--steps", o.steps, "Timed steps per configuration")->check(apps::integer_in(1, 100000));
  app.add_option("--warmup", o.warmup, "Untimed steps first")->check(apps::integer_in(0, 100000));
  app.add_flag("--profile", o.profile, "Per-layer forward/backward medians of the step (CPU)");
  app.add_option("--csv", o.csv, "Also write the results as CSV to this path")->type_name("PATH");
  app.add_option("--data-dir", o.data_dir,
                 "MNIST for the 'data' mode (synthetic images where the default is absent; a folder given here "
                 "must load)")
      ->type_name("DIR")
      ->each([&o](const std::string&) { o.data_dir_given = true; });
  app.option_defaults()->group("Device and CPU");
  app.add_option("--device", o.device_name,
                 "cpu, gpu or gpu:N (on a GPU, the 'data' mode gathers batches from the data set held there)")
      ->check([](const std::string& name) {
        try {
          Device::parse(name);
          return std::string();
        } catch (const std::exception& e) {
          return std::string(e.what());
        }
      });
  app.add_option("--threads", o.threads, "CPU threads, or free: the cores other processes leave free")
      ->transform(apps::thread_count())
      ->default_str("all cores");
  app.add_option("--cpu-micro-batch", o.micro_batch,
                 "CPU: run larger batches as slices of this many rows (Sequential::set_cpu_micro_batch; 0: whole)")
      ->check(apps::integer_in(0, int64_t{1} << 30));
  app.add_flag("--no-fusion", o.no_fusion, "CPU: run every layer on its own (Sequential::set_cpu_fusion(false))");
  app.option_defaults()->group("Numerics and GPU");
  app.add_option("--conv-algorithms", o.conv_algorithms, "fast (Winograd where it fits) or exact (direct sums only)")
      ->check(CLI::IsMember({"fast", "exact"}));
  app.add_option("--precision", o.precision, "fp32 or mixed_bf16 (bf16 products, fp32 accumulation)")
      ->check(CLI::IsMember({"fp32", "mixed_bf16"}));
  app.add_flag("--allow-tf32", o.tf32,
               "GPU: TF32 tensor-core math in cuBLAS/cuDNN (PyTorch's default for convolutions)");
  app.add_flag("--nhwc", o.nhwc, "GPU: channels-last activations (set_gpu_nhwc)");
  return apps::parse_command_line(app, argc, argv);
}

// MNIST's training split from dir, or, where the default folder is absent, 60,000 random images
// and labels (a folder the command line gave must load: its error is the benchmark's).
ember::Dataset training_images(const std::string& dir, bool given) {
  using namespace ember;
  try {
    return load_mnist(dir).train;
  } catch (const IoError&) {
    if (given) throw;
    Tensor images = Tensor::empty(Shape{60000, 1, 28, 28}, DType::U8), labels = Tensor::empty(Shape{60000}, DType::I32);
    Rng rng(1);
    for (int64_t i = 0; i < images.numel(); ++i) images.data<uint8_t>()[i] = static_cast<uint8_t>(rng.below(256));
    for (int64_t i = 0; i < 60000; ++i) labels.data<int32_t>()[i] = static_cast<int32_t>(rng.below(10));
    return Dataset(images, labels, 10, "synthetic");
  }
}

// The 'graph' mode's source (GPU): a loader that leaves the gather to the captured graph, and the
// next full batch from it (a skipped short one still moves the cursor).
struct GraphBatches {
  GraphBatches(const ember::Dataset& train, int64_t rows, ember::Device device)
      : batch(rows),
        loader(train, {.batch_size = rows,
                       .shuffle = true,
                       .seed = 1,
                       .prefetch = false,
                       .device = device,
                       .defer_device_gather = device.is_cuda()}) {
    loader.start_epoch(0);
  }
  void next() {
    for (;;) {
      if (!loader.next(b)) {
        loader.start_epoch(++epoch);
        continue;
      }
      if (b.rows() == batch) return;
      b.gather();
    }
  }
  // Two warm steps (plans, workspaces, optimizer state), then the step with its gather captured
  // as a graph on the next batch, launched once.
  ember::CudaGraph capture_step(ember::Sequential& model, ember::MetricSums& sums, ember::Device device) {
    for (int i = 0; i < 2; ++i) {
      next();
      b.gather();
      model.train_step(b.inputs, b.targets, sums);
    }
    next();
    ember::CudaGraph graph = ember::CudaGraph::capture(device, [&] {
      b.gather();
      model.train_step(b.inputs, b.targets, sums);
    });
    graph.launch();
    return graph;
  }
  int64_t batch;
  ember::DataLoader loader;
  ember::Batch b;
  int64_t epoch = 0;
};

// One batch size's modes (see the top of this file), each printed as it ends; their CSV rows.
std::vector<std::string> bench_batch(const Options& o, const ember::Dataset& train, ember::Device device,
                                     int64_t batch) {
  using namespace ember;
  Sequential model;
  apps::add_reference_cnn(model);
  model.build(Shape{1, 28, 28}, 1);
  model.compile(std::make_unique<Adam>());
  model.set_cpu_micro_batch(o.micro_batch);
  model.set_cpu_fusion(!o.no_fusion);
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
  const Tensor x = copy_of(fixed.x()), y = copy_of(fixed.y());
  Batch b;
  int64_t epoch = 0;
  auto next = [&] {
    if (!loader.next(b)) {
      loader.start_epoch(++epoch);
      loader.next(b);
    }
  };
  MetricSums sums(device);
  // "graph" (GPU): the 'data' step (gather included) captured once as a CUDA graph, each timed
  // step one replay, as fit(cuda_graphs) runs it.
  GraphBatches graph_batches(train, batch, device);
  std::vector<const char*> modes{"step", "data", "eval", "predict"};
  CudaGraph graph;
  if (device.is_cuda()) {
    modes.push_back("graph");
    graph = graph_batches.capture_step(model, sums, device);
  }
  std::vector<std::string> rows;
  for (const char* mode : modes) {
    const bool with_data = mode[0] == 'd', graphed = mode[0] == 'g', eval = mode[0] == 'e', predict = mode[0] == 'p';
    const bench::Stats s = bench::time_ms(
        [&] {
          if (graphed) {
            graph_batches.next();
            graph.launch();
            model.optimizer()->count_step();
          } else if (eval) {
            model.evaluate_batch(x, y, sums);
          } else if (predict) {
            (void)model.predict(x);  // to host memory, as a user's call
          } else if (with_data) {
            next();
            if (b.rows() != batch) next();  // keep the batch size fixed (skip an epoch's last)
            model.train_step(b.inputs, b.targets, sums);
          } else {
            model.train_step(x, y, sums);
          }
        },
        o.warmup, o.steps, [&] { synchronize(device); });
    const double ips = static_cast<double>(batch) / (s.median / 1e3);
    const double mode_flop = eval || predict ? apps::inference_flop(model, batch) : flop;
    std::printf("%6lld %6s %10.3f %10.3f %12.0f %9.1f\n", static_cast<long long>(batch), mode, s.median, s.min, ips,
                mode_flop / s.median / 1e6);
    std::fflush(stdout);
    char row[256];
    std::snprintf(row, sizeof row, "ember,%s,%lld,%s,%.4f,%.4f,%.1f,%.2f", device.is_cuda() ? "cuda" : "cpu",
                  static_cast<long long>(batch), mode, s.median, s.min, ips, mode_flop / s.median / 1e6);
    rows.push_back(row);
  }
  if (o.profile) profile_layers(model, x, y, o.warmup, o.steps, device);
  return rows;
}

// The run's first line: the model, device and math, threads and data.
void print_setup(const Options& o, ember::Device device, const ember::Dataset& train) {
  using namespace ember;
  const std::string math =
      device.is_cuda() ? std::string(o.tf32 ? " (TF32 allowed" : " (FP32 math") + (o.nhwc ? ", NHWC)" : ")") : "";
  const std::string precision_text = precision() != Precision::MixedBFloat16 ? "fp32"
                                     : device.is_cuda()                      ? "mixed_bf16"
                                                                             : "mixed_bf16 on " + cpu_bf16().isa;
  std::printf("bench_train: reference CNN, %s%s, %s, %d threads, data: %s\n", device.str().c_str(), math.c_str(),
              precision_text.c_str(), num_threads(), train.name().c_str());
}
}  // namespace

int main(int argc, char** argv) {
  ember::apps::restart_with_bounded_openmp_spin(argv);
  using namespace ember;
  Options o;
  if (const int code = parse(argc, argv, o); code >= 0) return code;
  try {
    set_num_threads(o.threads);
    enable_flush_to_zero();
    if (!o.csv.empty()) check_output_path(o.csv, "--csv");  // now, not after the benchmark
    const Dataset train = training_images(o.data_dir, o.data_dir_given);
    const Device device = resolve_device(Device::parse(o.device_name), /*strict=*/true);
    set_allow_tf32(o.tf32);
    set_conv_algorithms(parse_conv_algorithms(o.conv_algorithms));
    set_precision(resolve_precision(parse_precision(o.precision), device, /*strict=*/true));
    set_gpu_nhwc(o.nhwc);
    // The step fit() runs: train_step adding to device-side MetricSums, no host read inside it.
    // On a GPU the work is only queued, so each timed step ends with synchronize(device): the
    // clock stops when the device is done, one wait per step (PyTorch's reference does the same).
    print_setup(o, device, train);
    std::printf("%6s %6s %10s %10s %12s %9s\n", "batch", "mode", "median ms", "min ms", "images/s", "GFLOP/s");
    std::vector<std::string> rows;
    for (int64_t batch : bench::parse_list(o.batches))
      for (std::string& row : bench_batch(o, train, device, batch)) rows.push_back(std::move(row));
    if (!o.csv.empty())
      apps::write_csv(o.csv, "framework,device,batch,mode,median_ms,min_ms,images_per_s,gflops", rows);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_train: error: %s\n", e.what());
    return 1;
  }
}
