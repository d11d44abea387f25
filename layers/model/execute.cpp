// The forward and backward passes (see execute.h).
#include "execute.h"

#include <algorithm>
#include <string>

#include "../../core/error.h"
#include "../ops/elementwise.h"

namespace ember::detail {

void Executor::plan(Topology& topo) {
  topo_ = &topo;
  plan_.make(topo);
  const size_t n = topo.layers.size(), slots = n + topo.input_shapes.size();  // the layers' outputs, then the inputs
  ran_.clear();
  for (size_t i = 0; i < n; ++i) ran_.push_back(&plan_.layer_step(i));
  acts_.assign(n, nullptr);
  held_.assign(n, Tensor());
  holding_ = false;
  gouts_.assign(slots, nullptr);
  gsums_.resize(slots);
  gconv_.resize(slots);
  input_whole_.assign(topo.input_shapes.size(), false);
}

// The k-th input of layer i in a pass over layers [begin, ...) on xs: a model input, or (a stack's
// range from layer begin > 0) what the range starts from, xs[0].
const Tensor& Executor::input_of(size_t i, size_t k, std::span<const Tensor> xs, size_t begin) const {
  const int from = topo_->nodes[i].inputs[k];
  if (from < 0) return xs[static_cast<size_t>(-1 - from)];
  if (static_cast<size_t>(from) + 1 == begin) return xs[0];
  return *acts_[static_cast<size_t>(from)];
}

void Executor::check_inputs(std::span<const Tensor> xs, size_t begin, const char* what, Device device) const {
  const size_t count = begin == 0 ? topo_->input_shapes.size() : 1;
  EMBER_CHECK(xs.size() == count, ArgumentError,
              std::string("Model::") + what + ": the model takes " + std::to_string(count) + " input" +
                  (count == 1 ? "" : "s") + ", given " + std::to_string(xs.size()));
  for (size_t k = 0; k < count; ++k) {
    const Shape& in = begin == 0 ? topo_->input_shapes[k] : topo_->output_shapes[begin - 1];
    const Tensor& x = xs[k];
    const auto which = [&] { return count == 1 ? std::string("input") : "input '" + topo_->input_names[k] + "'"; };
    const auto expected = [&] {  // "(N, 1, 28, 28)"
      std::string s = "(N";
      for (int64_t d : in) s += ", " + std::to_string(d);
      return s + ")";
    };
    EMBER_CHECK(x.rank() == in.rank() + 1 && x.shape().without_batch() == in, ShapeError,
                "Model: expects " + which() + " " + expected() + ", given " + x.shape().str());
    EMBER_CHECK(k == 0 || x.dim(0) == xs[0].dim(0), ShapeError,
                "Model: " + which() + " has " + std::to_string(x.dim(0)) + " rows but '" + topo_->input_names[0] +
                    "' " + std::to_string(xs[0].dim(0)));
    EMBER_CHECK(x.device() == device, DeviceError,
                "Model: the " + which() + " is on " + x.device().str() + " but the model on " + device.str() +
                    ": copy it with to() (nothing migrates silently)");
  }
}

const Tensor& Executor::forward(std::span<const Tensor> xs, bool training, size_t begin, size_t end, const char* what,
                                Device device, bool fuse, bool release) {
  EMBER_CHECK(begin <= end && end <= topo_->layers.size(), ArgumentError,
              std::string("Model::") + what + ": layers [" + std::to_string(begin) + ", " + std::to_string(end) +
                  ") of a model of " + std::to_string(topo_->layers.size()));
  EMBER_CHECK(begin == 0 || topo_->linear, ArgumentError,
              std::string("Model::") + what + ": a range from layer " + std::to_string(begin) +
                  " needs a stack (is_linear()); a graph model runs from its input");
  check_inputs(xs, begin, what, device);
  if (holding_) {  // the last inference pass's outputs: the layers hold this pass's
    for (Tensor& t : held_) t = Tensor();
    holding_ = false;
  }
  holding_ = release;
  if (training) topo_->sync_trainable();  // a frozen BatchNormalization's calls run in inference mode
  plan_.steps(begin, end, fuse, steps_);
  for (Step* s : steps_) {
    inputs_.clear();
    for (size_t k = 0; k < topo_->nodes[s->first()].inputs.size(); ++k)
      inputs_.push_back(&input_of(s->first(), k, xs, begin));
    for (size_t i = s->first(); i < s->last(); ++i) acts_[i] = nullptr;  // inside the step: never exists
    for (size_t i = s->first(); i <= s->last(); ++i) ran_[i] = s;
    acts_[s->last()] = &s->forward(inputs_, training);
    if (release) {
      hand_on(*s);
      s->release_buffers();
    }
  }
  return end > begin ? *acts_[end - 1] : xs[0];
}

// Step s's output moves to held_ (a handle: the storage stays while someone holds it), and an
// input whose last reader s is, is dropped.
void Executor::hand_on(const Step& s) {
  held_[s.last()] = *acts_[s.last()];
  acts_[s.last()] = &held_[s.last()];
  for (int from : topo_->nodes[s.first()].inputs)
    if (from >= 0 && plan_.last_reader()[static_cast<size_t>(from)] == s.first())
      held_[static_cast<size_t>(from)] = Tensor();
}

void Executor::hold(size_t i, const Tensor& y) {
  held_[i] = y;
  acts_[i] = &held_[i];
  topo_->layers[i]->release_buffers();
}

std::span<const Tensor* const> Executor::loss_inputs(const Tensor& last) {
  losses_in_.clear();
  if (topo_->outputs.size() <= 1) {
    losses_in_.push_back(&last);
  } else {
    for (int o : topo_->outputs) losses_in_.push_back(acts_[static_cast<size_t>(o)]);
  }
  return losses_in_;
}

// The first gradient handed to a slot is kept as it is; the next ones are summed into the slot's
// own buffer, in the first one's layout.
void Executor::deliver(size_t slot, const Tensor& dx) {
  const size_t input_slot = topo_->layers.size();
  if (slot >= input_slot && !dx.defined()) input_whole_[slot - input_slot] = false;  // a reader gave none
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

const Tensor& Executor::backward(std::span<const Tensor* const> seeds, size_t begin, size_t end) {
  EMBER_CHECK(begin <= end && end <= topo_->layers.size(), ArgumentError,
              "Model::backward_layers: layers [" + std::to_string(begin) + ", " + std::to_string(end) +
                  ") of a model of " + std::to_string(topo_->layers.size()));
  EMBER_CHECK(begin == 0 || topo_->linear, ArgumentError,
              "Model::backward_layers: a range from layer " + std::to_string(begin) + " needs a stack (is_linear())");
  const auto range = [&] {  // built only when a check fails
    return "Model::backward_layers: layers [" + std::to_string(begin) + ", " + std::to_string(end) + ")";
  };
  std::fill(input_whole_.begin(), input_whole_.end(), true);  // until a reader of an input gives none
  for (size_t i = 0; i < topo_->shares.size(); ++i)
    if (topo_->shares[i] >= 0 && (topo_->layers[i]->num_params() > 0 || !topo_->layers[i]->state_specs().empty())) {
      const auto o = static_cast<size_t>(topo_->shares[i]);
      EMBER_CHECK((i >= begin && i < end) == (o >= begin && o < end), ArgumentError,
                  range() + " hold one call of the shared layer '" + topo_->layers[o]->name() + "' but not another");
    }
  const size_t input_slot = topo_->layers.size();  // input k's: input_slot + k
  for (size_t i = begin; i < end; ++i) gouts_[i] = nullptr;
  for (size_t k = input_slot; k < gouts_.size(); ++k) gouts_[k] = nullptr;
  if (seeds.size() == 1 && end > begin) gouts_[end - 1] = seeds[0];
  if (seeds.size() > 1)  // an output that other layers read too gets their gradients added
    for (size_t k = 0; k < seeds.size(); ++k) deliver(static_cast<size_t>(topo_->outputs[k]), *seeds[k]);
  // Where layer i's k-th input gradient goes: the model input's slot for an input (input 0's for
  // what a stack's range starts from), else the producing layer's.
  const auto slot_of = [&](size_t i, size_t k) {
    const int from = topo_->nodes[i].inputs[k];
    if (from < 0) return input_slot + static_cast<size_t>(-1 - from);
    return static_cast<size_t>(from) < begin ? input_slot : static_cast<size_t>(from);
  };
  mark_gradient_flow();
  for (size_t i = end; i-- > begin;) {
    if (!flows_[i]) {  // nothing at or before this step trains: it does not run
      i = ran_[i]->first();
      continue;
    }
    const Tensor* g = gouts_[i];
    EMBER_CHECK(g != nullptr, Error,
                "Model::backward_layers: no gradient reached layer '" + topo_->layers[i]->name() +
                    "' (not on a path to the output?)");
    Step& s = *ran_[i];
    EMBER_CHECK(s.last() == i && s.first() >= begin, ArgumentError, range() + " split a pair that ran fused");
    const std::span<const Tensor> dxs = s.backward(*g);
    for (size_t k = 0; k < dxs.size(); ++k) deliver(slot_of(s.first(), k), dxs[k]);
    i = s.first();
  }
  add_twin_gradients(begin, end);
  return input_gradient(0);
}

void Executor::mark_gradient_flow() {
  topo_->sync_trainable();
  const size_t n = topo_->layers.size();
  // A model input wants its gradient when a layer reading only model inputs was asked for one
  // (set_needs_input_grad(true) after build: the plan turned it off).
  std::vector<bool> input_wants(topo_->input_shapes.size(), false);
  for (size_t i = 0; i < n; ++i) {
    const auto& ins = topo_->nodes[i].inputs;
    if (!std::all_of(ins.begin(), ins.end(), [](int from) { return from < 0; })) continue;
    topo_->layers[i]->set_nothing_trains_below(false);  // its own switch answers
    if (topo_->layers[i]->needs_input_grad())
      for (int from : ins) input_wants[static_cast<size_t>(-1 - from)] = true;
  }
  flows_.assign(n, false);
  for (size_t i = 0; i < n; ++i) {  // run order: producers first
    Layer& l = *topo_->layers[i];
    bool below = false, input_only = true;
    for (int from : topo_->nodes[i].inputs) {
      input_only = input_only && from < 0;
      below = below || (from < 0 ? static_cast<bool>(input_wants[static_cast<size_t>(-1 - from)])
                                 : static_cast<bool>(flows_[static_cast<size_t>(from)]));
    }
    if (!input_only) l.set_nothing_trains_below(!below);  // an input reader's own switch answers
    flows_[i] = below || (l.trainable() && l.num_params() > 0);
  }
}

// A shared layer's gradient: its first call's plus every later call's (in run order). A range holds
// every call of a shared layer or none (checked by backward). A frozen layer's gradients are zero
// (the layers that compute them anyway wrote them).
void Executor::add_twin_gradients(size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i)
    if (topo_->shares[i] < 0 && !topo_->layers[i]->trainable())
      for (const Tensor& g : topo_->layers[i]->grads()) Tensor(g).fill(0.0f);
  for (size_t i = begin; i < end; ++i) {
    if (topo_->shares[i] < 0 || !topo_->layers[i]->trainable()) continue;
    const std::vector<Tensor>& from = topo_->layers[i]->grads();
    const std::vector<Tensor>& into = topo_->layers[static_cast<size_t>(topo_->shares[i])]->grads();
    for (size_t k = 0; k < from.size(); ++k) {
      Tensor sum = into[k];  // a view: the sum lands in the gradient buffer
      detail::elementwise_binary(detail::BinaryOp::Add, into[k], from[k], sum);
    }
  }
}

const Tensor& Executor::input_gradient(size_t k) const {
  static const Tensor none;
  const size_t slot = (topo_ ? topo_->layers.size() : 0) + k;
  return slot < gouts_.size() && gouts_[slot] != nullptr && input_whole_[k] ? *gouts_[slot] : none;
}

}  // namespace ember::detail
