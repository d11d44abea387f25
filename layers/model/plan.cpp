// A model's execution plan (see plan.h).
#include "plan.h"

#include <algorithm>

#include "conv_pool_block.h"

namespace ember::detail {

namespace {

// A layer call on its own: the layer's forward and backward, one input or several.
class LayerStep final : public Step {
 public:
  LayerStep(Layer& layer, size_t i) : Step(i, i), layer_(layer) {}
  const Tensor& forward(const std::vector<const Tensor*>& inputs, bool training) override {
    return layer_.multi_input() ? layer_.forward_inputs(inputs, training) : layer_.forward(*inputs[0], training);
  }
  std::span<const Tensor> backward(const Tensor& dy) override {
    if (layer_.multi_input()) return layer_.backward_inputs(dy);
    return {&layer_.backward(dy), 1};
  }
  void release_buffers() override { layer_.release_buffers(); }
  std::string kernel_info(int64_t batch, Device device) const override { return layer_.kernel_info(batch, device); }

 private:
  Layer& layer_;
};

// Conv2D -> MaxPool2D: the pool the convolution's only consumer and next in the run order, the
// convolution not an output (its own output never exists); conv_pool_block.h decides the rest.
std::unique_ptr<Step> conv_pool(const Topology& topo, size_t i) {
  if (i + 1 >= topo.layers.size() || topo.is_output(i) ||
      topo.nodes[i].consumers != std::vector<int>{static_cast<int>(i) + 1} ||
      topo.nodes[i + 1].inputs != std::vector<int>{static_cast<int>(i)})
    return nullptr;
  return ConvPoolBlock::make(*topo.layers[i], *topo.layers[i + 1], i);
}

// The rewrites, tried in order at each layer; the first that fits there wins.
constexpr std::unique_ptr<Step> (*kRewrites[])(const Topology&, size_t) = {conv_pool};

}  // namespace

void ExecutionPlan::make(Topology& topo) {
  const size_t n = topo.layers.size();
  // What freezing decided for another model's passes (an adopted layer) is decided again per pass.
  for (size_t i = 0; i < n; ++i) topo.layers[i]->set_nothing_trains_below(false);
  // Nobody consumes d(loss)/d(input): a layer that reads only the input computes no input gradient.
  for (size_t i = 0; i < n; ++i)
    if (std::all_of(topo.nodes[i].inputs.begin(), topo.nodes[i].inputs.end(), [](int from) { return from < 0; }))
      topo.layers[i]->set_needs_input_grad(false);
  // ReLU-backward fusion: a layer whose output goes through a ReLU into one consumer that applies
  // the mask in its own backward. An output's own gradient (from its loss) is not premasked.
  for (size_t i = 0; i < n; ++i) {
    if (topo.nodes[i].consumers.size() != 1 || topo.is_output(i)) continue;
    Layer& next = *topo.layers[static_cast<size_t>(topo.nodes[i].consumers[0])];
    if (topo.layers[i]->relu_output() && !next.multi_input() && next.fuse_input_relu_mask())
      topo.layers[i]->set_output_grad_premasked(true);
  }
  layer_steps_.clear();
  rewrites_.clear();
  for (size_t i = 0; i < n; ++i) {
    layer_steps_.push_back(std::make_unique<LayerStep>(*topo.layers[i], i));
    std::unique_ptr<Step> fused;
    for (const auto& rule : kRewrites)
      if (!fused) fused = rule(topo, i);
    rewrites_.push_back(std::move(fused));
  }
  last_reader_.assign(n, 0);
  for (size_t i = 0; i < n; ++i)
    for (int c : topo.nodes[i].consumers) last_reader_[i] = std::max(last_reader_[i], static_cast<size_t>(c));
  for (int o : topo.outputs) last_reader_[static_cast<size_t>(o)] = SIZE_MAX;
}

void ExecutionPlan::steps(size_t begin, size_t end, bool fuse, std::vector<Step*>& out) const {
  out.clear();
  for (size_t i = begin; i < end; ++i) {
    Step* fused = fuse ? rewrites_[i].get() : nullptr;
    if (fused != nullptr && fused->last() < end && fused->usable()) {
      out.push_back(fused);
      i = fused->last();
    } else {
      out.push_back(layer_steps_[i].get());
    }
  }
}

const Step* ExecutionPlan::rewrite_at(size_t i, bool fuse) const {
  const Step* fused = fuse && i < rewrites_.size() ? rewrites_[i].get() : nullptr;
  return fused != nullptr && fused->usable() ? fused : nullptr;
}

}  // namespace ember::detail
