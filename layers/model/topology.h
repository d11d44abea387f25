// The graph a model runs: its layer calls in run order, what each is called on and who reads its
// output, the model's inputs and outputs, the per-sample shapes, the twins (a shared layer's later
// calls) and the layers' names. Made from symbolic tensors (from_symbolic) or, for a Sequential,
// as a line of the layers given (line); named at build (name_layers). Knows graph.h and layer.h
// only; Model owns one.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../../core/shape.h"
#include "../layer.h"
#include "graph.h"

namespace ember::detail {

struct Topology {
  /// Per layer call, in run order: what it is called on (an index into `layers`, or -1 - k for
  /// the model's input k) and the calls reading its output.
  struct Node {
    std::vector<int> inputs;
    std::vector<int> consumers;
  };
  std::vector<std::shared_ptr<Layer>> layers;  ///< in run order (a graph's topological order)
  std::vector<Node> nodes;                     ///< per layer
  std::vector<int> outputs;                    ///< the output layers, in output order
  std::vector<std::string> input_names{""};    ///< per model input ("" until named at build)
  std::vector<Shape> input_shapes{Shape{}};    ///< per model input, per sample
  std::vector<Shape> output_shapes;            ///< per layer, per sample
  std::vector<int> shares;                     ///< per layer: the layer whose parameters and state a twin uses, or -1
  /// per layer: a built model's call, adopted with its values (empty: none), and from which model
  std::vector<bool> adopt;
  std::vector<std::weak_ptr<const void>> adopt_from;  ///< per layer: that model's identity
  std::vector<int> name_from;  ///< per layer: the layer whose name an owner takes (the user's object), or -1
  bool graph = false;          ///< made from symbolic tensors (not a Sequential)
  bool linear = true;          ///< each layer takes the one before it

  /// The calls from `ins` to `outs` in a topological order (depth first from each output,
  /// inputs in order), wired; a shared layer's first call in run order owns its parameters, the
  /// others are its twins. ArgumentError for what Model's constructor refuses.
  void from_symbolic(const std::vector<SymbolicTensor>& ins, const std::vector<SymbolicTensor>& outs);
  /// A Sequential's graph: each layer called on the one before it (the first on the input).
  void line();
  /// The names at build: Keras' defaults ("conv2d", "conv2d_1", ...; skipping the names named layers
  /// hold) for unnamed layers, a twin
  /// its first call's, "input_1", ... for unnamed inputs. ArgumentError for two layers or inputs
  /// of one name, or a '[' in a name.
  void name_layers();
  /// An owner takes the name its user's object was given (see name_from).
  void adopt_names();
  /// The name of call i: the layer's for the first call in run order, "name[1]", "name[2]" ...
  /// for the later ones, `first` appended to the first.
  std::string layer_ref(size_t i, const char* first = "") const;
  bool is_output(size_t i) const;  ///< Whether layer i is one of the outputs.
  /// Freezing: every call of a shared layer takes the trainable flag of the object its user holds
  /// (the owner's, or the object whose name it took).
  void sync_trainable();
  bool is_twin(size_t i) const { return i < shares.size() && shares[i] >= 0; }

 private:
  void place(const std::vector<SymbolicTensor>& ins, const std::vector<SymbolicTensor>& outs);
  void find_owners(const std::vector<const GraphNode*>& order);
};

/// Keras' default name of a layer of `type`: the type in snake case ("BatchNormalization" ->
/// "batch_normalization", "Conv2D" -> "conv2d", "ReLU" -> "re_lu"), numbered from the second of
/// a kind (`counts` per base name).
std::string default_layer_name(const std::string& type, std::map<std::string, int>& counts);

}  // namespace ember::detail
