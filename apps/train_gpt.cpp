// train_gpt: a small GPT (apps/gpt.h) trained on the bytes of a text, nanoGPT's recipe: random
// windows of --context bytes, AdamW, a warm-up then a cosine learning rate, global clipnorm; then
// the mean cross-entropy over the validation bytes' non-overlapping windows. Or, with --load, text
// sampled from a saved model (the file alone: architecture, weights and vocabulary).
//
//   train_gpt --steps 2000 --save gpt.st
//   train_gpt --load gpt.st --sample 400 --prompt "Call me" --temperature 0.8 --top-k 20
//
// Exit codes: 0 success, 1 runtime error (missing data, device, I/O, diverged training), 2 bad
// command line, 130 / 143 stopped by SIGINT / SIGTERM (after the current step, the model as it is
// saved to --save; a second signal exits at once).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/cli.h"
#include "apps/gpt.h"
#include "apps/openmp_spin.h"
#include "apps/paths.h"
#include "apps/stop_signal.h"
#include "ember.h"

namespace {

using namespace ember;

struct Args {
  std::string data = "data/moby-dick/data.txt";
  double val_fraction = 0.1;
  int64_t steps = 2000, batch = 12, context = 64, blocks = 4, heads = 4, features = 128;
  float learning_rate = 1e-3f, min_learning_rate = 1e-4f, weight_decay = 0.1f, beta2 = 0.99f, clipnorm = 1.0f,
        dropout = 0.0f;
  int64_t warmup = 100, log_every = 100;
  uint64_t seed = 1;
  std::string save, load, history, device = "auto", prompt = "\n", precision = "fp32";
  int64_t sample = 0, top_k = 0;
  float temperature = 1.0f;
  int threads = 0;
  bool quiet = false, strict_placement = false;
};

// The checks across flags, after parsing: -1 to go on, else the exit code (2: a bad line).
int check_flags(Args& a, bool min_lr_given) {
  if (a.features % a.heads != 0) {
    std::fprintf(stderr, "train_gpt: --features %lld is not a multiple of --heads %lld (see --help)\n",
                 static_cast<long long>(a.features), static_cast<long long>(a.heads));
    return 2;
  }
  if (a.min_learning_rate > a.learning_rate && !min_lr_given)
    a.min_learning_rate = a.learning_rate;  // the default floor under a peak given below it: a constant rate
  if (a.min_learning_rate > a.learning_rate) {
    std::fprintf(stderr, "train_gpt: --min-learning-rate %g is above --learning-rate %g (see --help)\n",
                 double(a.min_learning_rate), double(a.learning_rate));
    return 2;
  }
  if (const unsigned cores = std::thread::hardware_concurrency(); cores > 0 && a.threads > static_cast<int>(cores))
    std::fprintf(stderr,
                 "train_gpt: warning: --threads %d is more than the %u cores here: OpenMP threads will share cores "
                 "and run slower\n",
                 a.threads, cores);
  if (!a.load.empty() && a.prompt.empty()) {
    std::fprintf(stderr, "train_gpt: --prompt must hold at least one byte (see --help)\n");
    return 2;
  }
  if (!a.load.empty() && a.sample == 0) {
    std::fprintf(stderr, "train_gpt: --load samples: give --sample N (see --help)\n");
    return 2;
  }
  try {
    if (a.device != "auto") Device::parse(a.device);
  } catch (const ArgumentError& e) {
    std::fprintf(stderr, "train_gpt: %s (see --help)\n", e.what());
    return 2;
  }
  return -1;
}

int parse(int argc, char** argv, Args& a) {
  using namespace ember::apps;
  CLI::App app{"Train a small GPT on the bytes of a text (Moby-Dick by default), or sample from a saved one.",
               "train_gpt"};
  set_up_help(app,
              "  0        success\n"
              "  1        runtime error (missing data, device, I/O, diverged training)\n"
              "  2        bad command line\n"
              "  130/143  stopped by SIGINT/SIGTERM (after the current step; the model so far to --save)");
  app.option_defaults()->always_capture_default()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--data", a.data, "The text file (scripts/fetch_data.sh moby-dick fetches the default)")
      ->check(path_given());
  app.add_option("--val-fraction", a.val_fraction, "The text's last part held out for validation")
      ->check(finite_in(0.001, 0.5));
  app.add_option("--steps", a.steps, "Optimizer steps")->transform(integer_in(1, 100000000));
  app.add_option("--batch-size", a.batch, "Windows per step")->transform(integer_in(1, 1 << 20));
  app.add_option("--context", a.context, "Bytes per window (the model's sequence length)")
      ->transform(integer_in(2, 1 << 16));
  app.add_option("--blocks", a.blocks, "Decoder blocks")->transform(integer_in(1, 1024));
  app.add_option("--heads", a.heads, "Attention heads per block")->transform(integer_in(1, 1024));
  app.add_option("--features", a.features, "Features per step (a multiple of --heads)")
      ->transform(integer_in(1, 1 << 16));
  app.add_option("--dropout", a.dropout,
                 "Dropout rate after the embeddings, on the attention probabilities and on each residual branch")
      ->check(finite_in(0.0, 0.95));
  app.add_option("--learning-rate", a.learning_rate, "The peak rate, after the warm-up")->check(finite_in(1e-12, 10.0));
  CLI::Option* min_lr = app.add_option("--min-learning-rate", a.min_learning_rate,
                                       "The rate the cosine reaches at the last step (at most --learning-rate)")
                            ->check(finite_in(0.0, 10.0));
  app.add_option("--warmup-steps", a.warmup, "Linear warm-up steps")->transform(integer_in(0, 100000000));
  app.add_option("--weight-decay", a.weight_decay, "AdamW's decoupled decay of kernels and embeddings")
      ->check(finite_in(0.0, 1.0));
  app.add_option("--beta2", a.beta2, "AdamW's second-moment decay")->check(finite_in(0.0, 0.999999));
  app.add_option("--clipnorm", a.clipnorm, "Global gradient-norm clip (0: off)")->check(finite_in(0.0, 1e9));
  app.add_option("--seed", a.seed, "Initialisation and window draws")->transform(unsigned_64());
  app.add_option("--log-every", a.log_every, "Steps between progress lines")->transform(integer_in(1, 100000000));
  app.add_option("--save", a.save, "Save the trained model (architecture, weights, vocabulary) here")
      ->check(path_given());
  app.add_option("--history", a.history, "Write the logged losses and the validation loss as JSON here")
      ->check(path_given());
  app.add_option("--load", a.load, "Sample from this saved model instead of training")->check(path_given());
  app.add_option("--sample", a.sample, "Bytes to sample (with --load)")->transform(integer_in(0, 100000000));
  app.add_option("--prompt", a.prompt, "The text sampling continues");
  app.add_option("--temperature", a.temperature, "Divides the logits before sampling")->check(finite_in(1e-3, 1e3));
  app.add_option("--top-k", a.top_k, "Sample among the k likeliest bytes (0: all)")->transform(integer_in(0, 256));
  app.add_option("--device", a.device, "auto (the GPU when usable, else cpu), cpu, gpu, gpu:N or cuda:N");
  app.add_option("--threads", a.threads, "CPU threads, or free: the cores other processes leave free")
      ->transform(thread_count())
      ->default_str("all cores");
  app.add_option("--precision", a.precision,
                 "fp32, or mixed_bf16: dense layers multiply in bfloat16 with fp32 accumulation (CPU with "
                 "AVX512-BF16 or AMX; fp32 elsewhere, with a warning)")
      ->check(CLI::IsMember({"fp32", "mixed_bf16"}));
  app.add_flag("--strict-placement", a.strict_placement,
               "Fail when --device or --precision cannot run here, instead of running on the CPU or in fp32");
  app.add_flag("--quiet", a.quiet, "Print only the results");
  if (const int code = parse_command_line(app, argc, argv); code >= 0) return code;
  return check_flags(a, min_lr->count() > 0);
}

Device choose_device(const Args& a) {
  if (a.device != "auto") return resolve_device(Device::parse(a.device), a.strict_placement);
  if (cuda_available()) return Device::cuda(cuda_status().gpus.front().index);
  return Device::cpu();
}

std::string hex_of(const std::vector<uint8_t>& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (uint8_t b : bytes) s += {digits[b >> 4], digits[b & 15]};
  return s;
}

std::vector<uint8_t> bytes_of_hex(const std::string& s, const std::string& path) {
  const auto digit = [](char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
  };
  EMBER_CHECK(s.size() % 2 == 0, CheckpointError, path + ": the vocabulary is not hex pairs (odd length)");
  std::vector<uint8_t> out;
  for (size_t i = 0; i < s.size(); i += 2) {
    const int hi = digit(s[i]), lo = digit(s[i + 1]);
    EMBER_CHECK(hi >= 0 && lo >= 0, CheckpointError,
                path + ": the vocabulary is not hex pairs ('" + s.substr(i, 2) + "' at " + std::to_string(i) + ")");
    out.push_back(static_cast<uint8_t>(hi * 16 + lo));
  }
  return out;
}

int sample(const Args& a) {
  std::shared_ptr<Model> m = load_model(a.load);
  const TrainingState st = m->load(a.load);
  const auto v = st.extra.find("vocabulary");
  EMBER_CHECK(v != st.extra.end(), CheckpointError,
              a.load + " holds no vocabulary (was it saved by train_gpt --save?)");
  const ByteVocabulary vocab = ByteVocabulary::from_bytes(bytes_of_hex(v->second, a.load));
  const int64_t t = m->input_shape()[0], k = vocab.size();
  EMBER_CHECK(m->output_shapes().size() == 1 && m->output_shapes()[0] == (Shape{t, k}), CheckpointError,
              a.load + " outputs " + m->output_shapes()[0].str() + " per sample, not (" + std::to_string(t) + ", " +
                  std::to_string(k) + ") for its vocabulary of " + std::to_string(k));
  std::vector<int32_t> ids = vocab.encode(a.prompt);
  EMBER_CHECK(!ids.empty(), ArgumentError, "--prompt must hold at least one byte");
  Rng rng(a.seed);
  std::string out;
  Tensor x = Tensor::zeros(Shape{1, t}, DType::I32);
  for (int64_t i = 0; i < a.sample; ++i) {
    // The last t ids at the window's start; the causal mask makes the padding after them harmless.
    const int64_t len = std::min<int64_t>(static_cast<int64_t>(ids.size()), t);
    std::copy(ids.end() - len, ids.end(), x.data<int32_t>());
    const Tensor z = m->predict(x);
    const float* logits = z.f32() + (len - 1) * k;
    EMBER_CHECK(std::all_of(logits, logits + k, [](float z_i) { return std::isfinite(z_i); }), NumericalError,
                a.load + ": the model's outputs are not finite (NaN or infinite weights?): nothing to sample from");
    const int32_t next = apps::sample_logits(logits, k, a.temperature, a.top_k, rng);
    ids.push_back(next);
    out += vocab.decode(std::span<const int32_t>(&ids.back(), 1));
  }
  std::fwrite(a.prompt.data(), 1, a.prompt.size(), stdout);
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::printf("\n");
  return 0;
}

void save_model(const Args& a, const Model& m, const ByteVocabulary& vocab) {
  TrainingState st;
  st.extra["vocabulary"] = hex_of(vocab.bytes());
  m.save(a.save, st);
}

// After SIGINT/SIGTERM: the model as it is after `done` steps to --save (no validation, no
// history: the run did not finish), and one line that says so.
int finish_interrupted(const Args& a, const Model& m, const ByteVocabulary& vocab, int64_t done) {
  const int sig = apps::g_stop_signal;
  std::fflush(stdout);
  if (done == 0) {  // nothing trained: an earlier model at --save stays
    std::fprintf(stderr, "train_gpt: stopped by %s before training: nothing saved\n", apps::signal_name(sig));
    return 128 + sig;
  }
  if (!a.save.empty()) save_model(a, m, vocab);
  std::fprintf(stderr, "train_gpt: stopped by %s after step %lld of %lld: %s\n", apps::signal_name(sig),
               static_cast<long long>(done), static_cast<long long>(a.steps),
               a.save.empty()
                   ? "nothing saved (no --save)"
                   : ("saved the model as it is to " + a.save + " (sample from it with --load); no --history").c_str());
  return 128 + sig;
}

// The validation loss, the training time and the median step; then --save and --history.
void report(const Args& a, Model& m, const ByteVocabulary& vocab, const SequenceDataset& val_set,
            const std::vector<double>& step_ms, double train_s, const nlohmann::json& log) {
  std::vector<double> sorted = step_ms;
  std::nth_element(sorted.begin(), sorted.begin() + static_cast<long>(sorted.size() / 2), sorted.end());
  const double median = sorted[sorted.size() / 2];
  const EvalResult r = m.evaluate(val_set.eval_dataset(), 64);
  const int64_t val_tokens = val_set.num_eval_windows() * a.context;
  std::printf("Validation loss: %.4f nats/byte on %lld tokens\n", r.loss, static_cast<long long>(val_tokens));
  std::printf("Training time: %.1f s, median step %.2f ms (%lld steps of %lld x %lld bytes)\n", train_s, median,
              static_cast<long long>(a.steps), static_cast<long long>(a.batch), static_cast<long long>(a.context));
  if (!a.save.empty()) {
    save_model(a, m, vocab);
    if (!a.quiet) std::printf("Saved to %s\n", a.save.c_str());
  }
  if (!a.history.empty()) {
    const nlohmann::json h = {{"losses", log},
                              {"val_loss", r.loss},
                              {"val_tokens", val_tokens},
                              {"train_seconds", train_s},
                              {"median_step_ms", median}};
    const std::string body = h.dump(2) + "\n";
    write_file_atomically(a.history, "--history", [&](int fd) {
      EMBER_CHECK(::write(fd, body.data(), body.size()) == static_cast<ssize_t>(body.size()), IoError,
                  "could not write " + a.history);
    });
  }
}

// --save and --history, before any work: writable, and apart from the text and each other.
void check_outputs(const Args& a) {
  if (!a.save.empty()) check_output_path(a.save, "--save");
  if (!a.history.empty()) check_output_path(a.history, "--history");
  apps::check_not_same({"--save", a.save}, {{"--data", a.data}});
  apps::check_not_same({"--history", a.history}, {{"--data", a.data}, {"--save", a.save}});
}

int train(const Args& a) {
  apps::install_stop_handlers("\ntrain_gpt: second signal: exiting at once, nothing saved\n");
  set_num_threads(a.threads);
  check_outputs(a);
  EMBER_CHECK(a.data != Args{}.data || std::filesystem::exists(a.data), IoError,
              "--data " + a.data + " does not exist: scripts/fetch_data.sh moby-dick fetches it");
  const std::string text = read_text_file(a.data);
  EMBER_CHECK(!text.empty(), IoError, "--data " + a.data + " is empty");
  const ByteVocabulary vocab(text);
  const std::vector<int32_t> tokens = vocab.encode(text);
  const auto n_val = static_cast<int64_t>(static_cast<double>(tokens.size()) * a.val_fraction);
  const auto split = static_cast<int64_t>(tokens.size()) - n_val;
  for (const auto& [part, n] : {std::pair{"training", split}, std::pair{"validation", n_val}})
    EMBER_CHECK(n > a.context, ArgumentError,
                "--data " + a.data + ": its " + part + " part holds " + std::to_string(n) +
                    " bytes, fewer than --context " + std::to_string(a.context) +
                    " + 1 (a window and its next byte): give a longer text, " +
                    (std::string(part) == "validation" ? "a larger --val-fraction " : "a smaller --val-fraction ") +
                    "or a smaller --context");
  const SequenceDataset train_set(std::vector<int32_t>(tokens.begin(), tokens.begin() + split), a.context);
  const SequenceDataset val_set(std::vector<int32_t>(tokens.begin() + split, tokens.end()), a.context);
  const Device device = choose_device(a);
  set_precision(resolve_precision(parse_precision(a.precision), device, a.strict_placement));
  std::shared_ptr<Model> m = apps::gpt_model({.vocabulary = vocab.size(),
                                              .context = a.context,
                                              .blocks = a.blocks,
                                              .heads = a.heads,
                                              .features = a.features,
                                              .dropout = a.dropout});
  m->build(a.seed);
  m->to(device);
  m->compile(std::make_unique<AdamW>(AdamWOptions{.learning_rate = a.learning_rate,
                                                  .beta1 = 0.9f,
                                                  .beta2 = a.beta2,
                                                  .epsilon = 1e-8f,
                                                  .weight_decay = a.weight_decay,
                                                  .global_clipnorm = a.clipnorm}));
  if (!a.quiet)
    std::printf(
        "%lld bytes (%lld distinct), %lld for training, %lld for validation; %lld parameters; %s\n",
        static_cast<long long>(tokens.size()), static_cast<long long>(vocab.size()), static_cast<long long>(split),
        static_cast<long long>(n_val), static_cast<long long>(m->num_params()),
        (device.str() + (precision() == Precision::MixedBFloat16 ? ", mixed_bf16 (" + cpu_bf16().isa + ")" : ""))
            .c_str());
  Rng rng(a.seed);
  std::vector<double> step_ms;
  nlohmann::json log = nlohmann::json::array();
  double window_loss = 0;
  const auto t0 = std::chrono::steady_clock::now();
  int64_t done = 0;
  for (int64_t s = 0; s < a.steps && apps::g_stop_signal == 0; ++s, ++done) {
    SequenceBatch b = train_set.train_batch(a.batch, rng);
    m->optimizer()->set_learning_rate(
        apps::gpt_learning_rate(s, a.steps, a.warmup, a.learning_rate, a.min_learning_rate));
    const Tensor x = device.is_cpu() ? b.x : b.x.to(device), y = device.is_cpu() ? b.y : b.y.to(device);
    const auto s0 = std::chrono::steady_clock::now();
    const float loss = m->train_step(x, y);
    step_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s0).count());
    EMBER_CHECK(
        std::isfinite(loss), Error,
        "the loss is " + std::to_string(loss) + " at step " + std::to_string(s + 1) + " (a learning rate too high?)");
    window_loss += loss;
    if ((s + 1) % a.log_every == 0 || s + 1 == a.steps) {
      const int64_t in_window = (s % a.log_every) + 1;
      const double mean = window_loss / static_cast<double>(in_window);
      log.push_back({{"step", s + 1}, {"loss", mean}});
      if (!a.quiet)
        std::printf("step %lld/%lld - loss: %.4f - lr: %.3g - %.1f ms/step\n", static_cast<long long>(s + 1),
                    static_cast<long long>(a.steps), mean, m->optimizer()->learning_rate(), step_ms.back());
      std::fflush(stdout);
      window_loss = 0;
    }
  }
  // A signal after the last step lets the run finish (validation, --save, --history).
  if (apps::g_stop_signal != 0 && done < a.steps) return finish_interrupted(a, *m, vocab, done);
  const double train_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  report(a, *m, vocab, val_set, step_ms, train_s, log);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ember::apps::restart_with_bounded_openmp_spin(argv);
  Args a;
  if (const int code = parse(argc, argv, a); code >= 0) return code;
  try {
    return a.load.empty() ? train(a) : sample(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_gpt: %s\n", e.what());
    return 1;
  }
}
