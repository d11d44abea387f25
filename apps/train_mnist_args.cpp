// train_mnist's flags: what each means, its checks, and the checks across flags.
#include "apps/train_mnist_args.h"

#include <cstdio>
#include <thread>

#include "apps/cli.h"

namespace ember::apps {

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

std::unique_ptr<Optimizer> optimizer_of(const Args& a) {
  const float wd = a.weight_decay >= 0 ? a.weight_decay : (a.optimizer == "adamw" ? 0.004f : 0.0f);
  if (a.optimizer == "adamw")
    return std::make_unique<AdamW>(
        AdamWOptions{.learning_rate = a.lr, .weight_decay = wd, .global_clipnorm = a.clipnorm});
  if (a.optimizer == "sgd")
    return std::make_unique<SGD>(
        SGDOptions{.learning_rate = a.lr, .momentum = 0.9f, .weight_decay = wd, .global_clipnorm = a.clipnorm});
  if (a.optimizer == "rmsprop")
    return std::make_unique<RMSprop>(
        RmspropOptions{.learning_rate = a.lr, .weight_decay = wd, .global_clipnorm = a.clipnorm});
  return std::make_unique<Adam>(AdamOptions{.learning_rate = a.lr, .weight_decay = wd, .global_clipnorm = a.clipnorm});
}

std::optional<LearningRateSchedule> schedule_of(const Args& a) {
  if (a.lr_schedule == "constant" && a.warmup_steps == 0) return std::nullopt;
  LearningRateSchedule s;
  s.kind = a.lr_schedule == "constant"      ? LearningRateSchedule::Kind::Constant
           : a.lr_schedule == "step"        ? LearningRateSchedule::Kind::Step
           : a.lr_schedule == "exponential" ? LearningRateSchedule::Kind::Exponential
                                            : LearningRateSchedule::Kind::Cosine;
  s.warmup_steps = a.warmup_steps;  // with a warm-up the schedule runs per step
  s.initial = a.lr;
  s.decay = a.lr_decay;
  s.decay_epochs = a.lr_decay_epochs > 0                               ? a.lr_decay_epochs
                   : s.kind == LearningRateSchedule::Kind::Step        ? 5
                   : s.kind == LearningRateSchedule::Kind::Exponential ? 1
                                                                       : a.epochs;
  s.validate();
  return s;
}

namespace {

// The options whose counts the checks after parsing read.
struct Later {
  CLI::Option* model = nullptr;
  CLI::Option* seed = nullptr;
  CLI::Option* schedule = nullptr;
  CLI::Option* decay = nullptr;
};

// The group "Data".
void add_data_flags(CLI::App& app, Args& a) {
  app.option_defaults()->group("Data");
  app.add_option("--dataset", a.dataset, "mnist or fashion-mnist")->check(CLI::IsMember({"mnist", "fashion-mnist"}));
  app.add_option("--data-dir", a.data_dir, "Directory with the four IDX files (.gz or not)")
      ->type_name("DIR")
      ->default_str("data/<dataset>");
  app.add_option("--batch-size", a.batch_size, "Batch size")->transform(integer_in(1, int64_t{1} << 20));
  app.add_option("--limit-train", a.limit_train, "Train on the first N training images only")
      ->transform(integer_in(1, int64_t{1} << 40))
      ->default_str("all");
}

// The group "Model and training".
void add_model_flags(CLI::App& app, Args& a, Later& later) {
  app.option_defaults()->group("Model and training");
  later.model = app.add_option("--model", a.model,
                               "reference, bn-cnn (BatchNorm, Dropout) or resnet (residual blocks; a cosine "
                               "--lr-schedule by default)")
                    ->check(CLI::IsMember({"reference", "bn-cnn", "resnet"}));
  app.add_option("--epochs", a.epochs, "Epochs to train")->transform(integer_in(1, 100000));
  app.add_option("--steps", a.steps, "Stop after N training steps in total")
      ->transform(integer_in(1, int64_t{1} << 40))
      ->default_str("no limit");
  later.seed = app.add_option("--seed", a.seed, "Seed for initialisation and shuffling")->transform(unsigned_64());
  app.add_option("--early-stopping", a.early_stopping,
                 "Stop when val_loss has not improved for N epochs; restore the best epoch's weights")
      ->transform(integer_in(-1, 100000))
      ->default_str("off");
  app.add_option("--early-stopping-min-delta", a.early_stopping_min_delta,
                 "The least fall of val_loss that counts as an improvement")
      ->check(finite_in(0.0, 1e9));
}

// The group "Optimizer and schedule".
void add_optimizer_flags(CLI::App& app, Args& a, Later& later) {
  app.option_defaults()->group("Optimizer and schedule");
  app.add_option("--optimizer", a.optimizer, "adam, adamw (decoupled weight decay), sgd (momentum 0.9) or rmsprop")
      ->check(CLI::IsMember({"adam", "adamw", "sgd", "rmsprop"}));
  app.add_option("--lr", a.lr, "Learning rate of the --optimizer")
      ->check(finite_in(1e-12, 10.0))
      ->default_str("0.001, for every optimizer");
  app.add_option("--weight-decay", a.weight_decay,
                 "Decoupled weight decay of kernels (not biases or BatchNorm): p -= lr x decay x p each step")
      ->check(finite_in(0.0, 1.0))
      ->default_str("the optimizer's: adamw 0.004, the others 0");
  app.add_option("--clipnorm", a.clipnorm, "Clip the gradient to this global L2 norm before each update")
      ->check(finite_in(0.0, 1e9))
      ->default_str("off");
  app.add_option("--warmup-steps", a.warmup_steps,
                 "Raise the rate linearly over the first N steps; the schedule then runs per step")
      ->transform(integer_in(0, int64_t{1} << 40))
      ->default_str("none");
  later.schedule = app.add_option("--lr-schedule", a.lr_schedule,
                                  "The rate per epoch from --lr: constant, step, exponential (x --lr-decay per "
                                  "--lr-decay-epochs) or cosine (down to --lr-decay x --lr)")
                       ->check(CLI::IsMember({"constant", "step", "exponential", "cosine"}))
                       ->default_str("constant; resnet: cosine");
  later.decay = app.add_option("--lr-decay", a.lr_decay,
                               "The schedule's factor: step, exponential in (0, 1]; cosine's floor in [0, 1]")
                    ->check(finite_in(0.0, 1.0))
                    ->default_str("0.5; resnet: 0");
  app.add_option("--lr-decay-epochs", a.lr_decay_epochs, "The schedule's period in epochs")
      ->transform(integer_in(0, 100000))
      ->default_str("the schedule's: step 5, exponential 1, cosine --epochs");
}

// The group "Checkpoints and output".
void add_output_flags(CLI::App& app, Args& a) {
  app.option_defaults()->group("Checkpoints and output");
  app.add_option("--save", a.save, "Save the trained model and optimizer state (safetensors) here")
      ->type_name("PATH")
      ->check(path_given());
  app.add_option("--checkpoint-dir", a.checkpoint_dir,
                 "Checkpoint every epoch (epoch-NNN.safetensors) and the best by val_accuracy (best.safetensors)")
      ->type_name("DIR")
      ->check(path_given());
  app.add_flag("--overwrite", a.overwrite,
               "Let --checkpoint-dir replace the checkpoints of another run (refused otherwise, unless --resume)");
  auto* resume = app.add_option("--resume", a.resume, "Continue training from this checkpoint up to --epochs in total")
                     ->type_name("PATH");
  auto* load = app.add_option("--load", a.load,
                              "Recreate the model a checkpoint holds (no --model) and evaluate it; needs "
                              "--evaluate-only, excludes --resume")
                   ->type_name("PATH")
                   ->excludes(resume);
  auto* evaluate_only = app.add_flag("--evaluate-only", a.evaluate_only,
                                     "Only print the test metrics of the --resume or --load checkpoint");
  load->needs(evaluate_only);
  app.add_option("--history", a.history, "Write per-epoch metrics and the test result as JSON here")
      ->type_name("PATH")
      ->check(path_given());
  app.add_flag("--quiet", a.quiet, "Print only the final test line");
}

// The group "Device and placement".
void add_device_flags(CLI::App& app, Args& a) {
  app.option_defaults()->group("Device and placement");
  app.add_option("--device", a.device, "auto (the GPU when usable, else cpu), cpu, gpu, gpu:N or cuda:N");
  app.add_flag("--strict-placement", a.strict_placement,
               "Fail instead of falling back to the CPU when the GPU is missing");
  app.add_flag("--log-device-placement", a.log_device_placement, "Print each layer's device and kernel");
  app.add_option("--threads", a.threads,
                 "CPU threads, or free: the cores other processes leave free (counted at the start)")
      ->transform(thread_count())
      ->default_str("all cores");
}

// The group "Data-parallel".
void add_parallel_flags(CLI::App& app, Args& a) {
  app.option_defaults()->group("Data-parallel");
  app.add_option("--strategy", a.strategy,
                 "default (one replica), mirrored (replicas in this process) or multiworker (one per MPI rank)")
      ->check(CLI::IsMember({"default", "mirrored", "multiworker"}));
  app.add_option("--replicas", a.replicas, "CPU replicas of --strategy mirrored --device cpu (one thread drives all)")
      ->transform(integer_in(1, 256));
  app.add_option("--gpus", a.gpus, "GPUs of --strategy mirrored, e.g. 0,1")
      ->type_name("LIST")
      ->default_str("every usable GPU")
      ->check([](const std::string& s) {
        return parse_gpu_list(s).empty() ? std::string("expected a list of GPU indices such as 0,1") : std::string();
      });
  app.add_option("--collective-timeout", a.collective_timeout,
                 "Seconds a collective may wait for the other replicas before the job ends (exit code 3)")
      ->check(finite_in(0.1, 86400.0));
}

// The group "Numerics".
void add_numerics_flags(CLI::App& app, Args& a) {
  app.option_defaults()->group("Numerics");
  auto* tf32 = app.add_flag("--allow-tf32", a.allow_tf32,
                            "GPU: TF32 tensor cores in cuBLAS/cuDNN also with --deterministic (without it, the "
                            "default on Ampere and newer; ~1e-3 relative rounding)");
  app.add_flag("--no-tf32", a.no_tf32,
               "GPU: FP32 math throughout (the default with --deterministic); excludes --allow-tf32")
      ->excludes(tf32);
  app.add_flag("--deterministic", a.deterministic,
               "GPU: only deterministic cuDNN algorithms (the same bits every run)");
  app.add_option("--conv-algorithms", a.conv_algorithms,
                 "fast (Winograd where it fits) or exact (direct sums only; on the GPU deterministic too)")
      ->check(CLI::IsMember({"fast", "exact"}));
  app.add_option("--precision", a.precision,
                 "fp32, or mixed_bf16: convolutions and dense layers multiply in bfloat16 with fp32 accumulation "
                 "(CPU with AVX512-BF16 or AMX; fp32 elsewhere, an error with --strict-placement)")
      ->check(CLI::IsMember({"fp32", "mixed_bf16"}));
}

// The group "GPU memory".
void add_gpu_memory_flags(CLI::App& app, Args& a) {
  app.option_defaults()->group("GPU memory");
  app.add_option("--gpu-memory-limit", a.gpu_memory_limit, "Cap GPU memory: BYTES, or with KiB/MiB/GiB/KB/MB/GB")
      ->type_name("SIZE")
      ->default_str("no limit")
      ->check([](const std::string& s) {
        try {
          ember::MemoryPolicy::limit(s);
          return std::string();
        } catch (const std::exception& e) {
          return std::string(e.what());
        }
      });
  app.add_option("--gpu-memory-fraction", a.gpu_memory_fraction, "Cap GPU memory at this fraction of the card, (0, 1]")
      ->check(finite_in(1e-6, 1.0))
      ->default_str("no limit");
}

// The group "GPU speed".
void add_gpu_speed_flags(CLI::App& app, Args& a) {
  app.option_defaults()->group("GPU speed (experimental, all off by default; unverified on a GPU)");
  app.add_flag("--cudnn-find", a.cudnn_find,
               "Time every cuDNN convolution algorithm once per shape and take the fastest (cudnn.benchmark)");
  app.add_flag("--fused-conv", a.fused_conv, "Each convolution's forward as one cuDNN call (+ bias + ReLU)");
  app.add_flag("--fused-dense", a.fused_dense, "Dense's bias (+ ReLU) and bias gradient as cuBLASLt GEMM epilogues");
  app.add_flag("--fused-loss", a.fused_loss, "The loss's forward, sums and gradient as one kernel (the same bits)");
  app.add_flag("--fused-advance", a.fused_advance,
               "The loader's cursor, Adam's step and Dropout's counter advanced by the kernels that read them, "
               "not one-thread kernels (the same bits)");
  app.add_flag("--nhwc", a.nhwc, "Channels-last GPU activations (for mixed_bf16: FP32 NHWC is far slower)");
  app.add_flag("--cuda-graphs", a.cuda_graphs,
               "Capture the training step once as a CUDA graph and replay it: one launch per step (the same bits)");
}

// A hidden flag for the tests.
void add_test_flags(CLI::App& app, Args& a) {
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
}

// The checks across flags, once they are parsed: 2 for a bad combination (said in one line), else
// -1; fills in what follows from other flags (--seed given; the resnet recipe's schedule).
int check_combinations(Args& a, const Later& later) {
  a.seed_given = later.seed->count() > 0;
  if (a.evaluate_only && a.resume.empty() && a.load.empty()) {
    std::fprintf(stderr, "train_mnist: --evaluate-only needs --resume FILE or --load FILE (see --help)\n");
    return 2;
  }
  if (!a.load.empty() && later.model->count() > 0) {
    std::fprintf(stderr, "train_mnist: --load recreates the model from the file: leave out --model (see --help)\n");
    return 2;
  }
  if (a.model == "resnet") {  // the model's recipe: a cosine schedule down to 0 over the epochs
    if (later.schedule->count() == 0) a.lr_schedule = "cosine";
    if (later.decay->count() == 0 && a.lr_schedule == "cosine") a.lr_decay = 0.0f;
  }
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
  return -1;
}

}  // namespace

int parse_train_mnist_args(int argc, char** argv, Args& a) {
  CLI::App app{
      "Train a CNN on MNIST or Fashion-MNIST: the reference CNN "
      "(Conv32-Pool-Conv64-Pool-Conv64-Dense64-Dense10), bn-cnn or resnet (--model).",
      "train_mnist"};
  set_up_help(app,
              "  0        success\n"
              "  1        runtime error (missing data, device, I/O, diverged training)\n"
              "  2        bad command line\n"
              "  3        a replica or rank hung past --collective-timeout\n"
              "  130/143  stopped by SIGINT/SIGTERM (after the current step; a second signal exits at once)");
  // A flag given twice takes its last value, so wrappers can set defaults users override
  // (scripts/train.sh passes --epochs 5 before the user's arguments).
  app.option_defaults()->always_capture_default()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  // --help lists the groups in the order of their first flag here.
  app.get_help_ptr()->group("Help");

  Later later;
  add_data_flags(app, a);
  add_model_flags(app, a, later);
  add_optimizer_flags(app, a, later);
  add_output_flags(app, a);
  add_device_flags(app, a);
  add_parallel_flags(app, a);
  add_numerics_flags(app, a);
  add_gpu_memory_flags(app, a);
  add_gpu_speed_flags(app, a);
  add_test_flags(app, a);
  if (const int code = parse_command_line(app, argc, argv); code >= 0) return code;
  return check_combinations(a, later);
}

}  // namespace ember::apps
