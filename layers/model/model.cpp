// Model: the graph, building, the flat parameter buffers, forward/backward, summary.
#include "model.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <sstream>

#include "../../core/error.h"
#include "../../core/logger.h"
#include "../../core/pairwise_sum.h"
#include "../../core/runtime.h"
#include "../ops/elementwise.h"
#include "conv_pool_block.h"

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
  EMBER_CHECK(!inputs.empty() && !outputs.empty(), ArgumentError,
              "Model: " + std::to_string(inputs.size()) + " inputs and " + std::to_string(outputs.size()) +
                  " outputs; a model needs at least one of each");
  for (const SymbolicTensor& out : outputs)
    EMBER_CHECK(out.node() != nullptr, ArgumentError, "Model: an undefined SymbolicTensor");
  std::map<const detail::GraphNode*, int> index;  // -1 - k: input k; -2 - inputs: being visited
  input_names_.clear();
  input_shapes_.clear();
  for (size_t k = 0; k < inputs.size(); ++k) {
    const auto& in = inputs[k].node();
    EMBER_CHECK(in != nullptr, ArgumentError, "Model: an undefined SymbolicTensor");
    EMBER_CHECK(in->layer == nullptr, ArgumentError,
                "Model: input " + std::to_string(k) + " must be an Input(), not a layer's output");
    for (const SymbolicTensor& out : outputs)
      EMBER_CHECK(out.node() != in, ArgumentError, "Model: an output is an input itself (no layer between)");
    EMBER_CHECK(index.emplace(in.get(), -1 - static_cast<int>(k)).second, ArgumentError,
                "Model: input " + std::to_string(k) + " is given twice");
    input_names_.push_back(in->input_name);
    input_shapes_.push_back(in->shape);
  }
  const int visiting = -2 - static_cast<int>(inputs.size());
  std::vector<const detail::GraphNode*> order;
  std::vector<std::pair<const detail::GraphNode*, size_t>> stack;
  for (const SymbolicTensor& out : outputs) {  // each output's calls not placed yet, in turn
    if (index.count(out.node().get())) continue;
    index[out.node().get()] = visiting;
    stack.emplace_back(out.node().get(), 0);
    while (!stack.empty()) {
      auto& [node, next] = stack.back();
      if (node->layer == nullptr)
        throw ArgumentError("Model: an output depends on an Input" +
                            (node->input_name.empty() ? std::string() : " '" + node->input_name + "'") +
                            " that is not among the model's inputs");
      if (next < node->inputs.size()) {
        const detail::GraphNode* child = node->inputs[next++].get();
        const auto it = index.find(child);
        if (it == index.end()) {
          index[child] = visiting;
          stack.emplace_back(child, 0);
        }
        continue;  // a child already placed (or the input); a cycle cannot be built
      }
      index[node] = static_cast<int>(order.size());
      order.push_back(node);
      stack.pop_back();
    }
  }
  outputs_.clear();
  for (size_t k = 0; k < outputs.size(); ++k) {
    const int at = index.at(outputs[k].node().get());
    EMBER_CHECK(std::find(outputs_.begin(), outputs_.end(), at) == outputs_.end(), ArgumentError,
                "Model: output " + std::to_string(k) + " is given twice");
    outputs_.push_back(at);
  }
  layers_.clear();
  nodes_.assign(order.size(), Node{});
  linear_ = inputs.size() == 1 && outputs.size() == 1;
  std::vector<bool> used(inputs.size(), false);
  for (size_t i = 0; i < order.size(); ++i) {
    const auto same = std::find_if(layers_.begin(), layers_.end(), [&](const auto& l) { return l == order[i]->layer; });
    EMBER_CHECK(same == layers_.end(), Error, "Model: one layer object runs two calls (graph.h makes twins)");
    layers_.push_back(order[i]->layer);
    output_shapes_.push_back(order[i]->shape);
    for (const auto& child : order[i]->inputs) {
      const int from = index.at(child.get());
      nodes_[i].inputs.push_back(from);
      if (from >= 0) nodes_[static_cast<size_t>(from)].consumers.push_back(static_cast<int>(i));
      if (from < 0) used[static_cast<size_t>(-1 - from)] = true;
    }
    linear_ = linear_ && nodes_[i].inputs.size() == 1 && nodes_[i].inputs[0] == static_cast<int>(i) - 1;
  }
  // A later call's twin uses the parameters of the layer its first call ran, which must be here.
  shares_.assign(layers_.size(), -1);
  for (size_t i = 0; i < order.size(); ++i) {
    if (!order[i]->shares) continue;
    const auto first = std::find(layers_.begin(), layers_.end(), order[i]->shares);
    EMBER_CHECK(first != layers_.end(), ArgumentError,
                "Model: a " + order[i]->shares->type() + " layer" +
                    (order[i]->shares->name().empty() ? std::string() : " '" + order[i]->shares->name() + "'") +
                    " is called here again, sharing its weights, but its first call is not part of the model");
    shares_[i] = static_cast<int>(first - layers_.begin());
  }
  // Whichever call of a shared layer runs first owns the parameters (their place in the flat
  // buffers is its place in the run order, as load_model recreates it from the file's order); the
  // others, the first call's object included, are its twins. The owner takes the layer's name
  // (adopt_names, when the model is built or nested: the user may name the layer until then). A
  // twin of a twin (a nested model's shared layer called again) belongs to the same root.
  for (size_t i = 0; i < shares_.size(); ++i)
    while (shares_[i] >= 0 && shares_[static_cast<size_t>(shares_[i])] >= 0)
      shares_[i] = shares_[static_cast<size_t>(shares_[i])];
  std::vector<int> owner(layers_.size());
  for (size_t i = 0; i < owner.size(); ++i) owner[i] = static_cast<int>(i);
  for (size_t i = 0; i < shares_.size(); ++i)
    if (shares_[i] >= 0)
      owner[static_cast<size_t>(shares_[i])] = std::min(owner[static_cast<size_t>(shares_[i])], static_cast<int>(i));
  name_from_.assign(layers_.size(), -1);
  for (size_t i = 0; i < shares_.size(); ++i) {
    const int root = shares_[i] >= 0 ? shares_[i] : static_cast<int>(i);
    const int o = owner[static_cast<size_t>(root)];
    if (static_cast<int>(i) == root && o != root) name_from_[static_cast<size_t>(o)] = root;
    shares_[i] = static_cast<int>(i) == o ? -1 : o;
  }
  for (size_t k = 0; k < inputs.size(); ++k)
    EMBER_CHECK(used[k], ArgumentError,
                "Model: input " + std::to_string(k) +
                    (input_names_[k].empty() ? std::string() : " '" + input_names_[k] + "'") +
                    " does not reach an output (an input the model would not read)");
  graph_ = true;
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
  EMBER_CHECK(!layers_.empty(), ArgumentError, who + ": it has no layers");
  const size_t inputs = graph_ ? input_shapes_.size() : 1;
  EMBER_CHECK(xs.size() == inputs, ArgumentError,
              who + ": it takes " + std::to_string(inputs) + " inputs, given " + std::to_string(xs.size()));
  for (size_t k = 0; k < xs.size(); ++k) {
    EMBER_CHECK(xs[k].defined(), ArgumentError, who + ": input " + std::to_string(k) + " is undefined");
    EMBER_CHECK(
        !graph_ || xs[k].shape() == input_shapes_[k], ShapeError,
        who + ": its input " + std::to_string(k) + " is " + input_shapes_[k].str() + ", given " + xs[k].shape().str());
  }
  // The first call names the layers within this model and prefixes them with its name, once the
  // whole graph is made: a call that fails (a Sequential's layer refusing the shape) leaves the
  // names and the layers' call counts as they were.
  std::vector<int> calls_before;
  for (const auto& l : layers_) calls_before.push_back(l->calls());
  std::vector<SymbolicTensor> mapped(layers_.size()), out;
  try {
    if (!graph_) {  // a Sequential: its layers in a line (the first call builds them, later ones twin them)
      SymbolicTensor h = xs[0];
      for (size_t i = 0; i < layers_.size(); ++i) h = mapped[i] = call_layer(layers_[i], {h});
      out = {h};
    } else {
      for (size_t i = 0; i < layers_.size(); ++i) {
        std::vector<SymbolicTensor> ins;
        for (int from : nodes_[i].inputs)
          ins.push_back(from < 0 ? xs[static_cast<size_t>(-1 - from)] : mapped[static_cast<size_t>(from)]);
        const std::shared_ptr<Layer>& first = shares_[i] >= 0 ? layers_[static_cast<size_t>(shares_[i])] : layers_[i];
        if (nested_calls_ > 0) {  // a later call: twins of the first call's layers
          mapped[i] = call_layer(first, ins);
          continue;
        }
        // The first call: these layer objects, already built for these shapes, in new calls.
        auto node = std::make_shared<detail::GraphNode>();
        node->layer = layers_[i];
        for (const SymbolicTensor& in : ins) node->inputs.push_back(in.node());
        node->shape = output_shapes_[i];
        if (shares_[i] >= 0) node->shares = first;
        mapped[i] = SymbolicTensor(std::move(node));
      }
      for (int o : outputs_) out.push_back(mapped[static_cast<size_t>(o)]);
    }
  } catch (...) {
    for (size_t i = 0; i < layers_.size(); ++i) layers_[i]->restore_calls(calls_before[i]);
    throw;
  }
  if (nested_calls_ == 0) {
    adopt_names();
    std::map<std::string, int> counts;
    for (size_t i = 0; i < layers_.size(); ++i) {
      if (i < shares_.size() && shares_[i] >= 0) continue;  // a twin: its first call's name at build
      Layer& l = *layers_[i];
      l.set_name(name_ + "/" + (l.name().empty() ? default_name(l.type(), counts) : l.name()));
    }
  }
  ++nested_calls_;
  return out;
}

void Model::adopt_names() {
  for (size_t i = 0; i < name_from_.size(); ++i)
    if (name_from_[i] >= 0 && !layers_[static_cast<size_t>(name_from_[i])]->name().empty())
      layers_[i]->set_name(layers_[static_cast<size_t>(name_from_[i])]->name());
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
  build_model(nullptr, seed);
}

void Model::build(const Shape& sample_shape, uint64_t seed) { build_model(&sample_shape, seed); }

void Model::build_model(const Shape* sample_shape, uint64_t seed) {
  EMBER_CHECK(!layers_.empty(), Error, "Model::build: the model has no layers");
  EMBER_CHECK(!built(), Error, "Model::build: the model is already built");
  check_cpu_support();
  if (graph_) {
    if (sample_shape != nullptr) {
      EMBER_CHECK(input_shapes_.size() == 1, ShapeError,
                  "Model::build: the model has " + std::to_string(input_shapes_.size()) +
                      " inputs; build(seed) builds it for their shapes");
      EMBER_CHECK(*sample_shape == input_shapes_[0], ShapeError,
                  "Model::build: the model's input is " + input_shapes_[0].str() + ", given " + sample_shape->str());
    }
  } else {  // a Sequential: the line of calls
    nodes_.assign(layers_.size(), Node{});
    for (size_t i = 0; i < layers_.size(); ++i) {
      nodes_[i].inputs = {static_cast<int>(i) - 1};
      if (i + 1 < layers_.size()) nodes_[i].consumers = {static_cast<int>(i) + 1};
    }
    linear_ = true;
  }
  if (!graph_) shares_.assign(layers_.size(), -1);
  adopt_names();
  std::map<std::string, int> counts;
  std::vector<std::string> used;
  for (size_t i = 0; i < layers_.size(); ++i) {
    Layer& l = *layers_[i];
    if (shares_[i] >= 0) continue;  // a twin: its first call's name, below
    if (l.name().empty()) l.set_name(default_name(l.type(), counts));
    EMBER_CHECK(std::find(used.begin(), used.end(), l.name()) == used.end(), ArgumentError,
                "Model: two layers are named '" + l.name() + "'");
    EMBER_CHECK(l.name().find('[') == std::string::npos, ArgumentError,
                "Model: layer name '" + l.name() + "' has a '[' (\"name[k]\" names a shared layer's later calls)");
    used.push_back(l.name());
  }
  for (size_t i = 0; i < layers_.size(); ++i)
    if (shares_[i] >= 0) layers_[i]->set_name(layers_[static_cast<size_t>(shares_[i])]->name());
  // Unnamed inputs: "input_1", "input_2", ... (Keras' names), skipping names already taken.
  int next_input = 1;
  for (std::string& n : input_names_) {
    if (!n.empty()) continue;
    const auto taken = [&](const std::string& c) {
      return std::find(input_names_.begin(), input_names_.end(), c) != input_names_.end();
    };
    while (taken("input_" + std::to_string(next_input))) ++next_input;
    n = "input_" + std::to_string(next_input++);
  }
  for (size_t k = 0; k < input_names_.size(); ++k) {
    EMBER_CHECK(std::find(used.begin(), used.end(), input_names_[k]) == used.end(), ArgumentError,
                "Model: a layer is named '" + input_names_[k] + "' like an input");
    for (size_t j = 0; j < k; ++j)
      EMBER_CHECK(input_names_[j] != input_names_[k], ArgumentError,
                  "Model: two inputs are named '" + input_names_[k] + "'");
  }
  for (const auto& l : layers_) {
    const auto owner = l->owner().lock();
    EMBER_CHECK(!owner || owner == identity_, ArgumentError,
                "Model::build: layer '" + l->name() + "' (" + l->type() +
                    ") belongs to another built model; a layer serves one model (make new layers for each model, "
                    "e.g. inside ModelRecipe::make_model)");
  }
  if (!graph_) {
    input_shapes_ = {*sample_shape};
    output_shapes_.clear();
    Shape s = *sample_shape;
    for (auto& l : layers_) {
      try {
        s = l->build(s);
      } catch (const ShapeError& e) {
        throw ShapeError("layer '" + l->name() + "': " + e.what());
      }
      output_shapes_.push_back(s);
    }
  }
  if (!graph_) outputs_ = {static_cast<int>(layers_.size()) - 1};
  for (int out : outputs_) {
    const Shape& s = output_shapes_[static_cast<size_t>(out)];
    EMBER_CHECK(s.rank() == 1, ShapeError,
                "Model: " + std::string(outputs_.size() == 1 ? "the last layer" : "an output layer") +
                    " must output per-sample values (features,), got " + s.str());
  }
  int64_t total = 0;  // twins own nothing: their first call's parameters and state are theirs
  num_params_ = 0;
  param_views_.clear();
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (shares_[i] >= 0) continue;
    const auto specs = layers_[i]->param_specs();
    for (size_t k = 0; k < specs.size(); ++k) {
      const int64_t n = specs[k].shape.numel();
      param_views_.push_back({i, k, total, num_params_, n});
      total += aligned_view(n);
      num_params_ += n;
    }
  }
  params_ = Tensor::zeros(Shape{total}, DType::F32, Device::cpu());  // initialised here, then moved
  grads_ = Tensor::zeros(Shape{total}, DType::F32, Device::cpu());
  int64_t state_total = 0;
  averaged_state_numel_ = 0;
  num_non_trainable_ = 0;
  for (size_t i = 0; i < layers_.size(); ++i)
    for (const auto& spec : layers_[i]->state_specs()) {
      if (shares_[i] >= 0) break;
      state_total += aligned_view(spec.shape.numel());
      if (spec.averaged) {
        averaged_state_numel_ += aligned_view(spec.shape.numel());
        num_non_trainable_ += spec.shape.numel();
      }
    }
  state_ = Tensor::zeros(Shape{state_total}, DType::F32, Device::cpu());
  bind_layers();
  for (auto& l : layers_) l->set_owner(identity_);
  Rng init = Rng(seed).fork(0x494E4954ull /* "INIT" */);
  for (size_t i = 0; i < layers_.size(); ++i)
    if (shares_[i] < 0) layers_[i]->init_params(init);  // on the cpu, then moved by to()
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (shares_[i] >= 0) continue;
    const auto specs = layers_[i]->state_specs();
    for (size_t k = 0; k < specs.size(); ++k) Tensor(layers_[i]->state()[k]).fill(specs[k].init);  // fills the buffer
  }
  seed_ = seed;
  seed_random_layers();
  // Nobody consumes d(loss)/d(input): a layer that reads only the input computes no input gradient.
  for (size_t i = 0; i < layers_.size(); ++i)
    if (std::all_of(nodes_[i].inputs.begin(), nodes_[i].inputs.end(), [](int from) { return from < 0; }))
      layers_[i]->set_needs_input_grad(false);
  // ReLU-backward fusion: a layer whose output goes through a ReLU into one consumer that applies
  // the mask in its own backward.
  // An output's own gradient (from its loss) is neither premasked nor a fused pair's inner tensor.
  const auto is_output = [&](size_t i) {
    return std::find(outputs_.begin(), outputs_.end(), static_cast<int>(i)) != outputs_.end();
  };
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (nodes_[i].consumers.size() != 1 || is_output(i)) continue;
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
        nodes_[i + 1].inputs == std::vector<int>{static_cast<int>(i)} && !is_output(i))
      blocks_[i] = detail::ConvPoolBlock::make(*layers_[i], *layers_[i + 1]);
  const size_t slots = layers_.size() + input_shapes_.size();  // the layers' outputs, then the inputs
  acts_.assign(layers_.size(), nullptr);
  held_.assign(layers_.size(), Tensor());
  holding_ = false;
  // An output layer is read after the pass (by the losses, predict, output(k)): never released.
  last_reader_.assign(layers_.size(), 0);
  for (size_t i = 0; i < layers_.size(); ++i)
    for (int c : nodes_[i].consumers) last_reader_[i] = std::max(last_reader_[i], static_cast<size_t>(c));
  for (int o : outputs_) last_reader_[static_cast<size_t>(o)] = SIZE_MAX;
  gouts_.assign(slots, nullptr);
  gsums_.resize(slots);
  gconv_.resize(slots);
  input_whole_.assign(input_shapes_.size(), false);
  if (const Device d = current_device(); !d.is_cpu()) to(d);  // built inside a DeviceScope
}

void Model::bind_layers() {
  // State: the averaged specs of every layer first, then the others (one averaged region).
  int64_t averaged = 0, other = averaged_state_numel_;
  auto view = param_views_.begin();
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (shares_[i] >= 0) continue;
    Layer& l = *layers_[i];
    std::vector<Tensor> p, g, st;
    for (const auto& spec : l.param_specs()) {
      EMBER_CHECK(view != param_views_.end() && view->layer == i, Error,
                  "Model::bind_layers: the parameter views do not match the layers (build() again)");
      p.push_back(params_.view(view->padded, spec.shape));
      g.push_back(grads_.view(view->padded, spec.shape));
      ++view;
    }
    l.bind(std::move(p), std::move(g));
    for (const auto& spec : l.state_specs()) {
      int64_t& at = spec.averaged ? averaged : other;
      st.push_back(state_.view(at, spec.shape));
      at += aligned_view(spec.shape.numel());
    }
    l.bind_state(std::move(st));
  }
  // Twins: their first call's parameters and state, gradients of their own (added to the first
  // call's after every backward pass).
  int64_t twin_total = 0;
  for (size_t i = 0; i < layers_.size(); ++i)
    if (shares_[i] >= 0)
      for (const auto& spec : layers_[i]->param_specs()) twin_total += aligned_view(spec.shape.numel());
  twin_grads_ = twin_total > 0 ? Tensor::zeros(Shape{twin_total}, DType::F32, params_.device()) : Tensor();
  int64_t at = 0;
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (shares_[i] < 0) continue;
    const Layer& first = *layers_[static_cast<size_t>(shares_[i])];
    std::vector<Tensor> g;
    for (const auto& spec : layers_[i]->param_specs()) {
      g.push_back(twin_grads_.view(at, spec.shape));
      at += aligned_view(spec.shape.numel());
    }
    layers_[i]->bind(first.params(), std::move(g));
    layers_[i]->bind_state(first.state());
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

Tensor Model::pack_params_layout(const Tensor& padded) const {
  require_built("pack_params_layout");
  EMBER_CHECK(padded.numel() == params_.numel() && padded.dtype() == DType::F32, ShapeError,
              "Model::pack_params_layout: expects an f32 buffer of " + std::to_string(params_.numel()) +
                  " values (params()' layout), got " + padded.str());
  Tensor packed = Tensor::empty(Shape{num_params_}, DType::F32, padded.device());
  Tensor src = padded.reshape(Shape{padded.numel()});
  for (const ParamView& v : param_views_) packed.view(v.packed, Shape{v.n}).copy_from(src.view(v.padded, Shape{v.n}));
  return packed;
}

Tensor Model::unpack_params_layout(const Tensor& packed) const {
  require_built("unpack_params_layout");
  EMBER_CHECK(packed.numel() == num_params_ && packed.dtype() == DType::F32, ShapeError,
              "Model::unpack_params_layout: expects an f32 buffer of " + std::to_string(num_params_) +
                  " values (one per parameter), got " + packed.str());
  Tensor padded = Tensor::zeros(Shape{params_.numel()}, DType::F32, packed.device());
  Tensor src = packed.reshape(Shape{packed.numel()});
  for (const ParamView& v : param_views_) padded.view(v.padded, Shape{v.n}).copy_from(src.view(v.packed, Shape{v.n}));
  return padded;
}

Tensor Model::averaged_state() const {
  require_built("averaged_state");
  return state_.view(0, Shape{averaged_state_numel_});
}

size_t Model::logit_layers() const {
  return outputs_.size() == 1 && !layers_.empty() && outputs_[0] + 1 == static_cast<int>(layers_.size()) &&
                 layers_.back()->softmax_output() && heads_[0].loss->takes_softmax_logits()
             ? layers_.size() - 1
             : layers_.size();
}

std::vector<Shape> Model::output_shapes() const {
  std::vector<Shape> out;
  for (int i : outputs_) out.push_back(output_shapes_.at(static_cast<size_t>(i)));
  return out;
}

std::vector<std::string> Model::output_names() const {
  std::vector<std::string> out;  // a later call of a shared layer: "name[k]" (unique)
  for (int i : outputs_) out.push_back(layer_ref(static_cast<size_t>(i)));
  return out;
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
  std::vector<OutputLoss> one;
  one.push_back(OutputLoss{.loss = std::move(loss), .weight = 1.0, .metrics = std::move(metrics)});
  compile(std::move(optimizer), std::move(one));
}

void Model::compile(std::unique_ptr<Optimizer> optimizer, std::vector<OutputLoss> outputs) {
  const size_t expected = outputs_.empty() ? 1 : outputs_.size();  // a Sequential before build: one
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
      const Layer& l = *layers_.at(static_cast<size_t>(outputs_[k]));
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
  const Shape& shape = output_shapes_.at(static_cast<size_t>(outputs_.at(output)));
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
    if (y == &outputs && logit_layers() < layers_.size() && h.metrics[i]->reads_model_output())
      y = &layers_.back()->forward(outputs, false);
    const Tensor& seen = h.metrics[i]->reads_model_output() ? *y : outputs;
    const int64_t slot = MetricSums::kSlots + static_cast<int64_t>(i);
    EMBER_CHECK(sums.blocks() == heads_.size() && slot < sums.block(k).buffer().numel(), ArgumentError,
                "Model: the metric sums do not fit the compiled losses and metrics (make them with make_sums())");
    h.metrics[i]->accumulate(seen, targets, sums.block(k), slot);
  }
  if (release && y != &outputs) {  // an inference pass: the Softmax's output moves to the model, as
    held_.back() = *y;             // run_layers hands on every layer's, and the layer frees the rest
    acts_.back() = &held_.back();
    layers_.back()->release_buffers();
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

// The k-th input of layer i in a pass over layers [begin, ...) on xs: a model input, or (a stack's
// range from layer begin > 0) what the range starts from, xs[0].
const Tensor& Model::input_of(size_t i, size_t k, std::span<const Tensor> xs, size_t begin) const {
  const int from = nodes_[i].inputs[k];
  if (from < 0) return xs[static_cast<size_t>(-1 - from)];
  if (static_cast<size_t>(from) + 1 == begin) return xs[0];
  return *acts_[static_cast<size_t>(from)];
}

// Layers [begin, end) on xs (the checks of the model's inputs when begin is 0).
const Tensor& Model::run_layers(std::span<const Tensor> xs, bool training, size_t begin, size_t end, const char* what,
                                bool release) {
  require_built(what);
  check_range(begin, end, what);
  EMBER_CHECK(begin == 0 || linear_, ArgumentError,
              std::string("Model::") + what + ": a range from layer " + std::to_string(begin) +
                  " needs a stack (is_linear()); a graph model runs from its input");
  const size_t count = begin == 0 ? input_shapes_.size() : 1;
  EMBER_CHECK(xs.size() == count, ArgumentError,
              std::string("Model::") + what + ": the model takes " + std::to_string(count) + " input" +
                  (count == 1 ? "" : "s") + ", given " + std::to_string(xs.size()));
  for (size_t k = 0; k < count; ++k) {
    const Shape& in = begin == 0 ? input_shapes_[k] : output_shapes_[begin - 1];
    const Tensor& x = xs[k];
    const auto which = [&] { return count == 1 ? std::string("input") : "input '" + input_names_[k] + "'"; };
    EMBER_CHECK(x.rank() == in.rank() + 1 && x.shape().without_batch() == in, ShapeError,
                "Model: expects " + which() + " (N" + batch_shape(in).substr(5) + ", given " + x.shape().str());
    EMBER_CHECK(k == 0 || x.dim(0) == xs[0].dim(0), ShapeError,
                "Model: " + which() + " has " + std::to_string(x.dim(0)) + " rows but '" + input_names_[0] + "' " +
                    std::to_string(xs[0].dim(0)));
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
    for (int from : nodes_[reader].inputs)
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
        layers_[i]->release_buffers();
        layers_[i + 1]->release_buffers();
      }
      ++i;
      continue;
    }
    ran_fused_[i] = kAlone;
    Layer& l = *layers_[i];
    if (l.multi_input()) {
      ins.clear();
      for (size_t k = 0; k < nodes_[i].inputs.size(); ++k) ins.push_back(&input_of(i, k, xs, begin));
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
  const Tensor& last = run_layers({&x, 1}, training, 0, layers_.size(), "forward");
  return outputs_.size() > 1 ? output(0) : last;
}

const Tensor& Model::forward(const std::vector<Tensor>& xs, bool training) {
  const Tensor& last = run_layers(xs, training, 0, layers_.size(), "forward");
  return outputs_.size() > 1 ? output(0) : last;
}

// Without a final Softmax: the loss reads its input.
const Tensor& Model::forward_logits(const Tensor& x, bool training) {
  const Tensor& last = run_layers({&x, 1}, training, 0, logit_layers(), "forward_logits");
  return outputs_.size() > 1 ? output(0) : last;
}

const Tensor& Model::forward_logits(const std::vector<Tensor>& xs, bool training) {
  const Tensor& last = run_layers(xs, training, 0, logit_layers(), "forward_logits");
  return outputs_.size() > 1 ? output(0) : last;
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
  EMBER_CHECK(begin == 0 || linear_, ArgumentError,
              "Model::backward_layers: a range from layer " + std::to_string(begin) + " needs a stack (is_linear())");
  static const Tensor none;  // the input gradient of a fused pair (a first layer's: none)
  const auto split = [&] {   // built only when the check fails
    return "Model::backward_layers: layers [" + std::to_string(begin) + ", " + std::to_string(end) +
           ") split a pair that ran fused";
  };
  const size_t input_slot = layers_.size();  // input k's: input_slot + k
  // A reader of an input that gave no gradient: that input's is not whole.
  std::fill(input_whole_.begin(), input_whole_.end(), true);
  const auto deliver = [&](size_t slot, const Tensor& dx) {
    if (slot >= input_slot && !dx.defined()) input_whole_[slot - input_slot] = false;
    deliver_grad(slot, dx);
  };
  for (size_t i = 0; i < shares_.size(); ++i)
    if (shares_[i] >= 0 && (layers_[i]->num_params() > 0 || !layers_[i]->state_specs().empty())) {
      const auto o = static_cast<size_t>(shares_[i]);
      EMBER_CHECK((i >= begin && i < end) == (o >= begin && o < end), ArgumentError,
                  "Model::backward_layers: layers [" + std::to_string(begin) + ", " + std::to_string(end) +
                      ") hold one call of the shared layer '" + layers_[o]->name() + "' but not another");
    }
  for (size_t i = begin; i < end; ++i) gouts_[i] = nullptr;
  for (size_t k = input_slot; k < gouts_.size(); ++k) gouts_[k] = nullptr;
  if (seeds.size() == 1 && end > begin) gouts_[end - 1] = seeds[0];
  if (seeds.size() > 1)  // an output that other layers read too gets their gradients added
    for (size_t k = 0; k < seeds.size(); ++k) deliver_grad(static_cast<size_t>(outputs_[k]), *seeds[k]);
  // Where layer i's k-th input gradient goes: the model input's slot for an input (input 0's for
  // what a stack's range starts from), else the producing layer's.
  const auto slot_of = [&](size_t i, size_t k) {
    const int from = nodes_[i].inputs[k];
    if (from < 0) return input_slot + static_cast<size_t>(-1 - from);
    return static_cast<size_t>(from) < begin ? input_slot : static_cast<size_t>(from);
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
  // A shared layer's gradient: its first call's plus every later call's (in run order). A range
  // holds every call of a shared layer or none (checked above).
  for (size_t i = begin; i < end; ++i) {
    if (shares_[i] < 0) continue;
    const std::vector<Tensor>& from = layers_[i]->grads();
    const std::vector<Tensor>& into = layers_[static_cast<size_t>(shares_[i])]->grads();
    for (size_t k = 0; k < from.size(); ++k) {
      Tensor sum = into[k];  // a view: the sum lands in the gradient buffer
      detail::elementwise_binary(detail::BinaryOp::Add, into[k], from[k], sum);
    }
  }
  return input_gradient(0);
}

const Tensor& Model::input_gradient(size_t k) const {
  static const Tensor none;
  const size_t slot = layers_.size() + k;
  return slot < gouts_.size() && gouts_[slot] != nullptr && input_whole_[k] ? *gouts_[slot] : none;
}

void Model::backward(const Tensor& dlogits) {
  EMBER_CHECK(outputs_.size() <= 1, ArgumentError,
              "Model::backward: the model has " + std::to_string(outputs_.size()) +
                  " outputs: give a gradient for each (backward({&d0, &d1, ...}))");
  backward_layers(dlogits, 0, logit_layers());
}

void Model::backward(const std::vector<const Tensor*>& doutputs) {
  EMBER_CHECK(doutputs.size() == outputs_.size(), ArgumentError,
              "Model::backward: " + std::to_string(doutputs.size()) + " gradients for a model of " +
                  std::to_string(outputs_.size()) + " outputs");
  for (const Tensor* d : doutputs) EMBER_CHECK(d != nullptr, ArgumentError, "Model::backward: a null gradient");
  backward_pass(doutputs, 0, logit_layers());
}

const Tensor& Model::output(size_t k) const {
  EMBER_CHECK(k < outputs_.size(), ArgumentError,
              "Model::output(" + std::to_string(k) + ") of a model of " + std::to_string(outputs_.size()) + " outputs");
  const Tensor* t = acts_.empty() ? nullptr : acts_[static_cast<size_t>(outputs_[k])];
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
  for (const auto& l : layers_)
    if (!l->rows_independent(training)) return n;
  if (exact) return std::min(n, kExactSliceRows);
  if (micro_batch_auto_) {
    // By default, slices only where a slice's activations outweigh the parameters: a CNN's
    // activations stay in cache (the reference CNN's slice: 2.4M values against 93k weights); an
    // MLP re-reading its weight matrices once per slice loses (the autoencoder's slice: 137k
    // values against 435k weights ran 20% slower sliced: docs/benchmarks.md).
    int64_t per_row = 0;
    for (const Shape& s : output_shapes_) per_row += s.numel();
    if (per_row * cpu_micro_batch_ <= params_.numel()) return n;
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

Tensor rows_of(const Tensor& t, int64_t begin, int64_t rows) {
  const Shape sample = t.shape().without_batch();
  return t.view(begin * sample.numel(), sample.with_batch(rows));
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
  for (size_t k = 0; k < ts.size(); ++k) into[k] = rows_of(ts[k], begin, rows);
  return into;
}

// A sliced batch's targets, checked whole first: a bad one throws before any slice has added to
// the metric sums or the gradients (as the whole batch's loss does).
void Model::check_sliced_targets(std::span<const Tensor> targets, int64_t n) const {
  for (size_t k = 0; k < targets.size() && k < heads_.size(); ++k) {
    const Tensor& t = targets[k];
    EMBER_CHECK(t.rank() >= 1 && t.dim(0) == n && t.layout() == Layout::RowMajor && t.device().is_cpu(), ShapeError,
                "Model: targets must be (" + std::to_string(n) + ", ...) on the cpu for this batch, got " + t.str());
    heads_[k].loss->check_targets(t, output_shapes_[static_cast<size_t>(outputs_[k])]);
  }
}

void Model::require_heads(const char* what) const {
  EMBER_CHECK(heads_.size() == std::max<size_t>(outputs_.size(), 1), Error,
              std::string("Model::") + what + ": compile() a model of " + std::to_string(outputs_.size()) +
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
    const Tensor& out = heads_.size() == 1 ? last : *acts_[static_cast<size_t>(outputs_[k])];
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
  const int64_t count = grads_.numel();
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
    ensure(grad_tree_[at], grads_.shape(), DType::F32, grads_.device());
    grad_tree_[at].copy_from(grads_);
    tree.push(add_into);
  });
  tree.finish(add_into);
  grads_.copy_from(grad_tree_[0]);
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
  EMBER_CHECK(optimizer_ != nullptr, Error, "Sequential: compile() the model with an optimizer first");
  compute_gradients(x, labels, sums);
  apply_gradients();
}

void Model::train_step(const std::vector<Tensor>& xs, const Tensor& labels, MetricSums& sums) {
  EMBER_CHECK(optimizer_ != nullptr, Error, "Sequential: compile() the model with an optimizer first");
  compute_gradients(xs, labels, sums);
  apply_gradients();
}

void Model::train_step(const std::vector<Tensor>& xs, const std::vector<Tensor>& targets, MetricSums& sums) {
  EMBER_CHECK(optimizer_ != nullptr, Error, "Sequential: compile() the model with an optimizer first");
  compute_gradients(xs, targets, sums);
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
  Tensor mask = Tensor::zeros(Shape{params_.numel()}, DType::F32, Device::cpu());  // the padding: 0, never decayed
  for (const ParamView& v : param_views_) {  // twins own no view: their parameters are their first call's
    const Layer& l = *layers_[v.layer];
    const std::string spec = l.param_specs()[v.spec].name;
    bool decay = spec == "kernel";
    for (const auto& [name, on] : decay_overrides_)
      if (name == l.name() + "/" + spec) decay = on;
    if (decay) mask.view(v.padded, Shape{v.n}).fill(1.0f);
  }
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

std::string Model::layer_ref(size_t i, const char* first) const {
  const std::string& name = layers_.at(i)->name();
  int64_t earlier = 0;  // the calls of this layer before this one, in run order
  for (size_t j = 0; j < i; ++j) earlier += layers_[j]->name() == name ? 1 : 0;
  return earlier == 0 ? name + first : name + "[" + std::to_string(earlier) + "]";
}

std::vector<std::pair<std::string, Tensor>> Model::named_params() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t k = 0; k < layers_.size(); ++k) {
    if (is_twin(k)) continue;  // a shared layer's parameters are listed once
    const auto& l = layers_[k];
    const auto specs = l->param_specs();
    for (size_t i = 0; i < specs.size(); ++i) out.emplace_back(l->name() + "/" + specs[i].name, l->params()[i]);
  }
  return out;
}

std::vector<std::pair<std::string, Tensor>> Model::named_state() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t k = 0; k < layers_.size(); ++k) {
    if (is_twin(k)) continue;
    const auto& l = layers_[k];
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
      out += (k ? ", '" : "'") +
             (from < 0 ? input_names_[static_cast<size_t>(-1 - from)] + "[0]"
                       : layer_ref(static_cast<size_t>(from), "[0]")) +
             "[0]'";
    }
    return out + "]";
  };
  os << "Model: \"" << name_ << "\"\n" << rule << "\n";
  if (graph_)
    row({"Layer (type)", "Output Shape", "Param #", "Connected to"});
  else
    row({"Layer (type)", "Output Shape", "Param #"});
  os << dbl << "\n";
  if (graph_)
    for (size_t k = 0; k < input_shapes_.size(); ++k) {
      row({input_names_[k] + " (InputLayer)", "[" + batch_shape(input_shapes_[k]) + "]", "0", "[]"});
      os << "\n";
    }
  for (size_t i = 0; i < layers_.size(); ++i) {
    std::vector<std::string> cells{
        layers_[i]->name() + " (" + layers_[i]->type() + ")", batch_shape(output_shapes_[i]),
        is_twin(i) ? "shared" : with_commas(layers_[i]->num_params() + layers_[i]->num_non_trainable())};
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
