// Model: the graph, building, the flat parameter buffers, forward/backward, summary.
#include "model.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <sstream>

#include "../../core/error.h"
#include "../../core/logger.h"
#include "../../core/runtime.h"
#include "../conv_pool_block.h"
#include "../ops/elementwise.h"

namespace ember {

Model::Model() = default;
Model::~Model() = default;
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;

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

Model::Model(const SymbolicTensor& input, const SymbolicTensor& output, std::string name)
    : Model(std::vector<SymbolicTensor>{input}, std::vector<SymbolicTensor>{output}, std::move(name)) {}

Model::Model(const std::vector<SymbolicTensor>& inputs, const std::vector<SymbolicTensor>& outputs, std::string name)
    : name_(std::move(name)) {
  define_graph(inputs, outputs);
}

void Model::define_graph(const std::vector<SymbolicTensor>& inputs, const std::vector<SymbolicTensor>& outputs) {
  EMBER_CHECK(inputs.size() == 1 && outputs.size() == 1, ArgumentError,
              "Model: " + std::to_string(inputs.size()) + " inputs and " + std::to_string(outputs.size()) +
                  " outputs; one input and one output for now (several are planned: issue 32)");
  const auto& in = inputs[0].node();
  const auto& out = outputs[0].node();
  EMBER_CHECK(in != nullptr && out != nullptr, ArgumentError, "Model: an undefined SymbolicTensor");
  EMBER_CHECK(in->layer == nullptr, ArgumentError, "Model: the input must be an Input(), not a layer's output");
  EMBER_CHECK(out != in, ArgumentError, "Model: the output is the input itself (no layer between)");
  // Depth first from the output, inputs in order, each call after what it reads (post order): a
  // topological order, and a stack's own order.
  std::map<const detail::GraphNode*, int> index;  // -1: the input; -2: being visited
  index[in.get()] = -1;
  std::vector<const detail::GraphNode*> order;
  std::vector<std::pair<const detail::GraphNode*, size_t>> stack{{out.get(), 0}};
  index[out.get()] = -2;
  while (!stack.empty()) {
    auto& [node, next] = stack.back();
    if (node->layer == nullptr)
      throw ArgumentError("Model: the output depends on an Input" +
                          (node->input_name.empty() ? std::string() : " '" + node->input_name + "'") +
                          " that is not the model's input");
    if (next < node->inputs.size()) {
      const detail::GraphNode* child = node->inputs[next++].get();
      const auto it = index.find(child);
      if (it == index.end()) {
        index[child] = -2;
        stack.emplace_back(child, 0);
      }
      continue;  // a child already placed (or the input); a cycle cannot be built
    }
    index[node] = static_cast<int>(order.size());
    order.push_back(node);
    stack.pop_back();
  }
  layers_.clear();
  nodes_.assign(order.size(), Node{});
  linear_ = true;
  for (size_t i = 0; i < order.size(); ++i) {
    const auto same = std::find_if(layers_.begin(), layers_.end(), [&](const auto& l) { return l == order[i]->layer; });
    EMBER_CHECK(same == layers_.end(), ArgumentError,
                "Model: a " + order[i]->layer->type() + " layer" +
                    (order[i]->layer->name().empty() ? std::string() : " '" + order[i]->layer->name() + "'") +
                    " is called twice; calls sharing a layer's weights are not supported yet: make one layer per call");
    layers_.push_back(order[i]->layer);
    output_shapes_.push_back(order[i]->shape);
    for (const auto& child : order[i]->inputs) {
      const int from = index.at(child.get());
      nodes_[i].inputs.push_back(from);
      if (from >= 0) nodes_[static_cast<size_t>(from)].consumers.push_back(static_cast<int>(i));
    }
    linear_ = linear_ && nodes_[i].inputs.size() == 1 && nodes_[i].inputs[0] == static_cast<int>(i) - 1;
  }
  input_shape_ = in->shape;
  input_name_ = in->input_name;
  graph_ = true;
}

Layer& Model::append(std::shared_ptr<Layer> layer, const char* who) {
  EMBER_CHECK(layer != nullptr, ArgumentError, std::string(who) + ": null layer");
  EMBER_CHECK(!built(), Error, std::string(who) + ": the model is already built; add layers before build()");
  layers_.push_back(std::move(layer));
  return *layers_.back();
}

const std::vector<int>& Model::layer_inputs(size_t i) const {
  EMBER_CHECK(i < nodes_.size(), ArgumentError,
              "Model::layer_inputs: layer " + std::to_string(i) + " of a model of " + std::to_string(nodes_.size()) +
                  (built() || graph_ ? "" : " (a Sequential's graph exists from build())"));
  return nodes_[i].inputs;
}

void Model::build(uint64_t seed) {
  EMBER_CHECK(graph_, Error, "Model::build: a Sequential needs its input shape: build(Shape{...}, seed)");
  build(input_shape_, seed);
}

void Model::build(const Shape& sample_shape, uint64_t seed) {
  EMBER_CHECK(!layers_.empty(), Error, "Model::build: the model has no layers");
  EMBER_CHECK(!built(), Error, "Model::build: the model is already built");
  check_cpu_support();
  if (graph_) {
    EMBER_CHECK(sample_shape == input_shape_, ShapeError,
                "Model::build: the model's input is " + input_shape_.str() + ", given " + sample_shape.str());
  } else {  // a Sequential: the line of calls
    nodes_.assign(layers_.size(), Node{});
    for (size_t i = 0; i < layers_.size(); ++i) {
      nodes_[i].inputs = {static_cast<int>(i) - 1};
      if (i + 1 < layers_.size()) nodes_[i].consumers = {static_cast<int>(i) + 1};
    }
    linear_ = true;
  }
  std::map<std::string, int> counts;
  std::vector<std::string> used;
  for (auto& l : layers_) {
    if (l->name().empty()) l->set_name(default_name(l->type(), counts));
    EMBER_CHECK(std::find(used.begin(), used.end(), l->name()) == used.end(), ArgumentError,
                "Model: two layers are named '" + l->name() + "'");
    used.push_back(l->name());
  }
  if (input_name_.empty()) input_name_ = "input_1";
  EMBER_CHECK(std::find(used.begin(), used.end(), input_name_) == used.end(), ArgumentError,
              "Model: a layer is named '" + input_name_ + "' like the input");
  for (const auto& l : layers_) {
    const auto owner = l->owner().lock();
    EMBER_CHECK(!owner || owner == identity_, ArgumentError,
                "Model::build: layer '" + l->name() + "' (" + l->type() +
                    ") belongs to another built model; a layer serves one model (make new layers for each model, "
                    "e.g. inside ModelRecipe::make_model)");
  }
  if (!graph_) {
    input_shape_ = sample_shape;
    output_shapes_.clear();
    Shape s = sample_shape;
    for (auto& l : layers_) {
      try {
        s = l->build(s);
      } catch (const ShapeError& e) {
        throw ShapeError("layer '" + l->name() + "': " + e.what());
      }
      output_shapes_.push_back(s);
    }
  }
  const Shape& s = output_shapes_.back();
  EMBER_CHECK(s.rank() == 1, ShapeError,
              "Model: the last layer must output per-sample logits (classes,), got " + s.str());
  int64_t total = 0;
  for (auto& l : layers_) total += l->num_params();
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
  for (auto& l : layers_) l->set_owner(identity_);
  Rng init = Rng(seed).fork(0x494E4954ull /* "INIT" */);
  for (auto& l : layers_) l->init_params(init);  // on the cpu, then moved by to()
  for (auto& l : layers_) {
    const auto specs = l->state_specs();
    for (size_t i = 0; i < specs.size(); ++i) Tensor(l->state()[i]).fill(specs[i].init);  // a view: fills the buffer
  }
  seed_ = seed;
  seed_random_layers();
  // Nobody consumes d(loss)/d(input): a layer that reads only the input computes no input gradient.
  for (size_t i = 0; i < layers_.size(); ++i)
    if (std::all_of(nodes_[i].inputs.begin(), nodes_[i].inputs.end(), [](int from) { return from < 0; }))
      layers_[i]->set_needs_input_grad(false);
  // ReLU-backward fusion: a layer whose output goes through a ReLU into one consumer that applies
  // the mask in its own backward.
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (nodes_[i].consumers.size() != 1) continue;
    Layer& next = *layers_[static_cast<size_t>(nodes_[i].consumers[0])];
    if (layers_[i]->relu_output() && !next.multi_input() && next.fuse_input_relu_mask())
      layers_[i]->set_output_grad_premasked(true);
  }
  // Conv2D -> MaxPool2D fusion: a pattern of the graph, the pool the conv's only consumer and
  // next in the run order.
  blocks_.clear();
  blocks_.resize(layers_.size());
  ran_fused_.assign(layers_.size(), kAlone);
  for (size_t i = 0; i + 1 < layers_.size(); ++i)
    if (nodes_[i].consumers == std::vector<int>{static_cast<int>(i) + 1} &&
        nodes_[i + 1].inputs == std::vector<int>{static_cast<int>(i)})
      blocks_[i] = detail::ConvPoolBlock::make(*layers_[i], *layers_[i + 1]);
  acts_.assign(layers_.size(), nullptr);
  gouts_.assign(layers_.size() + 1, nullptr);
  gsums_.resize(layers_.size() + 1);
  gconv_.resize(layers_.size() + 1);
  if (const Device d = current_device(); !d.is_cpu()) to(d);  // built inside a DeviceScope
}

void Model::bind_layers() {
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

void Model::seed_random_layers() {
  // Per layer and replica stream: mixed, so that neighbouring layers or replicas share nothing.
  const Rng base = Rng(seed_).fork(0x524E47ull /* "RNG" */).fork(random_stream_);
  for (size_t i = 0; i < layers_.size(); ++i) layers_[i]->set_random_seed(base.fork(i).next_u64());
}

void Model::set_random_seed(uint64_t seed) {
  seed_ = seed;
  if (built()) seed_random_layers();
}

void Model::set_random_stream(uint64_t stream) {
  random_stream_ = stream;
  if (built()) seed_random_layers();
}

Tensor Model::averaged_state() const {
  require_built("averaged_state");
  return state_.view(0, Shape{averaged_state_numel_});
}

size_t Model::logit_layers() const {
  return !layers_.empty() && layers_.back()->softmax_output() && loss_->takes_softmax_logits() ? layers_.size() - 1
                                                                                               : layers_.size();
}

void Model::to(Device device) {
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

void Model::compile(std::unique_ptr<Optimizer> optimizer) {
  compile(std::move(optimizer), std::make_unique<losses::SparseCategoricalCrossentropy>(),
          {std::make_shared<metrics::SparseCategoricalAccuracy>()});
}

void Model::set_optimizer(std::unique_ptr<Optimizer> optimizer) {
  EMBER_CHECK(optimizer != nullptr, ArgumentError, "Model::compile: null optimizer");
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

void Model::compile(std::unique_ptr<Optimizer> optimizer, std::unique_ptr<Loss> loss, MetricList metrics) {
  EMBER_CHECK(loss != nullptr, ArgumentError, "Model::compile: null loss");
  for (size_t i = 0; i < metrics.size(); ++i) {
    EMBER_CHECK(metrics[i] != nullptr, ArgumentError, "Model::compile: metric " + std::to_string(i) + " is null");
    for (size_t j = 0; j < i; ++j)
      EMBER_CHECK(metrics[j]->name() != metrics[i]->name(), ArgumentError,
                  "Model::compile: two metrics are named '" + metrics[i]->name() + "'");
  }
  std::unique_ptr<Loss> eval = loss->clone();
  EMBER_CHECK(eval != nullptr, ArgumentError, "Model::compile: the loss's clone() returned null");
  set_optimizer(std::move(optimizer));
  eval_loss_ = std::move(eval);
  loss_ = std::move(loss);
  metrics_ = std::move(metrics);
}

std::optional<double> find_value(const NamedValues& values, const std::string& name) {
  for (const auto& [k, v] : values)
    if (k == name) return v;
  return std::nullopt;
}

std::vector<std::string> Model::metric_names() const {
  std::vector<std::string> names;
  for (const auto& m : metrics_) names.push_back(m->name());
  return names;
}

std::vector<double> Model::metric_sums(const MetricSums::Values& v) const {
  std::vector<double> out;
  for (size_t i = 0; i < metrics_.size(); ++i)
    out.push_back(metrics_[i]->fused_with(*loss_) ? static_cast<double>(v.correct)
                                                  : (i < v.metrics.size() ? v.metrics[i] : 0.0));
  return out;
}

void Model::check_targets(DType target, const Shape& target_sample, const char* what) const {
  try {
    loss_->check(output_shape(), target, target_sample);
    for (const auto& m : metrics_) m->check(output_shape(), target, target_sample);
  } catch (const ShapeError& e) {
    throw ShapeError(std::string(what) + ": " + e.what());
  }
}

void Model::accumulate_metrics(const Tensor& outputs, const Tensor& targets, MetricSums& sums) {
  // Metrics see what the model outputs (Keras' y_pred): when the loss read a final Softmax's
  // input, that Softmax runs here for them (forward only; its backward never runs in training).
  const Tensor* y = &outputs;
  for (size_t i = 0; i < metrics_.size(); ++i) {
    if (metrics_[i]->fused_with(*loss_)) continue;
    if (y == &outputs && logit_layers() < layers_.size() && metrics_[i]->reads_model_output())
      y = &layers_.back()->forward(outputs, false);
    const Tensor& seen = metrics_[i]->reads_model_output() ? *y : outputs;
    const int64_t slot = MetricSums::kSlots + static_cast<int64_t>(i);
    EMBER_CHECK(slot < sums.buffer().numel(), ArgumentError,
                "Model: the metric sums hold " + std::to_string(sums.metrics()) + " metrics; the model has " +
                    std::to_string(metrics_.size()) + " (make them with make_sums())");
    metrics_[i]->accumulate(seen, targets, sums, slot);
  }
}

void Model::require_built(const char* what) const {
  EMBER_CHECK(built(), Error, std::string("Model::") + what + ": build() the model first (or call fit())");
}

void Model::check_range(size_t begin, size_t end, const char* what) const {
  EMBER_CHECK(begin <= end && end <= layers_.size(), ArgumentError,
              std::string("Model::") + what + ": layers [" + std::to_string(begin) + ", " + std::to_string(end) +
                  ") of a model of " + std::to_string(layers_.size()));
}

detail::ConvPoolBlock* Model::block_at(size_t i, size_t end) const {
  if (!cpu_fusion_ || !device_.is_cpu() || i + 1 >= end || i >= blocks_.size() || !blocks_[i] || !blocks_[i]->usable())
    return nullptr;
  return blocks_[i].get();
}

bool Model::fused_with_next(size_t i) const { return block_at(i, layers_.size()) != nullptr; }

// The k-th input of layer i in a pass over layers [begin, ...) on x: the model's input, or what
// the range starts from (a stack's layer begin - 1), is x.
const Tensor& Model::input_of(size_t i, size_t k, const Tensor& x, size_t begin) const {
  const int from = nodes_[i].inputs[k];
  if (from < 0 || static_cast<size_t>(from) + 1 == begin) return x;
  return *acts_[static_cast<size_t>(from)];
}

// Layers [begin, end) on x (the checks of the model's input when begin is 0).
const Tensor& Model::run_layers(const Tensor& x, bool training, size_t begin, size_t end, const char* what) {
  require_built(what);
  check_range(begin, end, what);
  EMBER_CHECK(begin == 0 || linear_, ArgumentError,
              std::string("Model::") + what + ": a range from layer " + std::to_string(begin) +
                  " needs a stack (is_linear()); a graph model runs from its input");
  const Shape& in = begin == 0 ? input_shape_ : output_shapes_[begin - 1];
  EMBER_CHECK(x.rank() == in.rank() + 1 && x.shape().without_batch() == in, ShapeError,
              "Model: expects input (N" + batch_shape(in).substr(5) + ", given " + x.shape().str());
  EMBER_CHECK(x.device() == device_, DeviceError,
              "Model: the input is on " + x.device().str() + " but the model on " + device_.str() +
                  ": copy it with to() (nothing migrates silently)");
  std::vector<const Tensor*> ins;
  for (size_t i = begin; i < end; ++i) {
    if (detail::ConvPoolBlock* b = block_at(i, end)) {
      acts_[i] = nullptr;  // never exists: the pool is its only consumer
      acts_[i + 1] = &b->forward(input_of(i, 0, x, begin), training);
      ran_fused_[i] = kFusedFirst;
      ran_fused_[++i] = kFusedSecond;
      continue;
    }
    ran_fused_[i] = kAlone;
    Layer& l = *layers_[i];
    if (l.multi_input()) {
      ins.clear();
      for (size_t k = 0; k < nodes_[i].inputs.size(); ++k) ins.push_back(&input_of(i, k, x, begin));
      acts_[i] = &l.forward_inputs(ins, training);
    } else {
      acts_[i] = &l.forward(input_of(i, 0, x, begin), training);
    }
  }
  return end > begin ? *acts_[end - 1] : x;
}

const Tensor& Model::forward(const Tensor& x, bool training) {
  return run_layers(x, training, 0, layers_.size(), "forward");
}

// Without a final Softmax: the loss reads its input.
const Tensor& Model::forward_logits(const Tensor& x, bool training) {
  return run_layers(x, training, 0, logit_layers(), "forward_logits");
}

const Tensor& Model::forward_layers(const Tensor& x, bool training, size_t begin, size_t end) {
  return run_layers(x, training, begin, end, "forward_layers");
}

// Hands dx to the gradient slot of a layer's output (the last slot: the model's input): the
// first one as it is, the next ones summed into the slot's own buffer, in the first one's layout.
void Model::deliver_grad(size_t slot, const Tensor& dx) {
  if (!dx.defined()) return;
  const Tensor*& g = gouts_[slot];
  if (g == nullptr) {
    g = &dx;
    return;
  }
  Tensor& sum = gsums_[slot];
  if (g != &sum) ensure(sum, g->shape(), DType::F32, g->device(), g->layout());
  const Tensor& b = as_layout(dx, sum.layout(), gconv_[slot]);
  detail::elementwise_binary(detail::BinaryOp::Add, *g, b, sum);
  g = &sum;
}

const Tensor& Model::backward_layers(const Tensor& dy, size_t begin, size_t end) {
  require_built("backward_layers");
  check_range(begin, end, "backward_layers");
  EMBER_CHECK(begin == 0 || linear_, ArgumentError,
              "Model::backward_layers: a range from layer " + std::to_string(begin) + " needs a stack (is_linear())");
  static const Tensor none;  // the input gradient of a fused pair (a first layer's: none)
  const auto split = [&] {   // built only when the check fails
    return "Model::backward_layers: layers [" + std::to_string(begin) + ", " + std::to_string(end) +
           ") split a pair that ran fused";
  };
  const size_t input_slot = layers_.size();
  bool input_partial = false;  // a reader of the input gave no gradient: the input's is not whole
  const auto deliver = [&](size_t slot, const Tensor& dx) {
    if (slot == input_slot && !dx.defined()) input_partial = true;
    deliver_grad(slot, dx);
  };
  for (size_t i = begin; i < end; ++i) gouts_[i] = nullptr;
  gouts_[input_slot] = nullptr;
  if (end > begin) gouts_[end - 1] = &dy;
  // Where layer i's k-th input gradient goes: the model input's slot for the input (or for what
  // a stack's range starts from), else the producing layer's.
  const auto slot_of = [&](size_t i, size_t k) {
    const int from = nodes_[i].inputs[k];
    return from < 0 || static_cast<size_t>(from) < begin ? input_slot : static_cast<size_t>(from);
  };
  for (size_t i = end; i-- > begin;) {
    const Tensor* g = gouts_[i];
    EMBER_CHECK(g != nullptr, Error,
                "Model::backward_layers: no gradient reached layer '" + layers_[i]->name() +
                    "' (not on a path to the output?)");
    if (ran_fused_[i] == kFusedSecond) {  // layer i ran inside the pair (i - 1, i)
      EMBER_CHECK(i > begin, ArgumentError, split());
      blocks_[i - 1]->backward(*g);
      deliver(slot_of(i - 1, 0), none);
      --i;
      continue;
    }
    EMBER_CHECK(ran_fused_[i] == kAlone, ArgumentError, split());  // the first of a pair, its second beyond end
    Layer& l = *layers_[i];
    if (l.multi_input()) {
      const std::vector<Tensor>& dxs = l.backward_inputs(*g);
      for (size_t k = 0; k < dxs.size(); ++k) deliver(slot_of(i, k), dxs[k]);
    } else {
      deliver(slot_of(i, 0), l.backward(*g));
    }
  }
  return gouts_[input_slot] != nullptr && !input_partial ? *gouts_[input_slot] : none;
}

void Model::backward(const Tensor& dlogits) { backward_layers(dlogits, 0, logit_layers()); }

float Model::compute_gradients(const Tensor& x, const Tensor& labels, int64_t* correct) {
  MetricSums sums = make_sums();
  compute_gradients(x, labels, sums);  // read back
  const MetricSums::Values v = sums.read();
  if (correct) *correct = v.correct;
  return static_cast<float>(v.loss_sum / static_cast<double>(std::max<int64_t>(x.dim(0), 1)));
}

void Model::set_cpu_micro_batch(int64_t rows) {
  EMBER_CHECK(rows >= 0, ArgumentError, "Model::set_cpu_micro_batch: rows must be >= 0, got " + std::to_string(rows));
  cpu_micro_batch_ = rows;
  micro_batch_auto_ = false;
}

int64_t Model::slice_rows(const Tensor& x, bool training) const {
  const int64_t n = x.rank() > 0 ? x.dim(0) : 0;
  if (!device_.is_cpu() || x.layout() != Layout::RowMajor) return n;
  const bool exact = training && conv_algorithms() == ConvAlgorithms::Exact;
  if (!exact && (cpu_micro_batch_ == 0 || n <= cpu_micro_batch_)) return n;
  for (const auto& l : layers_)
    if (!l->rows_independent(training)) return n;
  if (exact) return std::min(n, kExactSliceRows);
  if (micro_batch_auto_) {
    // By default, slices only where a slice's activations outweigh the parameters: a CNN's
    // activations stay in cache (the reference CNN's slice: 2.4M values against 93k weights); an
    // MLP re-reading its weight matrices once per slice loses (the autoencoder's slice: 137k
    // values against 435k weights ran 20% slower sliced: docs/benchmarks.md, issue 33).
    int64_t per_row = 0;
    for (const Shape& s : output_shapes_) per_row += s.numel();
    if (per_row * cpu_micro_batch_ <= params_.numel()) return n;
  }
  return cpu_micro_batch_;
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

Tensor rows_of(const Tensor& t, int64_t begin, int64_t rows) {
  const Shape sample = t.shape().without_batch();
  return t.view(begin * sample.numel(), sample.with_batch(rows));
}
}  // namespace

// A sliced batch's targets, checked whole first: a bad one throws before any slice has added to
// the metric sums or the gradients (as the whole batch's loss does).
void Model::check_sliced_targets(const Tensor& targets, int64_t n) const {
  EMBER_CHECK(
      targets.rank() >= 1 && targets.dim(0) == n && targets.layout() == Layout::RowMajor && targets.device().is_cpu(),
      ShapeError,
      "Model: targets must be (" + std::to_string(n) + ", ...) on the cpu for this batch, got " + targets.str());
  loss_->check_targets(targets, output_shape());
}

void Model::compute_gradients(const Tensor& x, const Tensor& labels, MetricSums& sums) {
  const int64_t n = x.rank() > 0 ? x.dim(0) : 0, rows = slice_rows(x, true);
  if (rows == n) {
    const Tensor& logits = forward_logits(x, true);
    loss_->forward(logits, labels, sums);
    accumulate_metrics(logits, labels, sums);
    backward(loss_->backward());
    return;
  }
  check_sliced_targets(labels, n);  // whole, before any slice adds to the sums
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
    const Tensor& logits = forward_logits(rows_of(x, begin, b), true);
    const Tensor targets = rows_of(labels, begin, b);
    loss_->forward(logits, targets, sums);
    accumulate_metrics(logits, targets, sums);
    backward(loss_->backward(n));  // the mean over the whole batch
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

void Model::evaluate_batch(const Tensor& x, const Tensor& labels, MetricSums& sums) {
  const int64_t n = x.rank() > 0 ? x.dim(0) : 0, rows = slice_rows(x, false);
  if (rows == n) {
    const Tensor& outputs = forward_logits(x, false);
    eval_loss_->forward(outputs, labels, sums);
    accumulate_metrics(outputs, labels, sums);
    return;
  }
  check_sliced_targets(labels, n);
  for_each_slice(n, rows, sums, [&](int64_t begin, int64_t b) {
    const Tensor& outputs = forward_logits(rows_of(x, begin, b), false);
    const Tensor targets = rows_of(labels, begin, b);
    eval_loss_->forward(outputs, targets, sums);
    accumulate_metrics(outputs, targets, sums);
  });
}

void Model::train_step(const Tensor& x, const Tensor& labels, MetricSums& sums) {
  EMBER_CHECK(optimizer_ != nullptr, Error, "Sequential: compile() the model with an optimizer first");
  compute_gradients(x, labels, sums);
  apply_gradients();
}

void Model::apply_gradients() {
  EMBER_CHECK(optimizer_ != nullptr, Error, "Sequential: compile() the model with an optimizer first");
  if (optimizer_->regularization().weight_decay > 0) {
    const Tensor& m = optimizer_->decay_mask();
    if (!m.defined() || m.numel() != params_.numel() || m.device() != params_.device())
      optimizer_->set_decay_mask(decay_mask());
  }
  optimizer_->step(params_, grads_);
}

Tensor Model::decay_mask() const {
  require_built("decay_mask");
  Tensor mask = Tensor::zeros(Shape{params_.numel()}, DType::F32, Device::cpu());
  int64_t offset = 0;
  for (const auto& l : layers_) {
    for (const ParamSpec& spec : l->param_specs()) {
      const int64_t n = spec.shape.numel();
      bool decay = spec.name == "kernel";
      for (const auto& [name, on] : decay_overrides_)
        if (name == l->name() + "/" + spec.name) decay = on;
      if (decay) mask.view(offset, Shape{n}).fill(1.0f);
      offset += n;
    }
  }
  EMBER_CHECK(offset == params_.numel(), Error, "Model::decay_mask: the layers' parameters do not fill the buffer");
  return device_.is_cpu() ? mask : mask.to(device_);
}

void Model::set_weight_decay(const std::string& param, bool decay) {
  require_built("set_weight_decay");
  bool found = false;
  for (const auto& [name, t] : named_params()) found = found || name == param;
  EMBER_CHECK(found, ArgumentError, "Model::set_weight_decay: the model has no parameter '" + param + "'");
  decay_overrides_.emplace_back(param, decay);
  if (optimizer_ && optimizer_->decay_mask().defined()) optimizer_->set_decay_mask(decay_mask());
}

float Model::train_step(const Tensor& x, const Tensor& labels, int64_t* correct) {
  EMBER_CHECK(optimizer_ != nullptr, Error, "Sequential: compile() the model with an optimizer first");
  const float loss = compute_gradients(x, labels, correct);
  apply_gradients();
  return loss;
}

std::vector<std::pair<std::string, Tensor>> Model::named_params() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& l : layers_) {
    const auto specs = l->param_specs();
    for (size_t i = 0; i < specs.size(); ++i) out.emplace_back(l->name() + "/" + specs[i].name, l->params()[i]);
  }
  return out;
}

std::vector<std::pair<std::string, Tensor>> Model::named_state() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& l : layers_) {
    const auto specs = l->state_specs();
    for (size_t i = 0; i < specs.size(); ++i) out.emplace_back(l->name() + "/" + specs[i].name, l->state()[i]);
  }
  return out;
}

std::string Model::summary() const {
  require_built("summary");
  std::ostringstream os;
  // A stack: Keras' Sequential table; a graph: its functional table, with the Input and what
  // each layer is called on.
  const size_t width = graph_ ? 98 : 65;
  const std::vector<size_t> stops = graph_ ? std::vector<size_t>{31, 57, 69} : std::vector<size_t>{29, 55};
  const std::string rule(width, '_'), dbl(width, '=');
  auto row = [&](const std::vector<std::string>& cells) {
    std::string line = " " + cells[0];
    for (size_t c = 1; c < cells.size(); ++c) {
      line.resize(std::max(line.size() + 1, stops[c - 1]), ' ');
      line += cells[c];
    }
    os << line << "\n";
  };
  const auto connected = [&](size_t i) {
    std::string out = "[";
    for (size_t k = 0; k < nodes_[i].inputs.size(); ++k) {
      const int from = nodes_[i].inputs[k];
      out += (k ? ", '" : "'") + (from < 0 ? input_name_ : layers_[static_cast<size_t>(from)]->name()) + "[0][0]'";
    }
    return out + "]";
  };
  os << "Model: \"" << name_ << "\"\n" << rule << "\n";
  if (graph_)
    row({"Layer (type)", "Output Shape", "Param #", "Connected to"});
  else
    row({"Layer (type)", "Output Shape", "Param #"});
  os << dbl << "\n";
  if (graph_) {
    row({input_name_ + " (InputLayer)", "[" + batch_shape(input_shape_) + "]", "0", "[]"});
    os << "\n";
  }
  for (size_t i = 0; i < layers_.size(); ++i) {
    std::vector<std::string> cells{layers_[i]->name() + " (" + layers_[i]->type() + ")", batch_shape(output_shapes_[i]),
                                   with_commas(layers_[i]->num_params() + layers_[i]->num_non_trainable())};
    if (graph_) cells.push_back(connected(i));
    row(cells);
    if (i + 1 < layers_.size()) os << "\n";
  }
  os << dbl << "\n";
  os << "Total params: " << with_commas(num_params() + num_non_trainable()) << "\n";
  os << "Trainable params: " << with_commas(num_params()) << "\n";
  os << "Non-trainable params: " << with_commas(num_non_trainable()) << "\n" << rule << "\n";
  return os.str();
}

std::string Model::placement_report(int64_t batch_size) const {
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
