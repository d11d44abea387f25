// Model: building its parts (topology.h, params.h), the passes (forward, backward, the losses and
// metrics, CPU micro-batches), the training step, nesting, summary and placement.
#include "model.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <sstream>
#include <utility>

#include "../../core/error.h"
#include "../../core/logger.h"
#include "../../core/pairwise_sum.h"
#include "../../core/runtime.h"
#include "../ops/elementwise.h"
#include "conv_pool_block.h"
#include "params.h"
#include "topology.h"

namespace ember {

namespace detail {
template <class T>
Part<T>::Part() : p_(std::make_unique<T>()) {}
template <class T>
Part<T>::Part(Part&& other) noexcept : p_(std::exchange(other.p_, std::make_unique<T>())) {}
template <class T>
Part<T>& Part<T>::operator=(Part&& other) noexcept {
  p_ = std::exchange(other.p_, std::make_unique<T>());
  return *this;
}
template <class T>
Part<T>::~Part() = default;
template class Part<Topology>;
template class Part<ParamArena>;
}  // namespace detail

Model::Model() = default;
Model::~Model() = default;
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;

namespace {
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
  topo_->from_symbolic(inputs, outputs);
}

SymbolicTensor Model::operator()(const SymbolicTensor& x) {
  std::vector<SymbolicTensor> out = (*this)(std::vector<SymbolicTensor>{x});
  EMBER_CHECK(out.size() == 1, ArgumentError,
              "calling model '" + name_ + "': it has " + std::to_string(out.size()) +
                  " outputs: call it with a list to get each");
  return out[0];
}

std::vector<SymbolicTensor> Model::operator()(const std::vector<SymbolicTensor>& xs) {
  const std::string who = "calling model '" + name_ + "'";
  EMBER_CHECK(!built(), ArgumentError,
              who +
                  " as a layer: it is built; a nested model is a block whose layers the outer model owns (call it "
                  "before building anything of it)");
  EMBER_CHECK(!topo_->layers.empty(), ArgumentError, who + ": it has no layers");
  const size_t inputs = topo_->graph ? topo_->input_shapes.size() : 1;
  EMBER_CHECK(xs.size() == inputs, ArgumentError,
              who + ": it takes " + std::to_string(inputs) + " inputs, given " + std::to_string(xs.size()));
  for (size_t k = 0; k < xs.size(); ++k) {
    EMBER_CHECK(xs[k].defined(), ArgumentError, who + ": input " + std::to_string(k) + " is undefined");
    EMBER_CHECK(!topo_->graph || xs[k].shape() == topo_->input_shapes[k], ShapeError,
                who + ": its input " + std::to_string(k) + " is " + topo_->input_shapes[k].str() + ", given " +
                    xs[k].shape().str());
  }
  // The first call names the layers within this model and prefixes them with its name, once the
  // whole graph is made: a call that fails (a Sequential's layer refusing the shape) leaves the
  // names and the layers' call counts as they were.
  std::vector<int> calls_before;
  for (const auto& l : topo_->layers) calls_before.push_back(l->calls());
  std::vector<SymbolicTensor> mapped(topo_->layers.size()), out;
  try {
    if (!topo_->graph) {  // a Sequential: its layers in a line (the first call builds them, later ones twin them)
      SymbolicTensor h = xs[0];
      for (size_t i = 0; i < topo_->layers.size(); ++i) h = mapped[i] = call_layer(topo_->layers[i], {h});
      out = {h};
    } else {
      for (size_t i = 0; i < topo_->layers.size(); ++i) {
        std::vector<SymbolicTensor> ins;
        for (int from : topo_->nodes[i].inputs)
          ins.push_back(from < 0 ? xs[static_cast<size_t>(-1 - from)] : mapped[static_cast<size_t>(from)]);
        const std::shared_ptr<Layer>& first =
            topo_->shares[i] >= 0 ? topo_->layers[static_cast<size_t>(topo_->shares[i])] : topo_->layers[i];
        if (nested_calls_ > 0) {  // a later call: twins of the first call's layers
          mapped[i] = call_layer(first, ins);
          continue;
        }
        // The first call: these layer objects, already built for these shapes, in new calls.
        auto node = std::make_shared<detail::GraphNode>();
        node->layer = topo_->layers[i];
        for (const SymbolicTensor& in : ins) node->inputs.push_back(in.node());
        node->shape = topo_->output_shapes[i];
        if (topo_->shares[i] >= 0) node->shares = first;
        mapped[i] = SymbolicTensor(std::move(node));
      }
      for (int o : topo_->outputs) out.push_back(mapped[static_cast<size_t>(o)]);
    }
  } catch (...) {
    for (size_t i = 0; i < topo_->layers.size(); ++i) topo_->layers[i]->restore_calls(calls_before[i]);
    throw;
  }
  if (nested_calls_ == 0) {
    topo_->adopt_names();
    std::map<std::string, int> counts;
    for (size_t i = 0; i < topo_->layers.size(); ++i) {
      if (i < topo_->shares.size() && topo_->shares[i] >= 0) continue;  // a twin: its first call's name at build
      Layer& l = *topo_->layers[i];
      l.set_name(name_ + "/" + (l.name().empty() ? detail::default_layer_name(l.type(), counts) : l.name()));
    }
  }
  ++nested_calls_;
  return out;
}

Layer& Model::append(std::shared_ptr<Layer> layer, const char* who) {
  EMBER_CHECK(layer != nullptr, ArgumentError, std::string(who) + ": null layer");
  EMBER_CHECK(!built(), Error, std::string(who) + ": the model is already built; add layers before build()");
  topo_->layers.push_back(std::move(layer));
  return *topo_->layers.back();
}

const std::vector<int>& Model::layer_inputs(size_t i) const {
  EMBER_CHECK(i < topo_->nodes.size(), ArgumentError,
              "Model::layer_inputs: layer " + std::to_string(i) + " of a model of " +
                  std::to_string(topo_->nodes.size()) +
                  (built() || topo_->graph ? "" : " (a Sequential's graph exists from build())"));
  return topo_->nodes[i].inputs;
}

void Model::build(uint64_t seed) {
  EMBER_CHECK(topo_->graph, Error, "Model::build: a Sequential needs its input shape: build(Shape{...}, seed)");
  build_model(nullptr, seed);
}

void Model::build(const Shape& sample_shape, uint64_t seed) { build_model(&sample_shape, seed); }

void Model::build_model(const Shape* sample_shape, uint64_t seed) {
  EMBER_CHECK(!topo_->layers.empty(), Error, "Model::build: the model has no layers");
  EMBER_CHECK(!built(), Error, "Model::build: the model is already built");
  check_cpu_support();
  if (topo_->graph) {
    if (sample_shape != nullptr) {
      EMBER_CHECK(topo_->input_shapes.size() == 1, ShapeError,
                  "Model::build: the model has " + std::to_string(topo_->input_shapes.size()) +
                      " inputs; build(seed) builds it for their shapes");
      EMBER_CHECK(
          *sample_shape == topo_->input_shapes[0], ShapeError,
          "Model::build: the model's input is " + topo_->input_shapes[0].str() + ", given " + sample_shape->str());
    }
  } else {  // a Sequential: the line of calls
    topo_->line();
  }
  topo_->name_layers();
  for (const auto& l : topo_->layers) {
    const auto owner = l->owner().lock();
    EMBER_CHECK(!owner || owner == identity_, ArgumentError,
                "Model::build: layer '" + l->name() + "' (" + l->type() +
                    ") belongs to another built model; a layer serves one model (make new layers for each model, "
                    "e.g. inside ModelRecipe::make_model)");
  }
  if (!topo_->graph) {
    topo_->input_shapes = {*sample_shape};
    topo_->output_shapes.clear();
    Shape s = *sample_shape;
    for (auto& l : topo_->layers) {
      try {
        s = l->build(s);
      } catch (const ShapeError& e) {
        throw ShapeError("layer '" + l->name() + "': " + e.what());
      }
      topo_->output_shapes.push_back(s);
    }
  }
  if (!topo_->graph) topo_->outputs = {static_cast<int>(topo_->layers.size()) - 1};
  for (int out : topo_->outputs) {
    const Shape& s = topo_->output_shapes[static_cast<size_t>(out)];
    EMBER_CHECK(s.rank() == 1, ShapeError,
                "Model: " + std::string(topo_->outputs.size() == 1 ? "the last layer" : "an output layer") +
                    " must output per-sample values (features,), got " + s.str());
  }
  arena_->allocate(*topo_);
  for (auto& l : topo_->layers) l->set_owner(identity_);
  Rng init = Rng(seed).fork(0x494E4954ull /* "INIT" */);
  for (size_t i = 0; i < topo_->layers.size(); ++i)
    if (topo_->shares[i] < 0) topo_->layers[i]->init_params(init);  // on the cpu, then moved by to()
  for (size_t i = 0; i < topo_->layers.size(); ++i) {
    if (topo_->shares[i] >= 0) continue;
    const auto specs = topo_->layers[i]->state_specs();
    for (size_t k = 0; k < specs.size(); ++k)
      Tensor(topo_->layers[i]->state()[k]).fill(specs[k].init);  // fills the buffer
  }
  seed_ = seed;
  seed_random_layers();
  plan_passes();
  if (const Device d = current_device(); !d.is_cpu()) to(d);  // built inside a DeviceScope
}

// What the passes decide once, at build: which layers compute an input gradient, which premask
// their output gradient with a ReLU's mask, which Conv2D -> MaxPool2D pairs fuse on the CPU, who
// reads each output last; and the passes' slots.
void Model::plan_passes() {
  // Nobody consumes d(loss)/d(input): a layer that reads only the input computes no input gradient.
  for (size_t i = 0; i < topo_->layers.size(); ++i)
    if (std::all_of(topo_->nodes[i].inputs.begin(), topo_->nodes[i].inputs.end(), [](int from) { return from < 0; }))
      topo_->layers[i]->set_needs_input_grad(false);
  // ReLU-backward fusion: a layer whose output goes through a ReLU into one consumer that applies
  // the mask in its own backward.
  // An output's own gradient (from its loss) is neither premasked nor a fused pair's inner tensor.
  const auto is_output = [&](size_t i) { return topo_->is_output(i); };
  for (size_t i = 0; i < topo_->layers.size(); ++i) {
    if (topo_->nodes[i].consumers.size() != 1 || is_output(i)) continue;
    Layer& next = *topo_->layers[static_cast<size_t>(topo_->nodes[i].consumers[0])];
    if (topo_->layers[i]->relu_output() && !next.multi_input() && next.fuse_input_relu_mask())
      topo_->layers[i]->set_output_grad_premasked(true);
  }
  // Conv2D -> MaxPool2D fusion: a pattern of the graph, the pool the conv's only consumer and
  // next in the run order.
  blocks_.clear();
  blocks_.resize(topo_->layers.size());
  ran_fused_.assign(topo_->layers.size(), kAlone);
  for (size_t i = 0; i + 1 < topo_->layers.size(); ++i)
    if (topo_->nodes[i].consumers == std::vector<int>{static_cast<int>(i) + 1} &&
        topo_->nodes[i + 1].inputs == std::vector<int>{static_cast<int>(i)} && !is_output(i))
      blocks_[i] = detail::ConvPoolBlock::make(*topo_->layers[i], *topo_->layers[i + 1]);
  const size_t slots = topo_->layers.size() + topo_->input_shapes.size();  // the layers' outputs, then the inputs
  acts_.assign(topo_->layers.size(), nullptr);
  held_.assign(topo_->layers.size(), Tensor());
  holding_ = false;
  // An output layer is read after the pass (by the losses, predict, output(k)): never released.
  last_reader_.assign(topo_->layers.size(), 0);
  for (size_t i = 0; i < topo_->layers.size(); ++i)
    for (int c : topo_->nodes[i].consumers) last_reader_[i] = std::max(last_reader_[i], static_cast<size_t>(c));
  for (int o : topo_->outputs) last_reader_[static_cast<size_t>(o)] = SIZE_MAX;
  gouts_.assign(slots, nullptr);
  gsums_.resize(slots);
  gconv_.resize(slots);
  input_whole_.assign(topo_->input_shapes.size(), false);
}

void Model::seed_random_layers() {
  // Per layer and replica stream: mixed, so that neighbouring layers or replicas share nothing.
  const Rng base = Rng(seed_).fork(0x524E47ull /* "RNG" */).fork(random_stream_);
  for (size_t i = 0; i < topo_->layers.size(); ++i) topo_->layers[i]->set_random_seed(base.fork(i).next_u64());
}

void Model::set_random_seed(uint64_t seed) {
  seed_ = seed;
  if (built()) seed_random_layers();
}

void Model::set_random_stream(uint64_t stream) {
  random_stream_ = stream;
  if (built()) seed_random_layers();
}

Tensor Model::pack_params_layout(const Tensor& padded) const {
  require_built("pack_params_layout");
  return arena_->pack(padded);
}

Tensor Model::unpack_params_layout(const Tensor& packed) const {
  require_built("unpack_params_layout");
  return arena_->unpack(packed);
}

Tensor Model::averaged_state() const {
  require_built("averaged_state");
  return arena_->averaged_state();
}

size_t Model::logit_layers() const {
  return topo_->outputs.size() == 1 && !topo_->layers.empty() &&
                 topo_->outputs[0] + 1 == static_cast<int>(topo_->layers.size()) &&
                 topo_->layers.back()->softmax_output() && heads_[0].loss->takes_softmax_logits()
             ? topo_->layers.size() - 1
             : topo_->layers.size();
}

std::vector<Shape> Model::output_shapes() const {
  std::vector<Shape> out;
  for (int i : topo_->outputs) out.push_back(topo_->output_shapes.at(static_cast<size_t>(i)));
  return out;
}

std::vector<std::string> Model::output_names() const {
  std::vector<std::string> out;  // a later call of a shared layer: "name[k]" (unique)
  for (int i : topo_->outputs) out.push_back(layer_ref(static_cast<size_t>(i)));
  return out;
}

void Model::to(Device device) {
  require_built("to");
  if (device == device_) return;
  arena_->to(device, *topo_);
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
  std::vector<OutputLoss> one;
  one.push_back(OutputLoss{.loss = std::move(loss), .weight = 1.0, .metrics = std::move(metrics)});
  compile(std::move(optimizer), std::move(one));
}

void Model::compile(std::unique_ptr<Optimizer> optimizer, std::vector<OutputLoss> outputs) {
  const size_t expected = topo_->outputs.empty() ? 1 : topo_->outputs.size();  // a Sequential before build: one
  EMBER_CHECK(outputs.size() == expected, ArgumentError,
              "Model::compile: " + std::to_string(outputs.size()) + " losses for a model of " +
                  std::to_string(expected) + " output" + (expected == 1 ? "" : "s"));
  std::vector<Head> heads(outputs.size());
  for (size_t k = 0; k < outputs.size(); ++k) {
    const std::string which = outputs.size() == 1 ? std::string() : " (output " + std::to_string(k) + ")";
    EMBER_CHECK(outputs[k].loss != nullptr, ArgumentError, "Model::compile: null loss" + which);
    EMBER_CHECK(
        std::isfinite(outputs[k].weight) && outputs[k].weight >= 0, ArgumentError,
        "Model::compile: a loss weight must be finite and >= 0, got " + std::to_string(outputs[k].weight) + which);
    const MetricList& metrics = outputs[k].metrics;
    for (size_t i = 0; i < metrics.size(); ++i) {
      EMBER_CHECK(metrics[i] != nullptr, ArgumentError,
                  "Model::compile: metric " + std::to_string(i) + " is null" + which);
      for (size_t j = 0; j < i; ++j)
        EMBER_CHECK(metrics[j]->name() != metrics[i]->name(), ArgumentError,
                    "Model::compile: two metrics are named '" + metrics[i]->name() + "'" + which);
    }
    if (outputs.size() > 1) {
      const Layer& l = *topo_->layers.at(static_cast<size_t>(topo_->outputs[k]));
      EMBER_CHECK(!(l.softmax_output() && outputs[k].loss->takes_softmax_logits()), ArgumentError,
                  "Model::compile: output " + std::to_string(k) + " is a Softmax and its loss " +
                      outputs[k].loss->name() +
                      " takes logits: with several outputs, end that output in its logits (the loss applies "
                      "the softmax)");
    }
    heads[k].eval_loss = outputs[k].loss->clone();
    EMBER_CHECK(heads[k].eval_loss != nullptr, ArgumentError,
                "Model::compile: the loss's clone() returned null" + which);
    heads[k].loss = std::move(outputs[k].loss);
    heads[k].weight = outputs[k].weight;
    heads[k].metrics = std::move(outputs[k].metrics);
  }
  set_optimizer(std::move(optimizer));
  heads_ = std::move(heads);
}

std::vector<std::string> Model::metric_names() const {
  require_heads("metric_names");
  std::vector<std::string> names;
  if (heads_.size() == 1) {
    for (const auto& m : heads_[0].metrics) names.push_back(m->name());
    return names;
  }
  const std::vector<std::string> outs = output_names();  // Keras: every output's loss, then the metrics
  for (size_t k = 0; k < heads_.size(); ++k) names.push_back(outs[k] + "_loss");
  for (size_t k = 0; k < heads_.size(); ++k)
    for (const auto& m : heads_[k].metrics) names.push_back(outs[k] + "_" + m->name());
  return names;
}

MetricSums Model::make_sums(Device device) const {
  require_heads("make_sums");
  if (heads_.size() == 1 && heads_[0].weight == 1.0)
    return MetricSums(device, static_cast<int64_t>(heads_[0].metrics.size()));
  std::vector<int64_t> counts;
  std::vector<double> weights;
  for (const Head& h : heads_) {
    counts.push_back(static_cast<int64_t>(h.metrics.size()));
    weights.push_back(h.weight);
  }
  return MetricSums(device, counts, weights);
}

std::vector<double> Model::metric_sums(const MetricSums::Values& v) const {
  // One head's metrics from its block: each from its slot, or the loss's fused count.
  const auto of = [](const Head& h, const MetricSums::Values& b, std::vector<double>& out) {
    for (size_t i = 0; i < h.metrics.size(); ++i)
      out.push_back(h.metrics[i]->fused_with(*h.loss) ? static_cast<double>(b.correct)
                                                      : (i < b.metrics.size() ? b.metrics[i] : 0.0));
  };
  std::vector<double> out;
  if (heads_.size() == 1) {
    of(heads_[0], v, out);
    return out;
  }
  if (v.outputs.size() != heads_.size()) return v.metrics;  // a reduced list, in metric_names()' order
  for (const MetricSums::Values& b : v.outputs) out.push_back(b.loss_sum);
  for (size_t k = 0; k < heads_.size(); ++k) of(heads_[k], v.outputs[k], out);
  return out;
}

void Model::check_targets(DType target, const Shape& target_sample, const char* what, size_t output) const {
  const Head& h = heads_.at(output);
  const Shape& shape = topo_->output_shapes.at(static_cast<size_t>(topo_->outputs.at(output)));
  try {
    h.loss->check(shape, target, target_sample);
    for (const auto& m : h.metrics) m->check(shape, target, target_sample);
  } catch (const ShapeError& e) {
    throw ShapeError(std::string(what) + ": " +
                     (heads_.size() == 1 ? std::string() : "output '" + output_names()[output] + "': ") + e.what());
  }
}

void Model::accumulate_metrics(size_t k, const Tensor& outputs, const Tensor& targets, MetricSums& sums, bool release) {
  // Metrics see what the model outputs (Keras' y_pred): when the loss read a final Softmax's
  // input, that Softmax runs here for them (forward only; its backward never runs in training).
  const Head& h = heads_[k];
  const Tensor* y = &outputs;
  for (size_t i = 0; i < h.metrics.size(); ++i) {
    if (h.metrics[i]->fused_with(*h.loss)) continue;
    if (y == &outputs && logit_layers() < topo_->layers.size() && h.metrics[i]->reads_model_output())
      y = &topo_->layers.back()->forward(outputs, false);
    const Tensor& seen = h.metrics[i]->reads_model_output() ? *y : outputs;
    const int64_t slot = MetricSums::kSlots + static_cast<int64_t>(i);
    EMBER_CHECK(sums.blocks() == heads_.size() && slot < sums.block(k).buffer().numel(), ArgumentError,
                "Model: the metric sums do not fit the compiled losses and metrics (make them with make_sums())");
    h.metrics[i]->accumulate(seen, targets, sums.block(k), slot);
  }
  if (release && y != &outputs) {  // an inference pass: the Softmax's output moves to the model, as
    held_.back() = *y;             // run_layers hands on every layer's, and the layer frees the rest
    acts_.back() = &held_.back();
    topo_->layers.back()->release_buffers();
  }
}

// Before any of a step's work: the step ends in the optimizer.
void Model::require_optimizer() const {
  EMBER_CHECK(optimizer_ != nullptr, Error, "Model: compile() the model with an optimizer first");
}

void Model::require_built(const char* what) const {
  EMBER_CHECK(built(), Error, std::string("Model::") + what + ": build() the model first (or call fit())");
}

void Model::check_range(size_t begin, size_t end, const char* what) const {
  EMBER_CHECK(begin <= end && end <= topo_->layers.size(), ArgumentError,
              std::string("Model::") + what + ": layers [" + std::to_string(begin) + ", " + std::to_string(end) +
                  ") of a model of " + std::to_string(topo_->layers.size()));
}

detail::ConvPoolBlock* Model::block_at(size_t i, size_t end) const {
  if (!cpu_fusion_ || !device_.is_cpu() || i + 1 >= end || i >= blocks_.size() || !blocks_[i] || !blocks_[i]->usable())
    return nullptr;
  return blocks_[i].get();
}

bool Model::fused_with_next(size_t i) const { return block_at(i, topo_->layers.size()) != nullptr; }

// The k-th input of layer i in a pass over layers [begin, ...) on xs: a model input, or (a stack's
// range from layer begin > 0) what the range starts from, xs[0].
const Tensor& Model::input_of(size_t i, size_t k, std::span<const Tensor> xs, size_t begin) const {
  const int from = topo_->nodes[i].inputs[k];
  if (from < 0) return xs[static_cast<size_t>(-1 - from)];
  if (static_cast<size_t>(from) + 1 == begin) return xs[0];
  return *acts_[static_cast<size_t>(from)];
}

// Layers [begin, end) on xs (the checks of the model's inputs when begin is 0).
const Tensor& Model::run_layers(std::span<const Tensor> xs, bool training, size_t begin, size_t end, const char* what,
                                bool release) {
  require_built(what);
  check_range(begin, end, what);
  EMBER_CHECK(begin == 0 || topo_->linear, ArgumentError,
              std::string("Model::") + what + ": a range from layer " + std::to_string(begin) +
                  " needs a stack (is_linear()); a graph model runs from its input");
  const size_t count = begin == 0 ? topo_->input_shapes.size() : 1;
  EMBER_CHECK(xs.size() == count, ArgumentError,
              std::string("Model::") + what + ": the model takes " + std::to_string(count) + " input" +
                  (count == 1 ? "" : "s") + ", given " + std::to_string(xs.size()));
  for (size_t k = 0; k < count; ++k) {
    const Shape& in = begin == 0 ? topo_->input_shapes[k] : topo_->output_shapes[begin - 1];
    const Tensor& x = xs[k];
    const auto which = [&] { return count == 1 ? std::string("input") : "input '" + topo_->input_names[k] + "'"; };
    EMBER_CHECK(x.rank() == in.rank() + 1 && x.shape().without_batch() == in, ShapeError,
                "Model: expects " + which() + " (N" + batch_shape(in).substr(5) + ", given " + x.shape().str());
    EMBER_CHECK(k == 0 || x.dim(0) == xs[0].dim(0), ShapeError,
                "Model: " + which() + " has " + std::to_string(x.dim(0)) + " rows but '" + topo_->input_names[0] +
                    "' " + std::to_string(xs[0].dim(0)));
    EMBER_CHECK(x.device() == device_, DeviceError,
                "Model: the " + which() + " is on " + x.device().str() + " but the model on " + device_.str() +
                    ": copy it with to() (nothing migrates silently)");
  }
  if (holding_) {  // the last inference pass's outputs: the layers hold this pass's
    for (Tensor& t : held_) t = Tensor();
    holding_ = false;
  }
  // An inference pass that frees as it goes: layer i's output moves to held_[i] and the layer
  // drops its buffers; an output whose last reader was layer `reader` is dropped after it.
  holding_ = release;
  const auto hand_on = [&](size_t i, size_t reader) {
    if (!release) return;
    held_[i] = *acts_[i];  // a handle: the storage stays while someone holds it
    acts_[i] = &held_[i];
    for (int from : topo_->nodes[reader].inputs)
      if (from >= 0 && last_reader_[static_cast<size_t>(from)] == reader) held_[static_cast<size_t>(from)] = Tensor();
  };
  std::vector<const Tensor*> ins;
  for (size_t i = begin; i < end; ++i) {
    if (detail::ConvPoolBlock* b = block_at(i, end)) {
      acts_[i] = nullptr;  // never exists: the pool is its only consumer
      acts_[i + 1] = &b->forward(input_of(i, 0, xs, begin), training);
      ran_fused_[i] = kFusedFirst;
      ran_fused_[i + 1] = kFusedSecond;
      if (release) {
        hand_on(i + 1, i);  // the pair read the convolution's inputs
        b->release_buffers();
        topo_->layers[i]->release_buffers();
        topo_->layers[i + 1]->release_buffers();
      }
      ++i;
      continue;
    }
    ran_fused_[i] = kAlone;
    Layer& l = *topo_->layers[i];
    if (l.multi_input()) {
      ins.clear();
      for (size_t k = 0; k < topo_->nodes[i].inputs.size(); ++k) ins.push_back(&input_of(i, k, xs, begin));
      acts_[i] = &l.forward_inputs(ins, training);
    } else {
      acts_[i] = &l.forward(input_of(i, 0, xs, begin), training);
    }
    if (release) {
      hand_on(i, i);
      l.release_buffers();
    }
  }
  return end > begin ? *acts_[end - 1] : xs[0];
}

// With several outputs: output 0's (the last layer run is the last output's).
const Tensor& Model::forward(const Tensor& x, bool training) {
  const Tensor& last = run_layers({&x, 1}, training, 0, topo_->layers.size(), "forward");
  return topo_->outputs.size() > 1 ? output(0) : last;
}

const Tensor& Model::forward(const std::vector<Tensor>& xs, bool training) {
  const Tensor& last = run_layers(xs, training, 0, topo_->layers.size(), "forward");
  return topo_->outputs.size() > 1 ? output(0) : last;
}

// Without a final Softmax: the loss reads its input.
const Tensor& Model::forward_logits(const Tensor& x, bool training) {
  const Tensor& last = run_layers({&x, 1}, training, 0, logit_layers(), "forward_logits");
  return topo_->outputs.size() > 1 ? output(0) : last;
}

const Tensor& Model::forward_logits(const std::vector<Tensor>& xs, bool training) {
  const Tensor& last = run_layers(xs, training, 0, logit_layers(), "forward_logits");
  return topo_->outputs.size() > 1 ? output(0) : last;
}

const Tensor& Model::forward_layers(const Tensor& x, bool training, size_t begin, size_t end) {
  return run_layers({&x, 1}, training, begin, end, "forward_layers");
}

// Hands dx to the gradient slot of a layer's output (the slots after the layers': the inputs'): the
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
  const Tensor* seed = &dy;
  return backward_pass({&seed, 1}, begin, end);
}

// One seed: the gradient of layer end - 1's output; several: of each output layer's, in order.
const Tensor& Model::backward_pass(std::span<const Tensor* const> seeds, size_t begin, size_t end) {
  require_built("backward_layers");
  check_range(begin, end, "backward_layers");
  EMBER_CHECK(begin == 0 || topo_->linear, ArgumentError,
              "Model::backward_layers: a range from layer " + std::to_string(begin) + " needs a stack (is_linear())");
  static const Tensor none;  // the input gradient of a fused pair (a first layer's: none)
  const auto split = [&] {   // built only when the check fails
    return "Model::backward_layers: layers [" + std::to_string(begin) + ", " + std::to_string(end) +
           ") split a pair that ran fused";
  };
  const size_t input_slot = topo_->layers.size();  // input k's: input_slot + k
  // A reader of an input that gave no gradient: that input's is not whole.
  std::fill(input_whole_.begin(), input_whole_.end(), true);
  const auto deliver = [&](size_t slot, const Tensor& dx) {
    if (slot >= input_slot && !dx.defined()) input_whole_[slot - input_slot] = false;
    deliver_grad(slot, dx);
  };
  for (size_t i = 0; i < topo_->shares.size(); ++i)
    if (topo_->shares[i] >= 0 && (topo_->layers[i]->num_params() > 0 || !topo_->layers[i]->state_specs().empty())) {
      const auto o = static_cast<size_t>(topo_->shares[i]);
      EMBER_CHECK((i >= begin && i < end) == (o >= begin && o < end), ArgumentError,
                  "Model::backward_layers: layers [" + std::to_string(begin) + ", " + std::to_string(end) +
                      ") hold one call of the shared layer '" + topo_->layers[o]->name() + "' but not another");
    }
  for (size_t i = begin; i < end; ++i) gouts_[i] = nullptr;
  for (size_t k = input_slot; k < gouts_.size(); ++k) gouts_[k] = nullptr;
  if (seeds.size() == 1 && end > begin) gouts_[end - 1] = seeds[0];
  if (seeds.size() > 1)  // an output that other layers read too gets their gradients added
    for (size_t k = 0; k < seeds.size(); ++k) deliver_grad(static_cast<size_t>(topo_->outputs[k]), *seeds[k]);
  // Where layer i's k-th input gradient goes: the model input's slot for an input (input 0's for
  // what a stack's range starts from), else the producing layer's.
  const auto slot_of = [&](size_t i, size_t k) {
    const int from = topo_->nodes[i].inputs[k];
    if (from < 0) return input_slot + static_cast<size_t>(-1 - from);
    return static_cast<size_t>(from) < begin ? input_slot : static_cast<size_t>(from);
  };
  for (size_t i = end; i-- > begin;) {
    const Tensor* g = gouts_[i];
    EMBER_CHECK(g != nullptr, Error,
                "Model::backward_layers: no gradient reached layer '" + topo_->layers[i]->name() +
                    "' (not on a path to the output?)");
    if (ran_fused_[i] == kFusedSecond) {  // layer i ran inside the pair (i - 1, i)
      EMBER_CHECK(i > begin, ArgumentError, split());
      blocks_[i - 1]->backward(*g);
      deliver(slot_of(i - 1, 0), none);
      --i;
      continue;
    }
    EMBER_CHECK(ran_fused_[i] == kAlone, ArgumentError, split());  // the first of a pair, its second beyond end
    Layer& l = *topo_->layers[i];
    if (l.multi_input()) {
      const std::vector<Tensor>& dxs = l.backward_inputs(*g);
      for (size_t k = 0; k < dxs.size(); ++k) deliver(slot_of(i, k), dxs[k]);
    } else {
      deliver(slot_of(i, 0), l.backward(*g));
    }
  }
  // A shared layer's gradient: its first call's plus every later call's (in run order). A range
  // holds every call of a shared layer or none (checked above).
  for (size_t i = begin; i < end; ++i) {
    if (topo_->shares[i] < 0) continue;
    const std::vector<Tensor>& from = topo_->layers[i]->grads();
    const std::vector<Tensor>& into = topo_->layers[static_cast<size_t>(topo_->shares[i])]->grads();
    for (size_t k = 0; k < from.size(); ++k) {
      Tensor sum = into[k];  // a view: the sum lands in the gradient buffer
      detail::elementwise_binary(detail::BinaryOp::Add, into[k], from[k], sum);
    }
  }
  return input_gradient(0);
}

const Tensor& Model::input_gradient(size_t k) const {
  static const Tensor none;
  const size_t slot = topo_->layers.size() + k;
  return slot < gouts_.size() && gouts_[slot] != nullptr && input_whole_[k] ? *gouts_[slot] : none;
}

void Model::backward(const Tensor& dlogits) {
  EMBER_CHECK(topo_->outputs.size() <= 1, ArgumentError,
              "Model::backward: the model has " + std::to_string(topo_->outputs.size()) +
                  " outputs: give a gradient for each (backward({&d0, &d1, ...}))");
  backward_layers(dlogits, 0, logit_layers());
}

void Model::backward(const std::vector<const Tensor*>& doutputs) {
  EMBER_CHECK(doutputs.size() == topo_->outputs.size(), ArgumentError,
              "Model::backward: " + std::to_string(doutputs.size()) + " gradients for a model of " +
                  std::to_string(topo_->outputs.size()) + " outputs");
  for (const Tensor* d : doutputs) EMBER_CHECK(d != nullptr, ArgumentError, "Model::backward: a null gradient");
  backward_pass(doutputs, 0, logit_layers());
}

const Tensor& Model::output(size_t k) const {
  EMBER_CHECK(
      k < topo_->outputs.size(), ArgumentError,
      "Model::output(" + std::to_string(k) + ") of a model of " + std::to_string(topo_->outputs.size()) + " outputs");
  const Tensor* t = acts_.empty() ? nullptr : acts_[static_cast<size_t>(topo_->outputs[k])];
  EMBER_CHECK(t != nullptr, Error, "Model::output: no forward has run");
  return *t;
}

float Model::compute_gradients(const Tensor& x, const Tensor& labels, int64_t* correct) {
  MetricSums sums = make_sums();
  compute_gradients(x, labels, sums);  // read back
  const MetricSums::Values v = sums.read();
  if (correct) *correct = v.correct;
  return static_cast<float>(v.loss_sum / static_cast<double>(std::max<int64_t>(x.dim(0), 1)));
}

// The Exact slices are the batch's sum groups (core/pairwise_sum.h): the slices' tree is the one
// every CPU weight gradient and the host all-reduce sum in.
static_assert(Model::kExactSliceRows == kBatchGroupRows);

void Model::set_cpu_micro_batch(int64_t rows) {
  EMBER_CHECK(rows >= 0, ArgumentError, "Model::set_cpu_micro_batch: rows must be >= 0, got " + std::to_string(rows));
  cpu_micro_batch_ = rows;
  micro_batch_auto_ = false;
}

int64_t Model::slice_rows(std::span<const Tensor> xs, bool training) const {
  const int64_t n = !xs.empty() && xs[0].rank() > 0 ? xs[0].dim(0) : 0;
  if (!device_.is_cpu()) return n;
  for (const Tensor& x : xs)
    if (x.layout() != Layout::RowMajor || x.rank() == 0 || x.dim(0) != n) return n;  // run whole: forward checks
  const bool exact = training && conv_algorithms() == ConvAlgorithms::Exact;
  if (!exact && (cpu_micro_batch_ == 0 || n <= cpu_micro_batch_)) return n;
  for (const auto& l : topo_->layers)
    if (!l->rows_independent(training)) return n;
  if (exact) return std::min(n, kExactSliceRows);
  if (micro_batch_auto_) {
    // By default, slices only where a slice's activations outweigh the parameters: a CNN's
    // activations stay in cache (the reference CNN's slice: 2.4M values against 93k weights); an
    // MLP re-reading its weight matrices once per slice loses (the autoencoder's slice: 137k
    // values against 435k weights ran 20% slower sliced: docs/benchmarks.md).
    int64_t per_row = 0;
    for (const Shape& s : topo_->output_shapes) per_row += s.numel();
    if (per_row * cpu_micro_batch_ <= arena_->params.numel()) return n;
  }
  return cpu_micro_batch_;
}

namespace {
// Runs `slice(begin, rows)` over consecutive slices of a batch of n rows, keeping the metric
// sums' count of finite batches per batch (one batch, however many slices). `finite_before`:
// scratch (per block, one per output), kept by the caller so that a sliced step allocates nothing.
template <typename F>
void for_each_slice(int64_t n, int64_t rows, MetricSums& sums, std::vector<double>& finite_before, F&& slice) {
  finite_before.clear();
  for (size_t k = 0; k < sums.blocks(); ++k) finite_before.push_back(sums.block(k).buffer().data<double>()[3]);
  for (int64_t i = 0; i < n; i += rows) slice(i, std::min(rows, n - i));
  for (size_t k = 0; k < sums.blocks(); ++k) {
    double* acc = sums.block(k).buffer().data<double>();
    acc[3] = finite_before[k] + (std::isfinite(acc[0]) ? 1.0 : 0.0);
  }
}

}  // namespace

std::span<const Tensor> Model::slice_inputs(std::span<const Tensor> xs, int64_t begin, int64_t rows) {
  return slices_of(xs, begin, rows, slice_xs_);
}

std::span<const Tensor> Model::slice_targets(std::span<const Tensor> ys, int64_t begin, int64_t rows) {
  return slices_of(ys, begin, rows, slice_ys_);
}

std::span<const Tensor> Model::slices_of(std::span<const Tensor> ts, int64_t begin, int64_t rows,
                                         std::vector<Tensor>& into) {
  into.resize(ts.size());
  for (size_t k = 0; k < ts.size(); ++k) into[k] = ts[k].rows(begin, rows);
  return into;
}

// A sliced batch's targets, checked whole first: a bad one throws before any slice has added to
// the metric sums or the gradients (as the whole batch's loss does).
void Model::check_sliced_targets(std::span<const Tensor> targets, int64_t n) const {
  for (size_t k = 0; k < targets.size() && k < heads_.size(); ++k) {
    const Tensor& t = targets[k];
    EMBER_CHECK(t.rank() >= 1 && t.dim(0) == n && t.layout() == Layout::RowMajor && t.device().is_cpu(), ShapeError,
                "Model: targets must be (" + std::to_string(n) + ", ...) on the cpu for this batch, got " + t.str());
    heads_[k].loss->check_targets(t, topo_->output_shapes[static_cast<size_t>(topo_->outputs[k])]);
  }
}

void Model::require_heads(const char* what) const {
  EMBER_CHECK(heads_.size() == std::max<size_t>(topo_->outputs.size(), 1), Error,
              std::string("Model::") + what + ": compile() a model of " + std::to_string(topo_->outputs.size()) +
                  " outputs with a loss per output (OutputLoss) first");
}

void Model::run_heads(const Tensor& last, std::span<const Tensor> ys, MetricSums& sums, bool training,
                      int64_t mean_rows) {
  require_heads(training ? "compute_gradients" : "evaluate_batch");
  EMBER_CHECK(
      ys.size() == heads_.size(), ArgumentError,
      "Model: " + std::to_string(ys.size()) + " targets for a model of " + std::to_string(heads_.size()) + " outputs");
  EMBER_CHECK(sums.blocks() == heads_.size(), ArgumentError,
              "Model: the metric sums hold " + std::to_string(sums.blocks()) + " outputs' sums; the model has " +
                  std::to_string(heads_.size()) + " (make them with make_sums())");
  head_grads_.assign(heads_.size(), nullptr);
  for (size_t k = 0; k < heads_.size(); ++k) {
    Head& h = heads_[k];
    // One output: what the loss reads, the last layer run (a final Softmax's input when the loss
    // takes logits; the input itself for a model that is only that Softmax).
    const Tensor& out = heads_.size() == 1 ? last : *acts_[static_cast<size_t>(topo_->outputs[k])];
    if (!training) {
      h.eval_loss->forward(out, ys[k], sums.block(k));
      accumulate_metrics(k, out, ys[k], sums, true);  // evaluate frees as it goes (run_layers)
      continue;
    }
    // Metrics read the outputs only, never the loss's buffers: after the loss's backward is as good.
    const Tensor& d = h.loss->forward_backward(out, ys[k], sums.block(k), mean_rows);
    accumulate_metrics(k, out, ys[k], sums, false);
    if (h.weight == 1.0) {
      head_grads_[k] = &d;
    } else {
      ensure(h.scaled, d.shape(), DType::F32, d.device(), d.layout());
      detail::elementwise_scale(static_cast<float>(h.weight), d, h.scaled);
      head_grads_[k] = &h.scaled;
    }
  }
  if (training) backward_pass(head_grads_, 0, logit_layers());
}

void Model::compute_gradients(const Tensor& x, const Tensor& labels, MetricSums& sums) {
  compute_gradients_of({&x, 1}, {&labels, 1}, sums);
}

void Model::compute_gradients(const std::vector<Tensor>& xs, const Tensor& labels, MetricSums& sums) {
  compute_gradients_of(xs, {&labels, 1}, sums);
}

void Model::compute_gradients(const std::vector<Tensor>& xs, const std::vector<Tensor>& targets, MetricSums& sums) {
  compute_gradients_of(xs, targets, sums);
}

void Model::compute_gradients_of(std::span<const Tensor> xs, std::span<const Tensor> ys, MetricSums& sums) {
  const int64_t n = !xs.empty() && xs[0].rank() > 0 ? xs[0].dim(0) : 0, rows = slice_rows(xs, true);
  if (rows == n) {
    run_heads(run_layers(xs, true, 0, logit_layers(), "compute_gradients"), ys, sums, true, 0);
    return;
  }
  check_sliced_targets(ys, n);  // whole, before any slice adds to the sums
  // The slices' gradients as the batch's pairwise tree (core/pairwise_sum.h: PairwiseTree's binary
  // counter of subtrees, the order every CPU weight gradient sums its groups in and the all-reduce
  // its replicas in); grad_tree_ holds the subtrees.
  const int64_t count = arena_->grads.numel();
  PairwiseTree tree;
  const auto add_into = [this, count](int64_t into, int64_t from) {
    float* l = grad_tree_[size_t(into)].f32();
    const float* r = grad_tree_[size_t(from)].f32();
    for (int64_t i = 0; i < count; ++i) l[i] += r[i];
  };
  for_each_slice(n, rows, sums, finite_before_, [&](int64_t begin, int64_t b) {
    const Tensor& last = run_layers(slice_inputs(xs, begin, b), true, 0, logit_layers(), "compute_gradients");
    run_heads(last, slice_targets(ys, begin, b), sums, true, n);  // the mean over the whole batch
    const size_t at = size_t(tree.next_slot());
    if (grad_tree_.size() <= at) grad_tree_.emplace_back();
    ensure(grad_tree_[at], arena_->grads.shape(), DType::F32, arena_->grads.device());
    grad_tree_[at].copy_from(arena_->grads);
    tree.push(add_into);
  });
  tree.finish(add_into);
  arena_->grads.copy_from(grad_tree_[0]);
}

void Model::evaluate_batch(const Tensor& x, const Tensor& labels, MetricSums& sums) {
  evaluate_batch_of({&x, 1}, {&labels, 1}, sums);
}

void Model::evaluate_batch(const std::vector<Tensor>& xs, const Tensor& labels, MetricSums& sums) {
  evaluate_batch_of(xs, {&labels, 1}, sums);
}

void Model::evaluate_batch(const std::vector<Tensor>& xs, const std::vector<Tensor>& targets, MetricSums& sums) {
  evaluate_batch_of(xs, targets, sums);
}

void Model::evaluate_batch_of(std::span<const Tensor> xs, std::span<const Tensor> ys, MetricSums& sums) {
  const int64_t n = !xs.empty() && xs[0].rank() > 0 ? xs[0].dim(0) : 0, rows = slice_rows(xs, false);
  if (rows == n) {
    run_heads(run_layers(xs, false, 0, logit_layers(), "evaluate_batch", true), ys, sums, false, 0);
    return;
  }
  check_sliced_targets(ys, n);
  const SliceViewsDropper drop{*this};  // the slices view the caller's batch: not kept after
  for_each_slice(n, rows, sums, finite_before_, [&](int64_t begin, int64_t b) {
    const Tensor& last = run_layers(slice_inputs(xs, begin, b), false, 0, logit_layers(), "evaluate_batch", true);
    run_heads(last, slice_targets(ys, begin, b), sums, false, 0);
  });
}

void Model::train_step(const Tensor& x, const Tensor& labels, MetricSums& sums) {
  require_optimizer();
  compute_gradients(x, labels, sums);
  apply_gradients();
}

void Model::train_step(const std::vector<Tensor>& xs, const Tensor& labels, MetricSums& sums) {
  require_optimizer();
  compute_gradients(xs, labels, sums);
  apply_gradients();
}

void Model::train_step(const std::vector<Tensor>& xs, const std::vector<Tensor>& targets, MetricSums& sums) {
  require_optimizer();
  compute_gradients(xs, targets, sums);
  apply_gradients();
}

void Model::apply_gradients() {
  require_optimizer();
  if (optimizer_->regularization().weight_decay > 0) {
    const Tensor& m = optimizer_->decay_mask();
    if (!m.defined() || m.numel() != arena_->params.numel() || m.device() != arena_->params.device())
      optimizer_->set_decay_mask(decay_mask());
  }
  optimizer_->step(arena_->params, arena_->grads);
}

Tensor Model::decay_mask() const {
  require_built("decay_mask");
  return arena_->decay_mask(*topo_, decay_overrides_, device_);
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
  require_optimizer();
  const float loss = compute_gradients(x, labels, correct);
  apply_gradients();
  return loss;
}

std::string Model::layer_ref(size_t i, const char* first) const { return topo_->layer_ref(i, first); }

std::vector<std::pair<std::string, Tensor>> Model::named_params() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t k = 0; k < topo_->layers.size(); ++k) {
    if (is_twin(k)) continue;  // a shared layer's parameters are listed once
    const auto& l = topo_->layers[k];
    const auto specs = l->param_specs();
    for (size_t i = 0; i < specs.size(); ++i) out.emplace_back(l->name() + "/" + specs[i].name, l->params()[i]);
  }
  return out;
}

std::vector<std::pair<std::string, Tensor>> Model::named_state() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t k = 0; k < topo_->layers.size(); ++k) {
    if (is_twin(k)) continue;
    const auto& l = topo_->layers[k];
    const auto specs = l->state_specs();
    for (size_t i = 0; i < specs.size(); ++i) out.emplace_back(l->name() + "/" + specs[i].name, l->state()[i]);
  }
  return out;
}

const std::vector<std::shared_ptr<Layer>>& Model::layers() const { return topo_->layers; }
bool Model::is_twin(size_t i) const { return topo_->is_twin(i); }
int Model::shared_with(size_t i) const { return i < topo_->shares.size() ? topo_->shares[i] : -1; }
bool Model::is_linear() const { return topo_->linear; }
bool Model::is_graph() const { return topo_->graph; }
const std::string& Model::input_name() const { return topo_->input_names.at(0); }
const Shape& Model::input_shape() const { return topo_->input_shapes.at(0); }
size_t Model::num_inputs() const { return topo_->input_shapes.size(); }
const std::vector<std::string>& Model::input_names() const { return topo_->input_names; }
const std::vector<Shape>& Model::input_shapes() const { return topo_->input_shapes; }
const Shape& Model::output_shape() const { return topo_->output_shapes.at(static_cast<size_t>(topo_->outputs.at(0))); }
size_t Model::num_outputs() const { return topo_->outputs.size(); }
const std::vector<int>& Model::output_layers() const { return topo_->outputs; }
const std::vector<Shape>& Model::layer_output_shapes() const { return topo_->output_shapes; }

bool Model::built() const { return arena_->params.defined(); }
Tensor& Model::params() { return arena_->params; }
const Tensor& Model::params() const { return arena_->params; }
Tensor& Model::grads() { return arena_->grads; }
int64_t Model::num_params() const { return arena_->num_params; }
Tensor& Model::state() { return arena_->state; }
const Tensor& Model::state() const { return arena_->state; }
int64_t Model::num_non_trainable() const { return arena_->num_non_trainable; }

std::string Model::summary() const {
  require_built("summary");
  std::ostringstream os;
  // A stack: Keras' Sequential table; a graph: its functional table, with the Input and what
  // each layer is called on.
  const size_t width = topo_->graph ? 98 : 65;
  const std::vector<size_t> stops = topo_->graph ? std::vector<size_t>{31, 57, 69} : std::vector<size_t>{29, 55};
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
    for (size_t k = 0; k < topo_->nodes[i].inputs.size(); ++k) {
      const int from = topo_->nodes[i].inputs[k];
      out += (k ? ", '" : "'") +
             (from < 0 ? topo_->input_names[static_cast<size_t>(-1 - from)] + "[0]"
                       : layer_ref(static_cast<size_t>(from), "[0]")) +
             "[0]'";
    }
    return out + "]";
  };
  os << "Model: \"" << name_ << "\"\n" << rule << "\n";
  if (topo_->graph)
    row({"Layer (type)", "Output Shape", "Param #", "Connected to"});
  else
    row({"Layer (type)", "Output Shape", "Param #"});
  os << dbl << "\n";
  if (topo_->graph)
    for (size_t k = 0; k < topo_->input_shapes.size(); ++k) {
      row({topo_->input_names[k] + " (InputLayer)", "[" + batch_shape(topo_->input_shapes[k]) + "]", "0", "[]"});
      os << "\n";
    }
  for (size_t i = 0; i < topo_->layers.size(); ++i) {
    std::vector<std::string> cells{
        topo_->layers[i]->name() + " (" + topo_->layers[i]->type() + ")", batch_shape(topo_->output_shapes[i]),
        is_twin(i) ? "shared" : with_commas(topo_->layers[i]->num_params() + topo_->layers[i]->num_non_trainable())};
    if (topo_->graph) cells.push_back(connected(i));
    row(cells);
    if (i + 1 < topo_->layers.size()) os << "\n";
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
  for (size_t i = 0; i < topo_->layers.size(); ++i) {
    const Layer& l = *topo_->layers[i];
    const bool second_of_pair = i > 0 && fused_with_next(i - 1);
    os << "  " << l.name() << " (" << l.type() << "): " << device_.str() << ", "
       << (fused_with_next(i) ? blocks_[i]->kernel_info()
           : second_of_pair   ? "fused into '" + topo_->layers[i - 1]->name() + "'"
                              : l.kernel_info(batch_size, device_))
       << "\n";
  }
  return os.str();
}

}  // namespace ember
