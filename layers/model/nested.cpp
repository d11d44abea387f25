// A model used as a layer of another (Model::operator()): its layer calls become part of the
// graph being built, named within it; a later call twins them.
#include <map>

#include "../../core/error.h"
#include "model.h"
#include "topology.h"

namespace ember {

SymbolicTensor Model::operator()(const SymbolicTensor& x) {
  std::vector<SymbolicTensor> out = (*this)(std::vector<SymbolicTensor>{x});
  EMBER_CHECK(out.size() == 1, ArgumentError,
              "calling model '" + name_ + "': it has " + std::to_string(out.size()) +
                  " outputs: call it with a list to get each");
  return out[0];
}

std::vector<SymbolicTensor> Model::operator()(const std::vector<SymbolicTensor>& xs) {
  const std::string who = "calling model '" + name_ + "'";
  if (built()) {  // a built model's layers, taken over by the model being made (model.h)
    require_built("operator()");
    EMBER_CHECK(nested_calls_ == 0 && graph_calls_.empty(), ArgumentError,
                who + ": a built model is called once (its layers join one new model)");
    EMBER_CHECK(xs.size() == topo_->input_shapes.size(), ArgumentError,
                who + ": it takes " + std::to_string(topo_->input_shapes.size()) + " inputs, given " +
                    std::to_string(xs.size()));
    for (size_t k = 0; k < xs.size(); ++k)
      EMBER_CHECK(xs[k].defined() && xs[k].shape() == topo_->input_shapes[k], ShapeError,
                  who + ": its input " + std::to_string(k) + " is " + topo_->input_shapes[k].str() +
                      (xs[k].defined() ? ", given " + xs[k].shape().str() : ", given an undefined one"));
    const std::vector<SymbolicTensor> calls = built_calls(xs);
    ++nested_calls_;
    std::vector<SymbolicTensor> out;
    for (int o : topo_->outputs) out.push_back(calls[static_cast<size_t>(o)]);
    return out;
  }
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

// The layer calls of this built model on xs: these layer objects, with their inputs mapped.
std::vector<SymbolicTensor> Model::built_calls(const std::vector<SymbolicTensor>& xs) const {
  std::vector<SymbolicTensor> mapped(topo_->layers.size());
  for (size_t i = 0; i < topo_->layers.size(); ++i) {
    auto node = std::make_shared<detail::GraphNode>();
    node->layer = topo_->layers[i];
    for (int from : topo_->nodes[i].inputs)
      node->inputs.push_back(from < 0 ? xs[static_cast<size_t>(-1 - from)].node()
                                      : mapped[static_cast<size_t>(from)].node());
    node->shape = topo_->output_shapes[i];
    if (topo_->shares[i] >= 0) node->shares = topo_->layers[static_cast<size_t>(topo_->shares[i])];
    node->adopt = true;
    node->adopt_from = identity_;
    mapped[i] = SymbolicTensor(std::move(node));
  }
  return mapped;
}

SymbolicTensor Model::input(size_t k) {
  require_built("input");
  EMBER_CHECK(k < topo_->input_shapes.size(), ArgumentError,
              "Model::input: the model has " + std::to_string(topo_->input_shapes.size()) + " inputs, asked for " +
                  std::to_string(k));
  if (graph_inputs_.empty()) {
    EMBER_CHECK(nested_calls_ == 0, ArgumentError,
                "Model::input: the model was called as a layer already (its layers are in that graph)");
    for (size_t j = 0; j < topo_->input_shapes.size(); ++j)
      graph_inputs_.push_back(Input(topo_->input_shapes[j], topo_->input_names[j]));
    graph_calls_ = built_calls(graph_inputs_);
  }
  return graph_inputs_[k];
}

size_t Model::layer_index(const std::string& name, const char* what) const {
  std::string names;
  for (size_t i = 0; i < topo_->layers.size(); ++i) {
    if (topo_->layer_ref(i) == name) return i;
    names += (i ? ", " : "") + topo_->layer_ref(i);
  }
  throw ArgumentError(std::string("Model::") + what + ": model '" + name_ + "' has no layer '" + name + "' (it has " +
                      names + ")");
}

SymbolicTensor Model::layer_output(const std::string& layer) {
  input(0);  // the graph
  return graph_calls_[layer_index(layer, "layer_output")];
}

Layer& Model::get_layer(const std::string& name) {
  require_built("get_layer");
  const size_t i = layer_index(name, "get_layer");
  // A shared layer's first call in run order may be a twin of the object its user holds: that one.
  const int user = i < topo_->name_from.size() ? topo_->name_from[i] : -1;
  return *topo_->layers[user >= 0 ? static_cast<size_t>(user) : i];
}

}  // namespace ember
