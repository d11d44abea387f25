// train_mnist: trains the reference CNN (or bn-cnn, resnet) on MNIST or Fashion-MNIST, Keras-style.
//
//   train_mnist --epochs 5                      # GPU when usable, else CPU (with one notice)
//   train_mnist --device cpu --epochs 5 --seed 1 --history history.json
//
// Exit codes: 0 success, 1 runtime error (missing data, device, I/O, diverged training),
// 2 bad command line, 130 / 143 stopped by SIGINT / SIGTERM (after the current step, with a
// resumable checkpoint where --save or --checkpoint-dir is given; a second signal exits at once).
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <thread>

#include "apps/model_zoo.h"
#include "apps/openmp_spin.h"
#include "apps/stop_signal.h"
#include "apps/train_mnist_args.h"
#include "apps/train_mnist_outputs.h"
#include "core/logger.h"
#include "distribute/fault_injection.h"
#include "ember.h"

namespace {

using ember::apps::Args;
using ember::apps::check_data;
using ember::apps::check_outputs;
using ember::apps::g_stop_signal;
using ember::apps::parse_best;
using ember::apps::parse_gpu_list;
using ember::apps::save_final;
using ember::apps::schedule_of;
using ember::apps::signal_name;
using ember::apps::write_history;

std::unique_ptr<ember::Strategy> make_strategy(const Args& a, const ember::Device& device) {
  using namespace ember;
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(a.collective_timeout * 1000));
  if (a.strategy == "mirrored" && device.is_cuda()) {
    std::vector<int> gpus = parse_gpu_list(a.gpus);
    if (a.gpus.empty())
      for (const GpuInfo& g : cuda_status().gpus) gpus.push_back(g.index);  // every usable GPU
    return make_mirrored_gpu_strategy(gpus, timeout);
  }
  if (a.strategy == "mirrored") {
    if (a.gpus.empty()) return make_mirrored_cpu_strategy(a.replicas, timeout);
    if (a.device == "cpu")
      throw ArgumentError("--gpus " + a.gpus +
                          " asks for GPU replicas but --device is cpu "
                          "(CPU replicas: --replicas N)");
    // Soft placement put the run on the CPU (resolve_device warned why): as many CPU replicas.
    const int n = static_cast<int>(parse_gpu_list(a.gpus).size());
    detail::logger().warn("--gpus {}: no usable GPU, so {} CPU replica{} instead", a.gpus, n, n == 1 ? "" : "s");
    return make_mirrored_cpu_strategy(n, timeout);
  }
  if (a.strategy == "multiworker") return ember::make_multiworker_strategy(timeout);
  return ember::make_default_strategy();
}

ember::Device choose_device(const Args& a) {
  using namespace ember;
  if (a.device == "auto") {
    if (cuda_available()) return Device::cuda(cuda_status().gpus.front().index);
    if (!a.quiet) std::printf("No usable GPU (%s): training on CPU.\n", cuda_status().reason.c_str());
    return Device::cpu();
  }
  return resolve_device(Device::parse(a.device), a.strict_placement);
}

// After a stop request: the resumable checkpoint(s) and the one line that says where.
int finish_interrupted(const Args& a, const ember::Model& model, const ember::TrainingState& state, bool chief,
                       int64_t batches_per_epoch) {
  const int sig = g_stop_signal != 0 ? g_stop_signal.load() : SIGINT;  // another rank's request: as Ctrl-C
  std::vector<std::string> saved;
  if (chief) {
    if (!a.checkpoint_dir.empty()) {
      const std::string p = a.checkpoint_dir + "/interrupted.safetensors";
      model.save(p, state);
      saved.push_back(p);
    }
    if (!a.save.empty()) {
      save_final(model, a.save, state);
      saved.push_back(a.save);
    }
    std::fflush(stdout);
    std::string where = state.batches_done > 0
                            ? "at epoch " + std::to_string(state.epochs_done + 1) + ", step " +
                                  std::to_string(state.batches_done) + "/" + std::to_string(batches_per_epoch)
                            : "after epoch " + std::to_string(state.epochs_done);
    std::string what = saved.empty() ? "nothing saved (no --save or --checkpoint-dir)"
                                     : "saved a resumable checkpoint to " + saved.front() +
                                           (saved.size() > 1 ? " and " + saved[1] : "") + " (continue with --resume " +
                                           saved.front() + ")";
    std::fprintf(stderr, "train_mnist: stopped by %s %s: %s\n", signal_name(sig), where.c_str(), what.c_str());
  }
  return 128 + sig;
}

// The process-wide settings the flags ask for: threads, math and kernels, and every GPU's memory
// policy.
void apply_settings(const Args& a, ember::Device device) {
  using namespace ember;
  // TF32 as TensorFlow: on (Ampere and newer), off for --deterministic and --conv-algorithms exact runs
  // (the same bits as another FP32 run, closest to the CPU) unless asked for, off with --no-tf32.
  set_allow_tf32(a.allow_tf32 || (!a.no_tf32 && !a.deterministic && a.conv_algorithms != "exact"));
  set_gpu_deterministic(a.deterministic);
  set_conv_algorithms(parse_conv_algorithms(a.conv_algorithms));
  set_precision(resolve_precision(parse_precision(a.precision), device, a.strict_placement));
  set_cudnn_find(a.cudnn_find);
  set_fused_conv(a.fused_conv);
  set_fused_dense(a.fused_dense);
  set_fused_loss(a.fused_loss);
  set_fused_advance(a.fused_advance);
  set_gpu_nhwc(a.nhwc);
  if (a.cuda_graphs && !device.is_cuda())
    detail::logger().warn("--cuda-graphs has no effect: training runs on the CPU");
  if (device.is_cuda()) {
    // Every GPU this process may use gets the policy: mirrored replicas sit on several, and a
    // multiworker rank picks its GPU by local rank.
    std::vector<int> gpus{device.index};
    if (a.strategy != "default") {
      gpus.clear();
      for (const GpuInfo& g : cuda_status().gpus) gpus.push_back(g.index);
    }
    for (int g : gpus) {
      if (!a.gpu_memory_limit.empty()) set_gpu_memory_policy(g, MemoryPolicy::limit(a.gpu_memory_limit));
      if (a.gpu_memory_fraction > 0) set_gpu_memory_fraction(g, a.gpu_memory_fraction);
    }
  }
}

// The model --load, --model and the data's sample shape ask for, with its optimizer.
ember::ModelRecipe recipe_of(const Args& a, const ember::Shape& sample, ember::Device device) {
  using namespace ember;
  ModelRecipe recipe;
  if (!a.load.empty())
    recipe.make_model = [path = a.load] { return load_model(path); };
  else if (a.model == "resnet")
    recipe.make_model = [sample] { return std::make_unique<Model>(apps::make_resnet(sample)); };
  else if (a.model == "bn-cnn")
    recipe.add_layers = [](Sequential& m) { apps::add_bn_cnn(m); };
  else
    recipe.add_layers = [](Sequential& m) { apps::add_reference_cnn(m); };
  recipe.input_shape = sample;
  recipe.seed = a.seed;
  recipe.make_optimizer = [&a] { return optimizer_of(a); };
  recipe.device = device;
  return recipe;
}

// Where training starts: epoch 0, or --resume's checkpoint loaded into the strategy's model (its
// seed; its batch size where it stopped inside an epoch).
ember::TrainingState starting_state(const Args& a, ember::Strategy& strategy, bool quiet) {
  using namespace ember;
  TrainingState state{.epochs_done = 0, .batches_done = 0, .seed = a.seed, .batch_size = a.batch_size, .extra = {}};
  if (a.resume.empty()) return state;
  state = strategy.load(a.resume);
  if (state.batches_done > 0 && state.batch_size != a.batch_size)
    throw ArgumentError(a.resume + " stopped " + std::to_string(state.batches_done) + " batches into epoch " +
                        std::to_string(state.epochs_done + 1) + " at --batch-size " + std::to_string(state.batch_size) +
                        ": resume it with that batch size");
  if (a.seed_given && state.seed != a.seed)
    detail::logger().warn("--seed {} ignored: resuming the run of {} with its seed {}", a.seed, a.resume, state.seed);
  if (!quiet)
    std::printf(
        "Resumed %s: %d epoch%s done%s, seed %llu\n", a.resume.c_str(), state.epochs_done,
        state.epochs_done == 1 ? "" : "s",
        state.batches_done > 0 ? (" and " + std::to_string(state.batches_done) + " steps of the next").c_str() : "",
        static_cast<unsigned long long>(state.seed));
  state.batch_size = a.batch_size;
  return state;
}

// --evaluate-only: the test set's accuracy and loss (and, on the CPU, the time and host memory).
int evaluate_only(const Args& a, ember::Strategy& strategy, const ember::Dataset& test, ember::Device device,
                  bool chief, bool quiet) {
  using namespace ember;
  const Model& model = strategy.model();
  if (!a.load.empty() && !quiet)
    std::printf("Loaded %s: model \"%s\" of %zu layers, %lld parameters\n", a.load.c_str(), model.name().c_str(),
                model.layers().size(), static_cast<long long>(model.num_params()));
  if (device.is_cpu()) reset_host_memory_peak();
  const size_t host_before = host_memory_stats().in_use;
  const auto e0 = std::chrono::steady_clock::now();
  const EvalResult r = strategy.evaluate(test, std::max<int64_t>(a.batch_size, 256));  // as fit validates
  const double eval_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - e0).count();
  if (chief)
    std::printf("Test accuracy: %.2f%% (loss %.4f) on %lld images\n", r.accuracy * 100.0, r.loss,
                static_cast<long long>(r.samples));
  if (chief && !quiet && device.is_cpu()) {  // the GPU's: gpu_memory_stats (ember_info, --log-device-placement)
    const size_t peak = host_memory_stats().peak_in_use;
    std::printf("Evaluation: %.2f s; host tensors at most %s above the %s held before\n", eval_seconds,
                format_bytes(peak > host_before ? peak - host_before : 0).c_str(), format_bytes(host_before).c_str());
  }
  return 0;
}

// The summary and the line that says where and how the run trains.
void print_training_setup(const Args& a, const ember::Model& model, const ember::Strategy& strategy,
                          ember::Device device, const ember::MnistData& data) {
  using namespace ember;
  std::printf("%s", model.summary().c_str());
  const std::string math = !device.is_cuda() ? ""
                                             : std::string(allow_tf32() ? " (TF32 math" : " (FP32 math") +
                                                   (a.cuda_graphs ? ", CUDA graphs)" : ")");
  const std::string bf16 = precision() == Precision::MixedBFloat16 ? ", mixed_bf16 (" + cpu_bf16().isa + ")" : "";
  std::printf("Training on %s%s with %d thread%s, strategy %s, %s convolutions%s: %lld images, %lld test images\n",
              device.str().c_str(), math.c_str(), num_threads(), num_threads() == 1 ? "" : "s", strategy.name().c_str(),
              to_string(conv_algorithms()), bf16.c_str(), static_cast<long long>(data.train.size()),
              static_cast<long long>(data.test.size()));
  std::fflush(stdout);
}

// fit's options from the flags, starting where `state` says (on_epoch_end is the caller's).
ember::FitOptions fit_options(const Args& a, const ember::TrainingState& state, bool quiet) {
  using namespace ember;
  FitOptions fit;
  fit.epochs = a.epochs;
  fit.batch_size = a.batch_size;
  fit.seed = state.seed;
  fit.initial_epoch = std::min(state.epochs_done, a.epochs);
  fit.initial_batch = state.epochs_done < a.epochs ? state.batches_done : 0;
  fit.stop_requested = [] { return g_stop_signal != 0; };
  fit.max_steps = a.steps;
  fit.cuda_graphs = a.cuda_graphs;
  fit.verbose = quiet ? 0 : 1;
  fit.learning_rate_schedule = schedule_of(a);
  if (a.early_stopping >= 0)
    fit.early_stopping = EarlyStopping{.patience = a.early_stopping, .min_delta = a.early_stopping_min_delta};
  return fit;
}

// fit's on_epoch_end: the state's epoch count, the replicas' throughput (more than one), and under
// --checkpoint-dir (the chief only) the epoch's checkpoint, and best.safetensors where validation
// accuracy passed `best`; `last` names the newest checkpoint written.
std::function<bool(const ember::EpochLogs&)> epoch_end(const Args& a, ember::Strategy& strategy,
                                                       ember::TrainingState& state, double& best, std::string& last,
                                                       bool chief, bool quiet) {
  using namespace ember;
  return [&a, &strategy, &state, &best, &last, chief, quiet](const EpochLogs& logs) {
    state.epochs_done = logs.epoch;
    state.batches_done = 0;
    if (!quiet && strategy.num_replicas() > 1) {
      const StrategyStats& s = strategy.stats();
      std::printf("  %s: %.0f images/s in total, %.0f per replica; all-reduce %.1f%% of step time\n",
                  strategy.name().c_str(), logs.images_per_second, logs.images_per_second / strategy.num_replicas(),
                  s.step_seconds > 0 ? 100.0 * s.allreduce_seconds / s.step_seconds : 0.0);
    }
    if (!a.checkpoint_dir.empty() && chief) {
      char name[64];
      std::snprintf(name, sizeof name, "/epoch-%03d.safetensors", logs.epoch);
      if (logs.val_accuracy && *logs.val_accuracy > best) {
        best = *logs.val_accuracy;
        state.extra["best_val_accuracy"] = std::to_string(best);
        strategy.model().save(a.checkpoint_dir + "/best.safetensors", state);
      }
      strategy.model().save(a.checkpoint_dir + name, state);
      last = a.checkpoint_dir + name;
    }
    return true;
  };
}

// After a whole run: the test result, the history file and the GPU's memory. The test set is fit's
// validation data: after a whole fit its last evaluation is of the weights the model holds now,
// at the same batch size, so it is the test result (evaluating again would repeat the same sums:
// 4% of a CPU epoch). After an early stop (weights restored) or when nothing was trained, the test
// set is evaluated here. Reduced across ranks either way.
void report_test(const Args& a, ember::Strategy& strategy, const ember::Dataset& test_set,
                 const ember::History& history, ember::Device device, bool chief,
                 std::chrono::steady_clock::time_point t0) {
  using namespace ember;
  EvalResult test;
  if (!history.epochs.empty() && !history.stopped_early && history.epochs.back().val_loss) {
    const EpochLogs& last = history.epochs.back();
    test = {*last.val_loss, last.val_accuracy.value_or(0.0), last.val_samples, last.val_metrics};
  } else {
    test = strategy.evaluate(test_set, std::max<int64_t>(a.batch_size, 256));  // fit's validation batch
  }
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (chief)
    std::printf("Test accuracy: %.2f%% (loss %.4f) on %lld images - total time %.1fs\n", test.accuracy * 100.0,
                test.loss, static_cast<long long>(test.samples), total);
  if (!a.history.empty() && chief) write_history(a.history, a, history, test, total, device);
  if (device.is_cuda() && chief && !a.quiet) {
    const auto m = gpu_memory_stats(device.index);
    std::printf("GPU memory: peak %s in use, %s cached\n", format_bytes(m.peak_in_use).c_str(),
                format_bytes(m.cached).c_str());
  }
}

int run(const Args& a) {
  using namespace ember;
  const auto t0 = std::chrono::steady_clock::now();
  ember::apps::install_stop_handlers("\ntrain_mnist: second signal: exiting at once, nothing saved\n");
  set_num_threads(a.threads);
  enable_flush_to_zero();
  const Device device = choose_device(a);
  apply_settings(a, device);

  const std::unique_ptr<Strategy> strategy = make_strategy(a, device);
  const bool chief = strategy->is_chief();  // only rank 0 prints and writes files
  const bool quiet = a.quiet || !chief;
  if (chief) check_outputs(a);
  const std::string dir = a.data_dir.empty() ? "data/" + a.dataset : a.data_dir;
  MnistData data = load_mnist(dir, a.dataset);
  if (a.limit_train > 0) data.train = data.train.take(std::min(a.limit_train, data.train.size()));
  check_data(data, dir);

  strategy->build(recipe_of(a, data.train.sample_shape(), device));
  if (!a.inject_fault.empty()) {
    const auto colon = a.inject_fault.find(':');
    const bool hang = a.inject_fault.ends_with(":hang");
    detail::inject_fault(*strategy, std::stoi(a.inject_fault.substr(0, colon)),
                         std::stoll(a.inject_fault.substr(colon + 1)), hang);
  }
  Model& model = strategy->model();
  TrainingState state = starting_state(a, *strategy, quiet);
  if (a.evaluate_only) return evaluate_only(a, *strategy, data.test, device, chief, quiet);
  if (!quiet) print_training_setup(a, model, *strategy, device, data);
  FitOptions fit = fit_options(a, state, quiet);
  const int64_t batches_per_epoch = (data.train.size() + a.batch_size - 1) / a.batch_size;
  if (a.log_device_placement && chief)
    std::printf("Device placement (batch %lld):\n%s", static_cast<long long>(a.batch_size),
                model.placement_report(a.batch_size).c_str());
  double best = a.resume.empty() ? -1 : parse_best(state, a.resume);
  std::string last_checkpoint;  // the newest epoch checkpoint written (named if training diverges)
  fit.on_epoch_end = epoch_end(a, *strategy, state, best, last_checkpoint, chief, quiet);
  if (fit.initial_epoch >= a.epochs && !quiet)
    std::printf("The checkpoint has already trained %d of --epochs %d: nothing to train.\n", state.epochs_done,
                a.epochs);
  if (g_stop_signal != 0) {  // before the first step: nothing trained, nothing to save
    std::fprintf(stderr, "train_mnist: stopped by %s before training\n", signal_name(g_stop_signal));
    return 128 + g_stop_signal;
  }
  History history;
  try {
    if (fit.initial_epoch < a.epochs) history = strategy->fit(data.train, fit, &data.test);
  } catch (const NumericalError& e) {
    // Nothing of the diverged model is saved: the last good checkpoint stays the newest.
    throw NumericalError(std::string(e.what()) + (last_checkpoint.empty()
                                                      ? "; nothing was saved"
                                                      : "; the last good checkpoint is " + last_checkpoint));
  }
  if (!history.epochs.empty()) state.epochs_done = history.epochs.back().epoch;
  if (history.stopped) {
    state.epochs_done = history.stop_epoch;
    state.batches_done = history.stop_batch;
  }
  if (history.stopped || g_stop_signal != 0) return finish_interrupted(a, model, state, chief, batches_per_epoch);
  if (!a.save.empty() && chief) save_final(model, a.save, state);
  report_test(a, *strategy, data.test, history, device, chief, t0);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ember::apps::restart_with_bounded_openmp_spin(argv);
  Args a;
  if (const int code = parse_train_mnist_args(argc, argv, a); code >= 0) return code;
  try {
    return run(a);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "train_mnist: error: %s\n", e.what());
    return 1;
  }
}
