// The command line of train_mnist: its flags (Args) and their parsing.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ember.h"

namespace ember::apps {

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
  std::string load;            // evaluate the model a checkpoint holds, recreated from it
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
  std::string precision = "fp32";  // --precision: fp32 or mixed_bf16
  bool cudnn_find = false;
  bool fused_conv = false;
  bool fused_dense = false;
  bool fused_loss = false;
  bool fused_advance = false;
  bool cuda_graphs = false;
  bool nhwc = false;
  bool overwrite = false;  // let --checkpoint-dir replace another run's checkpoints
  std::string model = "reference";
  std::string optimizer = "adam";  // adam, adamw, sgd, rmsprop
  float weight_decay = -1.0f;      // -1: the optimizer's default (AdamW: 0.004; others: 0)
  float clipnorm = 0.0f;           // global norm (0: off)
  int64_t warmup_steps = 0;
  std::string lr_schedule = "constant";
  float lr_decay = 0.5f;
  int lr_decay_epochs = 0;  // 0: the schedule's default (step: 5; exponential: 1; cosine: --epochs)
  int early_stopping = -1;  // patience on val_loss (-1: off)
  double early_stopping_min_delta = 0;
};

// Parses argv into `a`. Returns -1 to go on, or the exit code for main: 0 after --help, 2 after a
// bad command line (reported in one line).
int parse_train_mnist_args(int argc, char** argv, Args& a);

// "0,2" -> {0, 2}; empty on a malformed list.
std::vector<int> parse_gpu_list(const std::string& s);

// The --optimizer flags as an optimizer (--lr, --weight-decay, --clipnorm).
std::unique_ptr<Optimizer> optimizer_of(const Args& a);
// The --lr-schedule flags as a schedule (none for constant); ArgumentError for one that makes no
// sense (a decay factor of 0 for step, say).
std::optional<LearningRateSchedule> schedule_of(const Args& a);

}  // namespace ember::apps
