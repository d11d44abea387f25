// A model's flat buffers: every owned parameter in one f32 buffer, its gradient in another of the
// same layout, the non-trainable state (moving statistics first, the region replicas average,
// then counters) in a third, and the twins' own gradients. Each view starts on a
// Model::kViewAlignment boundary; the padding stays zero. The layers hold views into the buffers
// (bind). Knows the topology, the layers and Model::aligned_view; Model owns one.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../../core/tensor.h"
#include "../../optim/optimizer.h"
#include "topology.h"

namespace ember::detail {

class ParamArena {
 public:
  /// The layout of the topology's parameters and state (twins own none), zero buffers on the CPU,
  /// bound to the layers.
  void allocate(const Topology& topo);
  /// (Re)binds every layer's parameter, gradient and state views into the buffers; a twin's into
  /// its first call's parameters and state, with gradients of its own (twin_grads).
  void bind(const Topology& topo);
  /// The buffers on `device` (parameters and state copied, gradients zero), bound again.
  void to(Device device, const Topology& topo);

  /// A buffer of params' layout without its padding (num_params values: what a checkpoint
  /// stores), and back. ShapeError for a buffer of another size.
  ///@{
  Tensor pack(const Tensor& padded) const;
  Tensor unpack(const Tensor& packed) const;
  ///@}
  Tensor averaged_state() const;  ///< the region of `state` that replicas average (a view)
  /// Freezing: the parts of params (and grads) that hold the trainable layers' parameters, adjacent
  /// views merged (padding included), in buffer order; nullopt when every layer trains. The layers'
  /// trainable flags must be synchronised (Topology::sync_trainable).
  std::optional<std::vector<Optimizer::Span>> trainable_spans(const Topology& topo) const;
  /// Per parameter element, 1 where weight decay applies: every "kernel", "..._kernel" and
  /// "embeddings" (Embedding's and PositionEmbedding's tables), unless a switch of
  /// `overrides` (in call order, the last one winning) says otherwise; on `device`.
  Tensor decay_mask(const Topology& topo, const std::vector<std::pair<std::string, bool>>& overrides,
                    Device device) const;

  Tensor params, grads, state;    ///< the flat buffers (see above)
  int64_t num_params = 0;         ///< parameter values, padding not counted
  int64_t num_non_trainable = 0;  ///< averaged state values, padding not counted

 private:
  // Where each owned parameter view lies, in buffer order (twins own none).
  struct View {
    size_t layer, spec;  // topo.layers[layer]->param_specs()[spec]
    int64_t padded;      // offset in params / grads (kViewAlignment-aligned)
    int64_t packed;      // offset in the packed layout (checkpoints: one value after another)
    int64_t n;           // values
  };
  std::vector<View> views_;
  int64_t averaged_numel_ = 0;  // the averaged region of state, padding included
  Tensor twin_grads_;           // the twins' own gradients, added to their first calls' after backward
};

}  // namespace ember::detail
