// A model's flat buffers (see params.h).
#include "params.h"

#include "../../core/error.h"
#include "model.h"

namespace ember::detail {

namespace {
constexpr int64_t aligned(int64_t n) { return Model::aligned_view(n); }
}  // namespace

void ParamArena::allocate(const Topology& topo) {
  int64_t total = 0;  // twins own nothing: their first call's parameters and state are theirs
  num_params = 0;
  views_.clear();
  for (size_t i = 0; i < topo.layers.size(); ++i) {
    if (topo.shares[i] >= 0) continue;
    const auto specs = topo.layers[i]->param_specs();
    for (size_t k = 0; k < specs.size(); ++k) {
      const int64_t n = specs[k].shape.numel();
      views_.push_back({i, k, total, num_params, n});
      total += aligned(n);
      num_params += n;
    }
  }
  params = Tensor::zeros(Shape{total}, DType::F32, Device::cpu());  // initialised there, then moved
  grads = Tensor::zeros(Shape{total}, DType::F32, Device::cpu());
  int64_t state_total = 0;
  averaged_numel_ = 0;
  num_non_trainable = 0;
  for (size_t i = 0; i < topo.layers.size(); ++i)
    for (const auto& spec : topo.layers[i]->state_specs()) {
      if (topo.shares[i] >= 0) break;
      state_total += aligned(spec.shape.numel());
      if (spec.averaged) {
        averaged_numel_ += aligned(spec.shape.numel());
        num_non_trainable += spec.shape.numel();
      }
    }
  state = Tensor::zeros(Shape{state_total}, DType::F32, Device::cpu());
  bind(topo);
}

std::optional<std::vector<Optimizer::Span>> ParamArena::trainable_spans(const Topology& topo) const {
  std::vector<Optimizer::Span> spans;
  bool all = true;
  for (const View& v : views_) {
    if (!topo.layers[v.layer]->trainable()) {
      all = false;
      continue;
    }
    if (!spans.empty() && spans.back().offset + spans.back().count == v.padded)
      spans.back().count += aligned(v.n);
    else
      spans.push_back({v.padded, aligned(v.n)});
  }
  if (all) return std::nullopt;
  return spans;
}

void ParamArena::bind(const Topology& topo) {
  // State: the averaged specs of every layer first, then the others (one averaged region).
  int64_t averaged = 0, other = averaged_numel_;
  auto view = views_.begin();
  for (size_t i = 0; i < topo.layers.size(); ++i) {
    if (topo.shares[i] >= 0) continue;
    Layer& l = *topo.layers[i];
    std::vector<Tensor> p, g, st;
    for (const auto& spec : l.param_specs()) {
      EMBER_CHECK(view != views_.end() && view->layer == i, Error,
                  "Model: the parameter views do not match the layers (build() again)");
      p.push_back(params.view(view->padded, spec.shape));
      g.push_back(grads.view(view->padded, spec.shape));
      ++view;
    }
    l.bind(std::move(p), std::move(g));
    for (const auto& spec : l.state_specs()) {
      int64_t& at = spec.averaged ? averaged : other;
      st.push_back(state.view(at, spec.shape));
      at += aligned(spec.shape.numel());
    }
    l.bind_state(std::move(st));
  }
  // Twins: their first call's parameters and state, gradients of their own (added to the first
  // call's after every backward pass).
  int64_t twin_total = 0;
  for (size_t i = 0; i < topo.layers.size(); ++i)
    if (topo.shares[i] >= 0)
      for (const auto& spec : topo.layers[i]->param_specs()) twin_total += aligned(spec.shape.numel());
  twin_grads_ = twin_total > 0 ? Tensor::zeros(Shape{twin_total}, DType::F32, params.device()) : Tensor();
  int64_t at = 0;
  for (size_t i = 0; i < topo.layers.size(); ++i) {
    if (topo.shares[i] < 0) continue;
    const Layer& first = *topo.layers[static_cast<size_t>(topo.shares[i])];
    std::vector<Tensor> g;
    for (const auto& spec : topo.layers[i]->param_specs()) {
      g.push_back(twin_grads_.view(at, spec.shape));
      at += aligned(spec.shape.numel());
    }
    topo.layers[i]->bind(first.params(), std::move(g));
    topo.layers[i]->bind_state(first.state());
  }
}

void ParamArena::to(Device device, const Topology& topo) {
  params = params.to(device);
  grads = Tensor::zeros(grads.shape(), DType::F32, device);
  state = state.to(device);
  bind(topo);
}

Tensor ParamArena::pack(const Tensor& padded) const {
  EMBER_CHECK(padded.numel() == params.numel() && padded.dtype() == DType::F32, ShapeError,
              "Model::pack_params_layout: expects an f32 buffer of " + std::to_string(params.numel()) +
                  " values (params()' layout), got " + padded.str());
  Tensor packed = Tensor::empty(Shape{num_params}, DType::F32, padded.device());
  Tensor src = padded.reshape(Shape{padded.numel()});
  for (const View& v : views_) packed.view(v.packed, Shape{v.n}).copy_from(src.view(v.padded, Shape{v.n}));
  return packed;
}

Tensor ParamArena::unpack(const Tensor& packed) const {
  EMBER_CHECK(packed.numel() == num_params && packed.dtype() == DType::F32, ShapeError,
              "Model::unpack_params_layout: expects an f32 buffer of " + std::to_string(num_params) +
                  " values (one per parameter), got " + packed.str());
  Tensor padded = Tensor::zeros(Shape{params.numel()}, DType::F32, packed.device());
  Tensor src = packed.reshape(Shape{packed.numel()});
  for (const View& v : views_) padded.view(v.padded, Shape{v.n}).copy_from(src.view(v.packed, Shape{v.n}));
  return padded;
}

Tensor ParamArena::averaged_state() const { return state.view(0, Shape{averaged_numel_}); }

Tensor ParamArena::decay_mask(const Topology& topo, const std::vector<std::pair<std::string, bool>>& overrides,
                              Device device) const {
  Tensor mask = Tensor::zeros(Shape{params.numel()}, DType::F32, Device::cpu());  // the padding: 0, never decayed
  for (const View& v : views_) {  // twins own no view: their parameters are their first call's
    const Layer& l = *topo.layers[v.layer];
    const std::string spec = l.param_specs()[v.spec].name;
    bool decay = spec == "kernel" || spec == "embeddings" ||
                 (spec.size() > 7 && spec.compare(spec.size() - 7, 7, "_kernel") == 0);
    for (const auto& [name, on] : overrides)
      if (name == l.name() + "/" + spec) decay = on;
    if (decay) mask.view(v.padded, Shape{v.n}).fill(1.0f);
  }
  return device.is_cpu() ? mask : mask.to(device);
}

}  // namespace ember::detail
