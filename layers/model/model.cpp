// Sequential: building, the flat parameter buffers, forward/backward, summary.
#include "sequential.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <sstream>

#include "../core/error.h"
#include "../core/logger.h"
#include "../core/runtime.h"
#include "conv_pool_block.h"

namespace ember {

Sequential::Sequential() = default;
Sequential::~Sequential() = default;
Sequential::Sequential(Sequential&&) noexcept = default;
Sequential& Sequential::operator=(Sequential&&) noexcept = default;

namespace {
// Keras' names: the type in snake case ("BatchNormalization" -> "batch_normalization", "Conv2D"
// -> "conv2d", "ReLU" -> "re_lu"), numbered from the second of a kind.
std::string default_name(const std::string& type, std::map<std::string, int>& counts) {
  std::string base;
  for (size_t i = 0; i < type.size(); ++i) {
    const auto c = static_cast<unsigned char>(type[i]);
    if (i > 0 && std::isupper(c) && std::islower(static_cast<unsigned char>(type[i - 1]))) base += '_';
    base += static_cast<char>(std::tolower(c));
  }
  const int k = counts[base]++;
  return k == 0 ? base : base + "_" + std::to_string(k);
}

std::string with_commas(int64_t v) {  // 93322 -> "93,322"
  const std::string digits = std::to_string(v);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string batch_shape(const Shape& s) {
  std::string out = "(None";
  for (int64_t d : s) out += ", " + std::to_string(d);
  return out + ")";
}
}  // namespace

Layer& Sequential::add(std::unique_ptr<Layer> layer) {
  EMBER_CHECK(layer != nullptr, ArgumentError, "Sequential::add: null layer");
  EMBER_CHECK(!built(), Error, "Sequential::add: the model is already built; add layers before build()");
  layers_.push_back(std::move(layer));
  return *layers_.back();
}

void Sequential::build(const Shape& sample_shape, uint64_t seed) {
  EMBER_CHECK(!layers_.empty(), Error, "Sequential::build: the model has no layers");
  EMBER_CHECK(!built(), Error, "Sequential::build: the model is already built");
  check_cpu_support();
  std::map<std::string, int> counts;
  std::vector<std::string> used;
  for (auto& l : layers_) {
    if (l->name().empty()) l->set_name(default_name(l->type(), counts));
    EMBER_CHECK(std::find(used.begin(), used.end(), l->name()) == used.end(), ArgumentError,
                "Sequential: two layers are named '" + l->name() + "'");
    used.push_back(l->name());
  }
  input_shape_ = sample_shape;
  output_shapes_.clear();
  Shape s = sample_shape;
  int64_t total = 0;
  for (auto& l : layers_) {
    try {
      s = l->build(s);
    } catch (const ShapeError& e) {
      throw ShapeError("layer '" + l->name() + "': " + e.what());
    }
    output_shapes_.push_back(s);
    total += l->num_params();
  }
  EMBER_CHECK(s.rank() == 1, ShapeError,
              "Sequential: the last layer must output per-sample logits (classes,), got " + s.str());
  params_ = Tensor::zeros(Shape{total}, DType::F32, Device::cpu());  // initialised here, then moved
  grads_ = Tensor::zeros(Shape{total}, DType::F32, Device::cpu());
  int64_t state_total = 0;
  averaged_state_numel_ = 0;
  for (auto& l : layers_)
    for (const auto& spec : l->state_specs()) {
      state_total += spec.shape.numel();
      if (spec.averaged) averaged_state_numel_ += spec.shape.numel();
    }
  state_ = Tensor::zeros(Shape{state_total}, DType::F32, Device::cpu());
  bind_layers();
  Rng init = Rng(seed).fork(0x494E4954ull /* "INIT" */);
  for (auto& l : layers_) l->init_params(init);  // on the cpu, then moved by to()
  for (auto& l : layers_) {
    const auto specs = l->state_specs();
    for (size_t i = 0; i < specs.size(); ++i) Tensor(l->state()[i]).fill(specs[i].init);  // a view: fills the buffer
  }
  seed_ = seed;
  seed_random_layers();
  layers_.front()->set_needs_input_grad(false);  // nobody consumes d(loss)/d(images)
  for (size_t i = 0; i + 1 < layers_.size(); ++i)
    if (layers_[i]->relu_output() && layers_[i + 1]->fuse_input_relu_mask())
      layers_[i]->set_output_grad_premasked(true);
  blocks_.clear();
  blocks_.resize(layers_.size());
  ran_fused_.assign(layers_.size(), kAlone);
  for (size_t i = 0; i + 1 < layers_.size(); ++i)
    blocks_[i] = detail::ConvPoolBlock::make(*layers_[i], *layers_[i + 1]);
  if (const Device d = current_device(); !d.is_cpu()) to(d);  // built inside a DeviceScope
}

void Sequential::bind_layers() {
  int64_t offset = 0;
  // State: the averaged specs of every layer first, then the others (one averaged region).
  int64_t averaged = 0, other = averaged_state_numel_;
  for (auto& l : layers_) {
    std::vector<Tensor> p, g, st;
    for (const auto& spec : l->param_specs()) {
      p.push_back(params_.view(offset, spec.shape));
      g.push_back(grads_.view(offset, spec.shape));
      offset += spec.shape.numel();
    }
    l->bind(std::move(p), std::move(g));
    for (const auto& spec : l->state_specs()) {
      int64_t& at = spec.averaged ? averaged : other;
      st.push_back(state_.view(at, spec.shape));
      at += spec.shape.numel();
    }
    l->bind_state(std::move(st));
  }
}

void Sequential::seed_random_layers() {
  // Per layer and replica stream: mixed, so that neighbouring layers or replicas share nothing.
  const Rng base = Rng(seed_).fork(0x524E47ull /* "RNG" */).fork(random_stream_);
  for (size_t i = 0; i < layers_.size(); ++i) layers_[i]->set_random_seed(base.fork(i).next_u64());
}

void Sequential::set_random_seed(uint64_t seed) {
  seed_ = seed;
  if (built()) seed_random_layers();
}

void Sequential::set_random_stream(uint64_t stream) {
  random_stream_ = stream;
  if (built()) seed_random_layers();
}

Tensor Sequential::averaged_state() const {
  require_built("averaged_state");
  return state_.view(0, Shape{averaged_state_numel_});
}

size_t Sequential::logit_layers() const {
  return !layers_.empty() && layers_.back()->softmax_output() ? layers_.size() - 1 : layers_.size();
}

void Sequential::to(Device device) {
  require_built("to");
  if (device == device_) return;
  params_ = params_.to(device);
  grads_ = Tensor::zeros(grads_.shape(), DType::F32, device);
  state_ = state_.to(device);
  bind_layers();
  if (optimizer_)
    for (const auto& [name, t] : optimizer_->state())
      if (t.defined()) optimizer_->set_state(name, t.to(device));
  device_ = device;
}

void Sequential::compile(std::unique_ptr<Optimizer> optimizer) {
  EMBER_CHECK(optimizer != nullptr, ArgumentError, "Sequential::compile: null optimizer");
  if (saved_optimizer_) {
    if (saved_optimizer_->name == optimizer->name()) {
      detail::restore_optimizer_state(*optimizer, *saved_optimizer_, device_);
    } else {
      detail::logger().warn("compile: {} starts fresh; the {} state loaded from {} is not used", optimizer->name(),
                            saved_optimizer_->name, saved_optimizer_->path);
    }
    saved_optimizer_.reset();
  }
  optimizer_ = std::move(optimizer);
}

void Sequential::require_built(const char* what) const {
  EMBER_CHECK(built(), Error, std::string("Sequential::") + what + ": build() the model first (or call fit())");
}

void Sequential::check_range(size_t begin, size_t end, const char* what) const {
  EMBER_CHECK(begin <= end && end <= layers_.size(), ArgumentError,
              std::string("Sequential::") + what + ": layers [" + std::to_string(begin) + ", " + std::to_string(end) +
                  ") of a model of " + std::to_string(layers_.size()));
}

detail::ConvPoolBlock* Sequential::block_at(size_t i, size_t end) const {
  if (!cpu_fusion_ || !device_.is_cpu() || i + 1 >= end || i >= blocks_.size() || !blocks_[i] || !blocks_[i]->usable())
    return nullptr;
  return blocks_[i].get();
}

bool Sequential::fused_with_next(size_t i) const { return block_at(i, layers_.size()) != nullptr; }

// Layers [begin, end) on x (the checks of the model's input when begin is 0).
const Tensor& Sequential::run_layers(const Tensor& x, bool training, size_t begin, size_t end, const char* what) {
  require_built(what);
  check_range(begin, end, what);
  const Shape& in = begin == 0 ? input_shape_ : output_shapes_[begin - 1];
  EMBER_CHECK(x.rank() == in.rank() + 1 && x.shape().without_batch() == in, ShapeError,
              "Sequential: expects input (N" + batch_shape(in).substr(5) + ", given " + x.shape().str());
  EMBER_CHECK(x.device() == device_, DeviceError,
              "Sequential: the input is on " + x.device().str() + " but the model on " + device_.str() +
                  ": copy it with to() (nothing migrates silently)");
  const Tensor* h = &x;
  for (size_t i = begin; i < end; ++i) {
    if (detail::ConvPoolBlock* b = block_at(i, end)) {
      h = &b->forward(*h, training);
      ran_fused_[i] = kFusedFirst;
      ran_fused_[++i] = kFusedSecond;
      continue;
    }
    ran_fused_[i] = kAlone;
    h = &layers_[i]->forward(*h, training);
  }
  return *h;
}

const Tensor& Sequential::forward(const Tensor& x, bool training) {
  return run_layers(x, training, 0, layers_.size(), "forward");
}

// Without a final Softmax: the loss reads its input.
const Tensor& Sequential::forward_logits(const Tensor& x, bool training) {
  return run_layers(x, training, 0, logit_layers(), "forward_logits");
}

const Tensor& Sequential::forward_layers(const Tensor& x, bool training, size_t begin, size_t end) {
  return run_layers(x, training, begin, end, "forward_layers");
}

const Tensor& Sequential::backward_layers(const Tensor& dy, size_t begin, size_t end) {
  require_built("backward_layers");
  check_range(begin, end, "backward_layers");
  static const Tensor none;  // the input gradient of a fused pair (a first layer's: none)
  const auto split = [&] {   // built only when the check fails
    return "Sequential::backward_layers: layers [" + std::to_string(begin) + ", " + std::to_string(end) +
           ") split a pair that ran fused";
  };
  const Tensor* g = &dy;
  for (size_t i = end; i-- > begin;) {
    if (ran_fused_[i] == kFusedSecond) {  // layer i ran inside the pair (i - 1, i)
      EMBER_CHECK(i > begin, ArgumentError, split());
      blocks_[i - 1]->backward(*g);
      g = &none;
      --i;
      continue;
    }
    EMBER_CHECK(ran_fused_[i] == kAlone, ArgumentError, split());  // the first of a pair, its second beyond end
    g = &layers_[i]->backward(*g);
  }
  return *g;
}

void Sequential::backward(const Tensor& dlogits) { backward_layers(dlogits, 0, logit_layers()); }

float Sequential::compute_gradients(const Tensor& x, const Tensor& labels, int64_t* correct) {
  MetricSums sums(device_);
  compute_gradients(x, labels, sums);  // read back
  const MetricSums::Values v = sums.read();
  if (correct) *correct = v.correct;
  return static_cast<float>(v.loss_sum / static_cast<double>(std::max<int64_t>(x.dim(0), 1)));
}

void Sequential::set_cpu_micro_batch(int64_t rows) {
  EMBER_CHECK(rows >= 0, ArgumentError,
              "Sequential::set_cpu_micro_batch: rows must be >= 0, got " + std::to_string(rows));
  cpu_micro_batch_ = rows;
}

int64_t Sequential::slice_rows(const Tensor& x, bool training) const {
  const int64_t n = x.rank() > 0 ? x.dim(0) : 0;
  if (!device_.is_cpu() || x.layout() != Layout::RowMajor) return n;
  const bool exact = training && conv_algorithms() == ConvAlgorithms::Exact;
  if (!exact && (cpu_micro_batch_ == 0 || n <= cpu_micro_batch_)) return n;
  for (const auto& l : layers_)
    if (!l->rows_independent(training)) return n;
  return exact ? std::min(n, kExactSliceRows) : cpu_micro_batch_;
}

namespace {
// Runs `slice(begin, rows)` over consecutive slices of a batch of n rows, keeping the metric
// sums' count of finite batches per batch (one batch, however many slices).
template <typename F>
void for_each_slice(int64_t n, int64_t rows, MetricSums& sums, F&& slice) {
  double* acc = sums.buffer().data<double>();
  const double finite_before = acc[3];
  for (int64_t i = 0; i < n; i += rows) slice(i, std::min(rows, n - i));
  acc[3] = finite_before + (std::isfinite(acc[0]) ? 1.0 : 0.0);
}

// A sliced batch's labels, checked whole first: a bad one throws before any slice has added to
// the metric sums or the gradients (as the whole batch's loss does).
void check_labels(const Tensor& labels, int64_t classes) {
  EMBER_CHECK(labels.dtype() == DType::I32 && labels.device().is_cpu(), ShapeError,
              "Sequential: labels must be i32 on the cpu, got " + labels.str());
  const int32_t* y = labels.data<int32_t>();
  for (int64_t i = 0; i < labels.numel(); ++i)
    EMBER_CHECK(y[i] >= 0 && y[i] < classes, ArgumentError,
                "softmax cross-entropy: label " + std::to_string(y[i]) + " at row " + std::to_string(i) +
                    " is outside [0, " + std::to_string(classes) + ")");
}

Tensor rows_of(const Tensor& t, int64_t begin, int64_t rows) {
  const Shape sample = t.shape().without_batch();
  return t.view(begin * sample.numel(), sample.with_batch(rows));
}
}  // namespace

void Sequential::compute_gradients(const Tensor& x, const Tensor& labels, MetricSums& sums) {
  const int64_t n = x.rank() > 0 ? x.dim(0) : 0, rows = slice_rows(x, true);
  if (rows == n) {
    const Tensor& logits = forward_logits(x, true);
    loss_.forward(logits, labels, sums);
    backward(loss_.backward());
    return;
  }
  EMBER_CHECK(labels.shape() == Shape{n} && labels.layout() == Layout::RowMajor, ShapeError,
              "Sequential: labels must be (" + std::to_string(n) + ",) for this batch, got " + labels.str());
  check_labels(labels, output_shape()[0]);  // before any slice adds to the sums
  // The slices' gradients as a pairwise tree, built as a binary counter: each slice's gradient is
  // pushed as a subtree of level 0, and two subtrees of one level merge (left + right) into one of
  // the next; what is left folds from the right. For any slice count this is the tree of
  // pairwise sums by doubling strides (s0 + s1, s2 + s3, ...; then those pairs; ...), which the
  // all-reduce uses over replicas (distribute/local_communicator.cpp).
  const int64_t count = grads_.numel();
  std::vector<int>& level = grad_tree_levels_;
  level.clear();
  const auto add_into = [count](Tensor& left, const Tensor& right) {
    float* l = left.f32();
    const float* r = right.f32();
    for (int64_t i = 0; i < count; ++i) l[i] += r[i];
  };
  for_each_slice(n, rows, sums, [&](int64_t begin, int64_t b) {
    loss_.forward(forward_logits(rows_of(x, begin, b), true), rows_of(labels, begin, b), sums);
    backward(loss_.backward(n));  // the mean over the whole batch
    if (grad_tree_.size() <= level.size()) grad_tree_.emplace_back();
    ensure(grad_tree_[level.size()], grads_.shape(), DType::F32, grads_.device());
    grad_tree_[level.size()].copy_from(grads_);
    level.push_back(0);
    while (level.size() >= 2 && level[level.size() - 1] == level[level.size() - 2]) {
      add_into(grad_tree_[level.size() - 2], grad_tree_[level.size() - 1]);
      level.pop_back();
      ++level.back();
    }
  });
  for (size_t top = level.size(); top >= 2; --top) add_into(grad_tree_[top - 2], grad_tree_[top - 1]);
  grads_.copy_from(grad_tree_[0]);
}

void Sequential::evaluate_batch(const Tensor& x, const Tensor& labels, MetricSums& sums) {
  const int64_t n = x.rank() > 0 ? x.dim(0) : 0, rows = slice_rows(x, false);
  if (rows == n) {
    eval_loss_.forward(forward_logits(x, false), labels, sums);
    return;
  }
  EMBER_CHECK(labels.shape() == Shape{n} && labels.layout() == Layout::RowMajor, ShapeError,
              "Sequential: labels must be (" + std::to_string(n) + ",) for this batch, got " + labels.str());
  check_labels(labels, output_shape()[0]);
  for_each_slice(n, rows, sums, [&](int64_t begin, int64_t b) {
    eval_loss_.forward(forward_logits(rows_of(x, begin, b), false), rows_of(labels, begin, b), sums);
  });
}

void Sequential::train_step(const Tensor& x, const Tensor& labels, MetricSums& sums) {
  EMBER_CHECK(optimizer_ != nullptr, Error, "Sequential: compile() the model with an optimizer first");
  compute_gradients(x, labels, sums);
  apply_gradients();
}

void Sequential::apply_gradients() {
  EMBER_CHECK(optimizer_ != nullptr, Error, "Sequential: compile() the model with an optimizer first");
  optimizer_->step(params_, grads_);
}

float Sequential::train_step(const Tensor& x, const Tensor& labels, int64_t* correct) {
  EMBER_CHECK(optimizer_ != nullptr, Error, "Sequential: compile() the model with an optimizer first");
  const float loss = compute_gradients(x, labels, correct);
  apply_gradients();
  return loss;
}

std::vector<std::pair<std::string, Tensor>> Sequential::named_params() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& l : layers_) {
    const auto specs = l->param_specs();
    for (size_t i = 0; i < specs.size(); ++i) out.emplace_back(l->name() + "/" + specs[i].name, l->params()[i]);
  }
  return out;
}

std::vector<std::pair<std::string, Tensor>> Sequential::named_state() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& l : layers_) {
    const auto specs = l->state_specs();
    for (size_t i = 0; i < specs.size(); ++i) out.emplace_back(l->name() + "/" + specs[i].name, l->state()[i]);
  }
  return out;
}

std::string Sequential::summary() const {
  require_built("summary");
  std::ostringstream os;
  const std::string rule(65, '_'), dbl(65, '=');
  auto row = [&](const std::string& a, const std::string& b, const std::string& c) {
    std::string line = " " + a;
    line.resize(std::max<size_t>(line.size() + 1, 29), ' ');
    line += b;
    line.resize(std::max<size_t>(line.size() + 1, 55), ' ');
    os << line << c << "\n";
  };
  os << "Model: \"sequential\"\n" << rule << "\n";
  row("Layer (type)", "Output Shape", "Param #");
  os << dbl << "\n";
  for (size_t i = 0; i < layers_.size(); ++i) {
    row(layers_[i]->name() + " (" + layers_[i]->type() + ")", batch_shape(output_shapes_[i]),
        with_commas(layers_[i]->num_params() + layers_[i]->num_non_trainable()));
    if (i + 1 < layers_.size()) os << "\n";
  }
  os << dbl << "\n";
  os << "Total params: " << with_commas(num_params() + num_non_trainable()) << "\n";
  os << "Trainable params: " << with_commas(num_params()) << "\n";
  os << "Non-trainable params: " << with_commas(num_non_trainable()) << "\n" << rule << "\n";
  return os.str();
}

std::string Sequential::placement_report(int64_t batch_size) const {
  require_built("placement_report");
  std::ostringstream os;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& l = *layers_[i];
    const bool second_of_pair = i > 0 && fused_with_next(i - 1);
    os << "  " << l.name() << " (" << l.type() << "): " << device_.str() << ", "
       << (fused_with_next(i) ? blocks_[i]->kernel_info()
           : second_of_pair   ? "fused into '" + layers_[i - 1]->name() + "'"
                              : l.kernel_info(batch_size, device_))
       << "\n";
  }
  return os.str();
}

}  // namespace ember
