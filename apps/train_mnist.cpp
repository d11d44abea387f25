// train_mnist: trains the reference CNN on MNIST or Fashion-MNIST, Keras-style.
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
#include <fstream>
#include <iostream>
#include <thread>

#include <nlohmann/json.hpp>

#include "apps/cli.h"
#include "apps/reference_cnn.h"
#include "core/logger.h"
#include "distribute/fault_injection.h"
#include "ember.h"

namespace {

// The first SIGINT/SIGTERM asks training to stop after the current step; a second one exits
// at once (only async-signal-safe calls in the handler).
volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_stop_signal(int sig) {
  if (g_stop_signal != 0) {
    static const char msg[] = "\ntrain_mnist: second signal: exiting at once, nothing saved\n";
    [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, msg, sizeof msg - 1);
    ::_exit(128 + sig);
  }
  g_stop_signal = sig;
}

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // the libraries' blocking calls (MPI, file I/O) carry on
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

struct Args {
  std::string device = "auto";
  int epochs = 5;
  int64_t batch_size = 64;
  float lr = 1e-3f;
  uint64_t seed = 1;
  std::string data_dir;  // default: data/<dataset>
  std::string dataset = "mnist";
  int64_t steps = -1;
  int64_t limit_train = 0;  // use only the first N training images (0: all)
  int threads = 0;
  std::string history;
  bool quiet = false;
  bool strict_placement = false;
  bool log_device_placement = false;
  std::string save;            // checkpoint at the end
  std::string checkpoint_dir;  // checkpoint every epoch + the best by val_accuracy
  std::string resume;          // continue from a checkpoint
  bool evaluate_only = false;
  bool seed_given = false;
  std::string strategy = "default";
  int replicas = 2;
  std::string gpus;  // "0,1": the GPUs of --strategy mirrored (default: every usable GPU)
  double collective_timeout = 60;
  std::string inject_fault;  // "REPLICA:STEP[:hang]", for tests of failure handling
  std::string gpu_memory_limit;
  double gpu_memory_fraction = 0;
  bool allow_tf32 = false;  // --allow-tf32: TF32 even with --deterministic
  bool no_tf32 = false;     // --no-tf32: FP32 math
  bool deterministic = false;
  std::string conv_algorithms = "fast";
  bool cudnn_find = false;
  bool fused_conv = false;
  bool cuda_graphs = false;
  bool nhwc = false;
  bool overwrite = false;  // let --checkpoint-dir replace another run's checkpoints
  std::string model = "reference";
  std::string lr_schedule = "constant";
  float lr_decay = 0.5f;
  int lr_decay_epochs = 0;  // 0: the schedule's default (step: 5; exponential: 1; cosine: --epochs)
  int early_stopping = -1;  // patience on val_loss (-1: off)
  double early_stopping_min_delta = 0;
};

// A CLI11 check for a floating-point flag: a finite number in [lo, hi] (NaN and inf refused).
std::function<std::string(const std::string&)> finite_in(double lo, double hi) {
  return [lo, hi](const std::string& text) {
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    if (text.empty() || end != text.c_str() + text.size()) return "expected a number, got '" + text + "'";
    char range[96];
    std::snprintf(range, sizeof range, "[%g, %g]", lo, hi);
    if (!std::isfinite(v) || v < lo || v > hi)
      return "expected a finite number in " + std::string(range) + ", got " + text;
    return std::string();
  };
}

// A CLI11 check for an unsigned 64-bit decimal (CLI11 would wrap "-5" and clamp 1e30).
std::string unsigned_64(const std::string& text) {
  if (text.empty() || text.size() > 20 || text.find_first_not_of("0123456789") != std::string::npos)
    return "expected an integer in [0, 18446744073709551615], got '" + text + "'";
  try {
    (void)std::stoull(text);
  } catch (const std::exception&) {
    return "expected an integer in [0, 18446744073709551615], got '" + text + "'";
  }
  return std::string();
}

std::string non_empty(const std::string& text) {
  return text.empty() ? std::string("the path is empty") : std::string();
}

// "0,2" -> {0, 2}; empty on a malformed list.
std::vector<int> parse_gpu_list(const std::string& s) {
  std::vector<int> out;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = i;
    while (j < s.size() && s[j] >= '0' && s[j] <= '9') ++j;
    if (j == i || j - i > 4) return {};
    out.push_back(std::stoi(s.substr(i, j - i)));
    if (j == s.size()) break;
    if (s[j] != ',' || j + 1 == s.size()) return {};
    i = j + 1;
  }
  return out;
}

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

// The --lr-schedule flags as a schedule (none for constant); ArgumentError for one that makes no
// sense (a decay factor of 0 for step, say).
std::optional<ember::LearningRateSchedule> schedule_of(const Args& a) {
  using ember::LearningRateSchedule;
  if (a.lr_schedule == "constant") return std::nullopt;
  LearningRateSchedule s;
  s.kind = a.lr_schedule == "step"          ? LearningRateSchedule::Kind::Step
           : a.lr_schedule == "exponential" ? LearningRateSchedule::Kind::Exponential
                                            : LearningRateSchedule::Kind::Cosine;
  s.initial = a.lr;
  s.decay = a.lr_decay;
  s.decay_epochs = a.lr_decay_epochs > 0                               ? a.lr_decay_epochs
                   : s.kind == LearningRateSchedule::Kind::Step        ? 5
                   : s.kind == LearningRateSchedule::Kind::Exponential ? 1
                                                                       : a.epochs;
  s.validate();
  return s;
}

void write_history(const std::string& path, const Args& a, const ember::History& h, const ember::EvalResult& test,
                   double total_seconds, const ember::Device& device) {
  nlohmann::json j;
  j["dataset"] = a.dataset;
  j["model"] = a.model;
  j["lr_schedule"] = a.lr_schedule;
  if (a.early_stopping >= 0)
    j["early_stopping"] = {{"patience", a.early_stopping},
                           {"stopped_early", h.stopped_early},
                           {"best_epoch", h.best_epoch},
                           {"best_val_loss", h.best_val_loss}};
  j["device"] = device.str();
  j["epochs"] = a.epochs;
  j["batch_size"] = a.batch_size;
  j["learning_rate"] = a.lr;
  j["seed"] = a.seed;
  j["threads"] = ember::num_threads();
  j["ember_version"] = ember::version();
  for (const auto& e : h.epochs) {
    nlohmann::json row{{"epoch", e.epoch},
                       {"loss", e.loss},
                       {"accuracy", e.accuracy},
                       {"seconds", e.seconds},
                       {"steps", e.steps},
                       {"images_per_second", e.images_per_second},
                       {"learning_rate", e.learning_rate}};
    if (e.val_loss) row["val_loss"] = *e.val_loss;
    if (e.val_accuracy) row["val_accuracy"] = *e.val_accuracy;
    j["history"].push_back(row);
  }
  j["test"] = {{"loss", test.loss}, {"accuracy", test.accuracy}, {"samples", test.samples}};
  j["total_seconds"] = total_seconds;
  // Atomic (temporary file, renamed): a crash never leaves half a file under `path`.
  const std::string text = j.dump(2) + "\n";
  ember::write_file_atomically(path, "--history",
                               [&](int fd) { ember::write_all(fd, text.data(), text.size(), path); });
}

// Every output path, checked before the first step (an unwritable one fails now, not after
// training): --save and --history must be creatable files, --checkpoint-dir a writable folder
// (created when missing) holding no other run's checkpoints unless --resume continues that run
// or --overwrite replaces them (their epoch and best files are removed first, so none of the old
// run's is ever taken for this run's).
void check_outputs(const Args& a) {
  namespace fs = std::filesystem;
  if (!a.save.empty()) ember::check_output_path(a.save, "--save");
  if (!a.history.empty()) ember::check_output_path(a.history, "--history");
  if (a.checkpoint_dir.empty()) return;
  const fs::path dir(a.checkpoint_dir);
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(dir, ec))) {
    fs::create_directories(dir, ec);
    if (ec) throw ember::IoError("--checkpoint-dir " + a.checkpoint_dir + ": cannot create it: " + ec.message());
  }
  if (!fs::is_directory(dir, ec)) throw ember::IoError("--checkpoint-dir " + a.checkpoint_dir + " is not a folder");
  std::vector<std::string> found;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name == "best.safetensors" || name == "interrupted.safetensors" ||
        (name.starts_with("epoch-") && name.ends_with(".safetensors")))
      found.push_back(name);
  }
  if (!found.empty() && a.overwrite && a.resume.empty()) {
    // Replaced as a whole: a later epoch file of the old run must not be taken for this run's.
    for (const std::string& name : found) fs::remove(dir / name, ec);
    found.clear();
  }
  if (!found.empty() && a.resume.empty())
    throw ember::IoError("--checkpoint-dir " + a.checkpoint_dir + " holds another run's checkpoints (" + found.front() +
                         (found.size() > 1 ? " and " + std::to_string(found.size() - 1) + " more" : "") +
                         "): continue that run with --resume, replace them with --overwrite, or choose another folder");
  ember::check_output_path((dir / "best.safetensors").string(), "--checkpoint-dir");
  ember::check_output_path((dir / "epoch-001.safetensors").string(), "--checkpoint-dir");
}

// The data checks that would otherwise surface only after the first epoch.
void check_data(const ember::MnistData& data, const std::string& dir) {
  if (data.train.size() == 0) throw ember::IoError("the training set in " + dir + " is empty");
  if (data.test.size() == 0) throw ember::IoError("the test set in " + dir + " is empty");
  if (!(data.test.sample_shape() == data.train.sample_shape()))
    throw ember::IoError("the test images in " + dir + " are " + data.test.sample_shape().str() +
                         " but the training images " + data.train.sample_shape().str());
}

// The final save. Its failure must not throw the trained model away: then it is saved beside
// the asked path (or in the temporary folder) and the error says where.
void save_final(const ember::Sequential& model, const std::string& path, const ember::TrainingState& state) {
  try {
    model.save(path, state);
    return;
  } catch (const ember::IoError& first) {
    namespace fs = std::filesystem;
    const std::string rescue_name = fs::path(path).filename().string() + ".rescued-" + std::to_string(::getpid());
    std::error_code ec;
    const fs::path tmp = fs::temp_directory_path(ec);
    for (const fs::path& dir : {fs::path(path).parent_path(), ec ? fs::path("/tmp") : tmp}) {
      const std::string rescue = (dir.empty() ? fs::path(rescue_name) : dir / rescue_name).string();
      try {
        model.save(rescue, state);
      } catch (const ember::IoError&) {
        continue;
      }
      throw ember::IoError(std::string(first.what()) + "; the trained model was saved to " + rescue + " instead");
    }
    throw;
  }
}

double parse_best(const ember::TrainingState& state, const std::string& path) {
  const auto it = state.extra.find("best_val_accuracy");
  if (it == state.extra.end()) return -1;
  char* end = nullptr;
  const double v = std::strtod(it->second.c_str(), &end);
  if (it->second.empty() || end != it->second.c_str() + it->second.size() || !std::isfinite(v))
    throw ember::CheckpointError("checkpoint " + path + ": metadata 'best_val_accuracy' is not a number: '" +
                                 it->second + "'");
  return v;
}

// After a stop request: the resumable checkpoint(s) and the one line that says where.
int finish_interrupted(const Args& a, const ember::Sequential& model, const ember::TrainingState& state, bool chief,
                       int64_t batches_per_epoch) {
  const int sig = g_stop_signal != 0 ? g_stop_signal : SIGINT;  // another rank's request: as Ctrl-C
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
    std::fprintf(stderr, "train_mnist: stopped by %s %s: %s\n", sig == SIGTERM ? "SIGTERM" : "SIGINT", where.c_str(),
                 what.c_str());
  }
  return 128 + sig;
}

int run(const Args& a) {
  using namespace ember;
  const auto t0 = std::chrono::steady_clock::now();
  install_stop_handlers();
  set_num_threads(a.threads);
  enable_flush_to_zero();
  const Device device = choose_device(a);
  // TF32 as TensorFlow: on (Ampere and newer), off for --deterministic and --conv-algorithms exact runs
  // (the same bits as another FP32 run, closest to the CPU) unless asked for, off with --no-tf32.
  set_allow_tf32(a.allow_tf32 || (!a.no_tf32 && !a.deterministic && a.conv_algorithms != "exact"));
  set_gpu_deterministic(a.deterministic);
  set_conv_algorithms(parse_conv_algorithms(a.conv_algorithms));
  set_cudnn_find(a.cudnn_find);
  set_fused_conv(a.fused_conv);
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

  const std::unique_ptr<Strategy> strategy = make_strategy(a, device);
  const bool chief = strategy->is_chief();  // only rank 0 prints and writes files
  const bool quiet = a.quiet || !chief;
  if (chief) check_outputs(a);
  const std::string dir = a.data_dir.empty() ? "data/" + a.dataset : a.data_dir;
  MnistData data = load_mnist(dir, a.dataset);
  if (a.limit_train > 0) data.train = data.train.take(std::min(a.limit_train, data.train.size()));
  check_data(data, dir);

  ModelRecipe recipe;
  if (a.model == "bn-cnn")
    recipe.add_layers = [](Sequential& m) { apps::add_bn_cnn(m); };
  else
    recipe.add_layers = [](Sequential& m) { apps::add_reference_cnn(m); };
  recipe.input_shape = data.train.sample_shape();
  recipe.seed = a.seed;
  recipe.make_optimizer = [&] { return std::make_unique<Adam>(AdamOptions{.learning_rate = a.lr}); };
  recipe.device = device;
  strategy->build(recipe);
  if (!a.inject_fault.empty()) {
    const auto colon = a.inject_fault.find(':');
    const bool hang = a.inject_fault.ends_with(":hang");
    detail::inject_fault(*strategy, std::stoi(a.inject_fault.substr(0, colon)),
                         std::stoll(a.inject_fault.substr(colon + 1)), hang);
  }
  Sequential& model = strategy->model();
  TrainingState state{.epochs_done = 0, .batches_done = 0, .seed = a.seed, .batch_size = a.batch_size, .extra = {}};
  if (!a.resume.empty()) {
    state = strategy->load(a.resume);
    if (state.batches_done > 0 && state.batch_size != a.batch_size)
      throw ArgumentError(a.resume + " stopped " + std::to_string(state.batches_done) + " batches into epoch " +
                          std::to_string(state.epochs_done + 1) + " at --batch-size " +
                          std::to_string(state.batch_size) + ": resume it with that batch size");
    if (a.seed_given && state.seed != a.seed)
      detail::logger().warn("--seed {} ignored: resuming the run of {} with its seed {}", a.seed, a.resume, state.seed);
    if (!quiet)
      std::printf(
          "Resumed %s: %d epoch%s done%s, seed %llu\n", a.resume.c_str(), state.epochs_done,
          state.epochs_done == 1 ? "" : "s",
          state.batches_done > 0 ? (" and " + std::to_string(state.batches_done) + " steps of the next").c_str() : "",
          static_cast<unsigned long long>(state.seed));
    state.batch_size = a.batch_size;
  }
  if (a.evaluate_only) {
    const EvalResult r = strategy->evaluate(data.test, std::max<int64_t>(a.batch_size, 256));  // as fit validates
    if (chief)
      std::printf("Test accuracy: %.2f%% (loss %.4f) on %lld images\n", r.accuracy * 100.0, r.loss,
                  static_cast<long long>(r.samples));
    return 0;
  }
  if (!quiet) {
    std::printf("%s", model.summary().c_str());
    const std::string math = !device.is_cuda() ? ""
                                               : std::string(allow_tf32() ? " (TF32 math" : " (FP32 math") +
                                                     (a.cuda_graphs ? ", CUDA graphs)" : ")");
    std::printf("Training on %s%s with %d thread%s, strategy %s, %s convolutions: %lld images, %lld test images\n",
                device.str().c_str(), math.c_str(), num_threads(), num_threads() == 1 ? "" : "s",
                strategy->name().c_str(), to_string(conv_algorithms()), static_cast<long long>(data.train.size()),
                static_cast<long long>(data.test.size()));
    std::fflush(stdout);
  }
  FitOptions fit;
  fit.epochs = a.epochs;
  fit.batch_size = a.batch_size;
  fit.seed = state.seed;
  fit.initial_epoch = std::min(state.epochs_done, a.epochs);
  fit.initial_batch = state.epochs_done < a.epochs ? state.batches_done : 0;
  fit.stop_requested = [] { return g_stop_signal != 0; };
  const int64_t batches_per_epoch = (data.train.size() + a.batch_size - 1) / a.batch_size;
  fit.max_steps = a.steps;
  fit.cuda_graphs = a.cuda_graphs;
  fit.verbose = quiet ? 0 : 1;
  fit.learning_rate_schedule = schedule_of(a);
  if (a.early_stopping >= 0)
    fit.early_stopping = EarlyStopping{.patience = a.early_stopping, .min_delta = a.early_stopping_min_delta};
  if (a.log_device_placement && chief)
    std::printf("Device placement (batch %lld):\n%s", static_cast<long long>(a.batch_size),
                model.placement_report(a.batch_size).c_str());
  double best = a.resume.empty() ? -1 : parse_best(state, a.resume);
  std::string last_checkpoint;  // the newest epoch checkpoint written (named if training diverges)
  fit.on_epoch_end = [&](const EpochLogs& logs) {
    state.epochs_done = logs.epoch;
    state.batches_done = 0;
    if (!quiet && strategy->num_replicas() > 1) {
      const StrategyStats& s = strategy->stats();
      std::printf("  %s: %.0f images/s in total, %.0f per replica; all-reduce %.1f%% of step time\n",
                  strategy->name().c_str(), logs.images_per_second, logs.images_per_second / strategy->num_replicas(),
                  s.step_seconds > 0 ? 100.0 * s.allreduce_seconds / s.step_seconds : 0.0);
    }
    if (!a.checkpoint_dir.empty() && chief) {
      char name[64];
      std::snprintf(name, sizeof name, "/epoch-%03d.safetensors", logs.epoch);
      if (logs.val_accuracy && *logs.val_accuracy > best) {
        best = *logs.val_accuracy;
        state.extra["best_val_accuracy"] = std::to_string(best);
        model.save(a.checkpoint_dir + "/best.safetensors", state);
      }
      model.save(a.checkpoint_dir + name, state);
      last_checkpoint = a.checkpoint_dir + name;
    }
    return true;
  };
  if (fit.initial_epoch >= a.epochs && !quiet)
    std::printf("The checkpoint has already trained %d of --epochs %d: nothing to train.\n", state.epochs_done,
                a.epochs);
  if (g_stop_signal != 0) {  // before the first step: nothing trained, nothing to save
    std::fprintf(stderr, "train_mnist: stopped by %s before training\n",
                 g_stop_signal == SIGTERM ? "SIGTERM" : "SIGINT");
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
  // The test set is fit's validation data: after a whole fit its last evaluation is of the weights
  // the model holds now, at the same batch size, so it is the test result (evaluating again would
  // repeat the same sums: 4% of a CPU epoch). After an early stop (weights restored) or when
  // nothing was trained, the test set is evaluated here. Reduced across ranks either way.
  EvalResult test;
  if (!history.epochs.empty() && !history.stopped_early && history.epochs.back().val_loss) {
    const EpochLogs& last = history.epochs.back();
    test = {*last.val_loss, *last.val_accuracy, last.val_samples};
  } else {
    test = strategy->evaluate(data.test, std::max<int64_t>(a.batch_size, 256));  // fit's validation batch
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
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{
      "Train the reference CNN (Conv32-Pool-Conv64-Pool-Conv64-Dense64-Dense10), or --model bn-cnn, on MNIST or "
      "Fashion-MNIST.",
      "train_mnist"};
  // A flag given twice takes its last value, so wrappers can set defaults users override
  // (scripts/train.sh passes --epochs 5 before the user's arguments).
  app.option_defaults()->always_capture_default()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--device", a.device, "cpu, gpu, gpu:N or cuda:N (auto: the GPU when usable, else cpu)");
  app.add_option("--epochs", a.epochs, "Epochs to train")->check(CLI::Range(1, 100000));
  app.add_option("--batch-size", a.batch_size, "Batch size")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--lr", a.lr, "Adam learning rate")->check(finite_in(1e-12, 10.0));
  auto* seed = app.add_option("--seed", a.seed, "Seed for initialisation and shuffling")->check(unsigned_64);
  app.add_option("--data-dir", a.data_dir, "Directory with the four IDX files (default: data/<dataset>)");
  app.add_option("--dataset", a.dataset, "mnist or fashion-mnist")->check(CLI::IsMember({"mnist", "fashion-mnist"}));
  app.add_option("--model", a.model,
                 "reference (Conv32-Pool-Conv64-Pool-Conv64-Dense64-Dense10) or bn-cnn "
                 "(Conv32-BatchNorm-ReLU-Pool-Conv64-BatchNorm-ReLU-Pool-Dropout0.25-Dense10)")
      ->check(CLI::IsMember({"reference", "bn-cnn"}));
  app.add_option("--lr-schedule", a.lr_schedule,
                 "Learning rate per epoch from --lr: constant, step (x --lr-decay every --lr-decay-epochs, default "
                 "5), exponential (x --lr-decay per --lr-decay-epochs, default 1, smoothly) or cosine (down to "
                 "--lr-decay x --lr at --lr-decay-epochs, default --epochs)")
      ->check(CLI::IsMember({"constant", "step", "exponential", "cosine"}));
  app.add_option("--lr-decay", a.lr_decay, "The schedule's factor (step, exponential: (0, 1]; cosine's floor: [0, 1])")
      ->check(finite_in(0.0, 1.0));
  app.add_option("--lr-decay-epochs", a.lr_decay_epochs, "The schedule's period in epochs (0: its default)")
      ->check(CLI::Range(0, 100000));
  app.add_option("--early-stopping", a.early_stopping,
                 "Stop when val_loss has not improved for this many epochs, and restore the best epoch's weights "
                 "(-1: off)")
      ->check(CLI::Range(-1, 100000));
  app.add_option("--early-stopping-min-delta", a.early_stopping_min_delta,
                 "The least fall of val_loss that counts as an improvement")
      ->check(finite_in(0.0, 1e9));
  app.add_option("--steps", a.steps, "Stop after N training steps in total (-1: no limit)")
      ->check(CLI::Range(int64_t{-1}, int64_t{1} << 40));
  app.add_option("--limit-train", a.limit_train, "Train on the first N images only (0: all)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  app.add_option("--threads", a.threads, "CPU threads (0: all cores)")->check(CLI::Range(0, 4096));
  app.add_option("--history", a.history, "Write per-epoch metrics and the test result as JSON to this path")
      ->check(non_empty);
  app.add_flag("--quiet", a.quiet, "Print only the final test line");
  app.add_flag("--strict-placement", a.strict_placement, "Fail instead of falling back to CPU when the GPU is missing");
  app.add_flag("--log-device-placement", a.log_device_placement, "Print each layer's device and kernel");
  app.add_option("--save", a.save, "Save the trained model and optimizer state (safetensors) to this path")
      ->check(non_empty);
  app.add_option("--checkpoint-dir", a.checkpoint_dir,
                 "Checkpoint every epoch (epoch-NNN.safetensors) and the best by val_accuracy (best.safetensors)")
      ->check(non_empty);
  app.add_flag("--overwrite", a.overwrite,
               "Let --checkpoint-dir replace the checkpoints another run left there (refused otherwise, unless "
               "--resume)");
  auto* resume = app.add_option("--resume", a.resume, "Continue training from this checkpoint up to --epochs in total");
  app.add_flag("--evaluate-only", a.evaluate_only, "Only print the test metrics of the --resume checkpoint")
      ->needs(resume);
  app.add_option("--strategy", a.strategy,
                 "default (one replica), mirrored (replicas in this process), multiworker (one per MPI rank)")
      ->check(CLI::IsMember({"default", "mirrored", "multiworker"}));
  app.add_option("--replicas", a.replicas,
                 "CPU replicas for --strategy mirrored --device cpu (one thread drives them all)")
      ->check(CLI::Range(1, 256));
  app.add_option("--gpus", a.gpus, "GPUs for --strategy mirrored, e.g. 0,1 (default: every usable GPU)")
      ->check([](const std::string& s) {
        return parse_gpu_list(s).empty() ? std::string("expected a list of GPU indices such as 0,1") : std::string();
      });
  app.add_option("--collective-timeout", a.collective_timeout,
                 "Seconds a collective may wait for the other replicas before the job is ended")
      ->check(finite_in(0.1, 86400.0));
  app.add_option("--gpu-memory-limit", a.gpu_memory_limit, "Cap GPU memory: BYTES, or with KiB/MiB/GiB/KB/MB/GB")
      ->check([](const std::string& s) {
        try {
          ember::MemoryPolicy::limit(s);
          return std::string();
        } catch (const std::exception& e) {
          return std::string(e.what());
        }
      });
  app.add_option("--gpu-memory-fraction", a.gpu_memory_fraction, "Cap GPU memory at this fraction of the card (0, 1]")
      ->check(finite_in(1e-6, 1.0));
  auto* tf32 = app.add_flag("--allow-tf32", a.allow_tf32,
                            "GPU: TF32 tensor cores in cuBLAS/cuDNN (the default on Ampere and newer, as in "
                            "TensorFlow; ~1e-3 relative rounding), also with --deterministic");
  app.add_flag("--no-tf32", a.no_tf32, "GPU: FP32 math throughout (the default with --deterministic)")->excludes(tf32);
  app.add_flag("--deterministic", a.deterministic,
               "GPU: only deterministic cuDNN algorithms (the same bits every run)");
  app.add_option("--conv-algorithms", a.conv_algorithms,
                 "fast (Winograd where it fits) or exact (direct sums only; on the GPU deterministic too)")
      ->check(CLI::IsMember({"fast", "exact"}));
  app.add_flag("--cudnn-find", a.cudnn_find,
               "GPU: time every cuDNN convolution algorithm once per shape and take the fastest (as PyTorch's "
               "cudnn.benchmark) instead of cuDNN's heuristic choice");
  app.add_flag("--fused-conv", a.fused_conv,
               "GPU: each convolution's forward as one cuDNN call (convolution + bias + ReLU; unverified on a GPU)");
  app.add_flag("--nhwc", a.nhwc, "GPU: Conv2D and MaxPool2D activations channels-last for cuDNN (unverified on a GPU)");
  app.add_flag("--cuda-graphs", a.cuda_graphs,
               "GPU: capture the training step once as a CUDA graph and replay it (one launch per step instead of "
               "~20; the same bits; unverified on a GPU)");
  app.add_option("--inject-fault", a.inject_fault,
                 "REPLICA:STEP[:hang] - make that replica fail (or hang) at that step (tests)")
      ->group("")  // hidden
      ->check([](const std::string& s) {
        const auto c = s.find(':');
        const std::string step = c == std::string::npos ? "" : s.substr(c + 1);
        const std::string digits = step.ends_with(":hang") ? step.substr(0, step.size() - 5) : step;
        const auto number = [](const std::string& t) {
          return !t.empty() && t.size() <= 9 && t.find_first_not_of("0123456789") == std::string::npos;
        };
        return c != std::string::npos && number(s.substr(0, c)) && number(digits)
                   ? std::string()
                   : std::string("expected REPLICA:STEP[:hang] (non-negative integers)");
      });
  if (const int code = ember::apps::parse_command_line(app, argc, argv); code >= 0) return code;
  a.seed_given = seed->count() > 0;
  if (const unsigned cores = std::thread::hardware_concurrency(); cores > 0 && a.threads > static_cast<int>(cores))
    std::fprintf(stderr,
                 "train_mnist: warning: --threads %d is more than the %u cores here: OpenMP threads will share cores "
                 "and run slower\n",
                 a.threads, cores);
  if (!a.gpus.empty() && a.strategy != "mirrored") {
    std::fprintf(stderr, "train_mnist: --gpus is for --strategy mirrored (see --help)\n");
    return 2;
  }
  if (a.cuda_graphs && a.strategy != "default") {
    std::fprintf(stderr,
                 "train_mnist: --cuda-graphs captures the default strategy's step on one GPU; the %s strategy's steps "
                 "run eagerly (leave out --cuda-graphs)\n",
                 a.strategy.c_str());
    return 2;
  }
  if (a.cuda_graphs && a.device == "cpu") {
    std::fprintf(stderr, "train_mnist: --cuda-graphs needs a GPU, but --device is cpu\n");
    return 2;
  }
  try {
    if (a.device != "auto") ember::Device::parse(a.device);  // a bad --device is a command-line error
    (void)schedule_of(a);                                    // so is a schedule that makes no sense
  } catch (const ember::ArgumentError& e) {
    std::fprintf(stderr, "train_mnist: %s (see --help)\n", e.what());
    return 2;
  }
  try {
    return run(a);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "train_mnist: error: %s\n", e.what());
    return 1;
  }
}
