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

}  // namespace ember
