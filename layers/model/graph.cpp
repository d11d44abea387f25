// Symbolic tensors and layer calls: what the functional API builds before a Model exists.
#include "graph.h"

#include "../../core/error.h"
#include "registry.h"

namespace ember {

const Shape& SymbolicTensor::shape() const {
  EMBER_CHECK(node_ != nullptr, ArgumentError, "SymbolicTensor: undefined (made by no Input or layer call)");
  return node_->shape;
}

SymbolicTensor Input(const Shape& sample_shape, std::string name) {
  EMBER_CHECK(
      sample_shape.rank() >= 1 && sample_shape.numel() > 0, ShapeError,
      "Input: a per-sample shape without the batch dimension, such as (1, 28, 28), given " + sample_shape.str());
  auto node = std::make_shared<detail::GraphNode>();
  node->shape = sample_shape;
  node->input_name = std::move(name);
  return SymbolicTensor(std::move(node));
}

SymbolicTensor call_layer(const std::shared_ptr<Layer>& layer, const std::vector<SymbolicTensor>& inputs) {
  EMBER_CHECK(layer != nullptr, ArgumentError, "calling a layer: null layer");
  const std::string who = layer->name().empty() ? layer->type() : "'" + layer->name() + "' (" + layer->type() + ")";
  EMBER_CHECK(!inputs.empty(), ArgumentError, "calling " + who + ": no inputs");
  EMBER_CHECK(layer->owner().expired(), ArgumentError,
              "calling " + who + ": it belongs to a built model already (call it before building a model of it)");
  std::vector<Shape> shapes;
  auto node = std::make_shared<detail::GraphNode>();
  for (size_t i = 0; i < inputs.size(); ++i) {
    EMBER_CHECK(inputs[i].defined(), ArgumentError,
                "calling " + who + ": input " + std::to_string(i) + " is an undefined SymbolicTensor");
    shapes.push_back(inputs[i].shape());
    node->inputs.push_back(inputs[i].node());
  }
  // A later call: a twin from the registry, built for this call's inputs; its parameters and
  // state must have the first call's shapes (they are the first call's).
  std::shared_ptr<Layer> runs = layer;
  if (layer->calls() > 0) {
    try {
      runs = make_layer(layer->type(), layer->config());
    } catch (const ArgumentError& e) {
      throw ArgumentError("calling " + who +
                          " again (sharing its weights) needs a twin from the layer registry: " + e.what());
    }
    node->shares = layer;
  }
  try {
    node->shape = runs->multi_input() || shapes.size() != 1 ? runs->build_inputs(shapes) : runs->build(shapes[0]);
  } catch (const ShapeError& e) {
    throw ShapeError("calling " + who + ": " + e.what());
  }
  if (node->shares) {
    const auto same = [](const auto& a, const auto& b) {
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i)
        if (!(a[i].shape == b[i].shape)) return false;
      return true;
    };
    const auto listed = [](const auto& specs) {
      std::string out;
      for (const auto& sp : specs) out += (out.empty() ? "" : ", ") + sp.name + " " + sp.shape.str();
      return out.empty() ? std::string("none") : out;
    };
    EMBER_CHECK(same(runs->param_specs(), layer->param_specs()) && same(runs->state_specs(), layer->state_specs()),
                ShapeError,
                "calling " + who + " again: on these inputs it would need parameters " + listed(runs->param_specs()) +
                    " but it shares its first call's " + listed(layer->param_specs()));
  }
  node->layer = runs;
  layer->note_call();
  if (runs != layer) runs->note_call();  // a twin called again (a nested model's) twins again
  return SymbolicTensor(std::move(node));
}

namespace {
template <class L, class... Args>
SymbolicTensor merge(const std::vector<SymbolicTensor>& xs, Args&&... args) {
  return call_layer(std::make_shared<L>(std::forward<Args>(args)...), xs);
}
}  // namespace

SymbolicTensor add(const std::vector<SymbolicTensor>& xs) { return merge<Add>(xs); }
SymbolicTensor subtract(const SymbolicTensor& a, const SymbolicTensor& b) { return merge<Subtract>({a, b}); }
SymbolicTensor multiply(const std::vector<SymbolicTensor>& xs) { return merge<Multiply>(xs); }
SymbolicTensor average(const std::vector<SymbolicTensor>& xs) { return merge<Average>(xs); }
SymbolicTensor maximum(const std::vector<SymbolicTensor>& xs) { return merge<Maximum>(xs); }
SymbolicTensor concatenate(const std::vector<SymbolicTensor>& xs, int axis) { return merge<Concatenate>(xs, axis); }

}  // namespace ember
