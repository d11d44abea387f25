// The graph a model runs (see topology.h).
#include "topology.h"

#include <algorithm>
#include <cctype>
#include <map>

#include "../../core/error.h"

namespace ember::detail {

std::string default_layer_name(const std::string& type, std::map<std::string, int>& counts) {
  std::string base;
  for (size_t i = 0; i < type.size(); ++i) {
    const auto c = static_cast<unsigned char>(type[i]);
    if (i > 0 && std::isupper(c) && std::islower(static_cast<unsigned char>(type[i - 1]))) base += '_';
    base += static_cast<char>(std::tolower(c));
  }
  const int k = counts[base]++;
  return k == 0 ? base : base + "_" + std::to_string(k);
}

namespace {
// Per graph node: its place in the run order, -1 - k for input k, or `visiting` while placed.
using Index = std::map<const GraphNode*, int>;

// The calls the outputs need, in run order: depth first from each output, a call's inputs in
// order (a Sequential's order for a stack).
std::vector<const GraphNode*> run_order(const std::vector<SymbolicTensor>& outputs, Index& index, size_t inputs) {
  const int visiting = -2 - static_cast<int>(inputs);
  std::vector<const GraphNode*> order;
  std::vector<std::pair<const GraphNode*, size_t>> stack;
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
        const GraphNode* child = node->inputs[next++].get();
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
  return order;
}
}  // namespace

void Topology::from_symbolic(const std::vector<SymbolicTensor>& ins, const std::vector<SymbolicTensor>& outs) {
  EMBER_CHECK(!ins.empty() && !outs.empty(), ArgumentError,
              "Model: " + std::to_string(ins.size()) + " inputs and " + std::to_string(outs.size()) +
                  " outputs; a model needs at least one of each");
  for (const SymbolicTensor& out : outs)
    EMBER_CHECK(out.node() != nullptr, ArgumentError, "Model: an undefined SymbolicTensor");
  place(ins, outs);
  graph = true;
}

void Topology::place(const std::vector<SymbolicTensor>& ins, const std::vector<SymbolicTensor>& outputs_given) {
  Index index;
  input_names.clear();
  input_shapes.clear();
  for (size_t k = 0; k < ins.size(); ++k) {
    const auto& in = ins[k].node();
    EMBER_CHECK(in != nullptr, ArgumentError, "Model: an undefined SymbolicTensor");
    EMBER_CHECK(in->layer == nullptr, ArgumentError,
                "Model: input " + std::to_string(k) + " must be an Input(), not a layer's output");
    for (const SymbolicTensor& out : outputs_given)
      EMBER_CHECK(out.node() != in, ArgumentError, "Model: an output is an input itself (no layer between)");
    EMBER_CHECK(index.emplace(in.get(), -1 - static_cast<int>(k)).second, ArgumentError,
                "Model: input " + std::to_string(k) + " is given twice");
    input_names.push_back(in->input_name);
    input_shapes.push_back(in->shape);
  }
  const std::vector<const GraphNode*> order = run_order(outputs_given, index, ins.size());
  outputs.clear();
  for (size_t k = 0; k < outputs_given.size(); ++k) {
    const int at = index.at(outputs_given[k].node().get());
    EMBER_CHECK(std::find(outputs.begin(), outputs.end(), at) == outputs.end(), ArgumentError,
                "Model: output " + std::to_string(k) + " is given twice");
    outputs.push_back(at);
  }
  layers.clear();
  adopt.clear();
  adopt_from.clear();
  nodes.assign(order.size(), Node{});
  linear = ins.size() == 1 && outputs_given.size() == 1;
  std::vector<bool> used(ins.size(), false);
  for (size_t i = 0; i < order.size(); ++i) {
    const auto same = std::find_if(layers.begin(), layers.end(), [&](const auto& l) { return l == order[i]->layer; });
    EMBER_CHECK(same == layers.end(), Error, "Model: one layer object runs two calls (graph.h makes twins)");
    layers.push_back(order[i]->layer);
    adopt.push_back(order[i]->adopt);
    adopt_from.push_back(order[i]->adopt_from);
    output_shapes.push_back(order[i]->shape);
    for (const auto& child : order[i]->inputs) {
      const int from = index.at(child.get());
      nodes[i].inputs.push_back(from);
      if (from >= 0) nodes[static_cast<size_t>(from)].consumers.push_back(static_cast<int>(i));
      if (from < 0) used[static_cast<size_t>(-1 - from)] = true;
    }
    linear = linear && nodes[i].inputs.size() == 1 && nodes[i].inputs[0] == static_cast<int>(i) - 1;
  }
  find_owners(order);
  for (size_t k = 0; k < ins.size(); ++k)
    EMBER_CHECK(used[k], ArgumentError,
                "Model: input " + std::to_string(k) +
                    (input_names[k].empty() ? std::string() : " '" + input_names[k] + "'") +
                    " does not reach an output (an input the model would not read)");
}

void Topology::find_owners(const std::vector<const GraphNode*>& order) {
  // A later call's twin uses the parameters of the layer its first call ran, which must be here.
  shares.assign(layers.size(), -1);
  for (size_t i = 0; i < order.size(); ++i) {
    if (!order[i]->shares) continue;
    const auto first = std::find(layers.begin(), layers.end(), order[i]->shares);
    EMBER_CHECK(first != layers.end(), ArgumentError,
                "Model: a " + order[i]->shares->type() + " layer" +
                    (order[i]->shares->name().empty() ? std::string() : " '" + order[i]->shares->name() + "'") +
                    " is called here again, sharing its weights, but its first call is not part of the model");
    shares[i] = static_cast<int>(first - layers.begin());
  }
  // Whichever call of a shared layer runs first owns the parameters (their place in the flat
  // buffers is its place in the run order, as load_model recreates it from the file's order); the
  // others, the first call's object included, are its twins. The owner takes the layer's name
  // (adopt_names, when the model is built or nested: the user may name the layer until then). A
  // twin of a twin (a nested model's shared layer called again) belongs to the same root.
  for (size_t i = 0; i < shares.size(); ++i)
    while (shares[i] >= 0 && shares[static_cast<size_t>(shares[i])] >= 0)
      shares[i] = shares[static_cast<size_t>(shares[i])];
  std::vector<int> owner(layers.size());
  for (size_t i = 0; i < owner.size(); ++i) owner[i] = static_cast<int>(i);
  for (size_t i = 0; i < shares.size(); ++i)
    if (shares[i] >= 0)
      owner[static_cast<size_t>(shares[i])] = std::min(owner[static_cast<size_t>(shares[i])], static_cast<int>(i));
  name_from.assign(layers.size(), -1);
  for (size_t i = 0; i < shares.size(); ++i) {
    const int root = shares[i] >= 0 ? shares[i] : static_cast<int>(i);
    const int o = owner[static_cast<size_t>(root)];
    if (static_cast<int>(i) == root && o != root) name_from[static_cast<size_t>(o)] = root;
    shares[i] = static_cast<int>(i) == o ? -1 : o;
  }
}

void Topology::line() {
  nodes.assign(layers.size(), Node{});
  for (size_t i = 0; i < layers.size(); ++i) {
    nodes[i].inputs = {static_cast<int>(i) - 1};
    if (i + 1 < layers.size()) nodes[i].consumers = {static_cast<int>(i) + 1};
  }
  linear = true;
  shares.assign(layers.size(), -1);
}

void Topology::sync_trainable() {
  for (size_t i = 0; i < layers.size(); ++i) {
    if (shares[i] >= 0) continue;
    const int user = i < name_from.size() && name_from[i] >= 0 ? name_from[i] : static_cast<int>(i);
    layers[i]->set_trainable(layers[static_cast<size_t>(user)]->trainable());
  }
  for (size_t i = 0; i < layers.size(); ++i)
    if (shares[i] >= 0) layers[i]->set_trainable(layers[static_cast<size_t>(shares[i])]->trainable());
}

void Topology::adopt_names() {
  for (size_t i = 0; i < name_from.size(); ++i)
    if (name_from[i] >= 0 && !layers[static_cast<size_t>(name_from[i])]->name().empty())
      layers[i]->set_name(layers[static_cast<size_t>(name_from[i])]->name());
}

void Topology::name_layers() {
  adopt_names();
  std::map<std::string, int> counts;
  std::vector<std::string> used, named;  // named: what the named layers (a loaded model's, the user's) hold
  for (size_t i = 0; i < layers.size(); ++i)
    if (shares[i] < 0 && !layers[i]->name().empty()) named.push_back(layers[i]->name());
  for (size_t i = 0; i < layers.size(); ++i) {
    Layer& l = *layers[i];
    if (shares[i] >= 0) continue;  // a twin: its first call's name, below
    if (l.name().empty()) {        // Keras' default, skipping the names taken ("dense" taken: "dense_1", ...)
      std::string n;
      do n = default_layer_name(l.type(), counts);
      while (std::find(named.begin(), named.end(), n) != named.end());
      l.set_name(n);
    }
    EMBER_CHECK(std::find(used.begin(), used.end(), l.name()) == used.end(), ArgumentError,
                "Model: two layers are named '" + l.name() + "'");
    EMBER_CHECK(l.name().find('[') == std::string::npos, ArgumentError,
                "Model: layer name '" + l.name() + "' has a '[' (\"name[k]\" names a shared layer's later calls)");
    used.push_back(l.name());
  }
  for (size_t i = 0; i < layers.size(); ++i)
    if (shares[i] >= 0) layers[i]->set_name(layers[static_cast<size_t>(shares[i])]->name());
  // Unnamed inputs: "input_1", "input_2", ... (Keras' names), skipping names already taken.
  int next_input = 1;
  for (std::string& n : input_names) {
    if (!n.empty()) continue;
    const auto taken = [&](const std::string& c) {
      return std::find(input_names.begin(), input_names.end(), c) != input_names.end();
    };
    while (taken("input_" + std::to_string(next_input))) ++next_input;
    n = "input_" + std::to_string(next_input++);
  }
  for (size_t k = 0; k < input_names.size(); ++k) {
    EMBER_CHECK(std::find(used.begin(), used.end(), input_names[k]) == used.end(), ArgumentError,
                "Model: a layer is named '" + input_names[k] + "' like an input");
    for (size_t j = 0; j < k; ++j)
      EMBER_CHECK(input_names[j] != input_names[k], ArgumentError,
                  "Model: two inputs are named '" + input_names[k] + "'");
  }
}

std::string Topology::layer_ref(size_t i, const char* first) const {
  const std::string& name = layers.at(i)->name();
  int64_t earlier = 0;  // the calls of this layer before this one, in run order
  for (size_t j = 0; j < i; ++j) earlier += layers[j]->name() == name ? 1 : 0;
  return earlier == 0 ? name + first : name + "[" + std::to_string(earlier) + "]";
}

bool Topology::is_output(size_t i) const {
  return std::find(outputs.begin(), outputs.end(), static_cast<int>(i)) != outputs.end();
}

}  // namespace ember::detail
