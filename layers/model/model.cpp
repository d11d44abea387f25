// Model: holds its parts (topology.h, params.h, execute.h, compiled.h, micro_batch.h) behind its API
// and runs the training step in order: forward -> losses -> backward (-> the slices' tree) -> update.
// The passes themselves are the executor's, the losses and metrics the compiled outputs', the
// slicing the micro-batches'. Building is in build.cpp, nested calls in nested.cpp, summary and
// placement in summary.cpp, fit, evaluate and predict in fit.cpp.
#include "model.h"

#include <algorithm>
#include <utility>

#include "../../core/error.h"
#include "../../core/logger.h"
#include "../../core/runtime.h"
#include "accumulation.h"
#include "compiled.h"
#include "execute.h"
#include "micro_batch.h"
#include "params.h"
#include "topology.h"

namespace ember {

namespace detail {
template <class T>
Part<T>::Part() : p_(std::make_unique<T>()) {}
template <class T>
Part<T>::Part(Part&& other) noexcept : p_(std::exchange(other.p_, std::make_unique<T>())) {}
template <class T>
Part<T>& Part<T>::operator=(Part&& other) noexcept {
  p_ = std::exchange(other.p_, std::make_unique<T>());
  return *this;
}
template <class T>
Part<T>::~Part() = default;
template class Part<Topology>;
template class Part<ParamArena>;
template class Part<Executor>;
template class Part<CompiledOutputs>;
template class Part<MicroBatches>;
template class Part<GradientTree>;
}  // namespace detail

static_assert(Model::kExactSliceRows == detail::MicroBatches::kExactSliceRows);

Model::Model() = default;
Model::~Model() = default;
Model::Model(Model&&) noexcept = default;

Model::Claim::Claim(const Model& model, const char* what) : owner_(model.call_owner_) {
  const std::thread::id me = std::this_thread::get_id();
  std::thread::id free{};
  if (owner_.thread.compare_exchange_strong(free, me, std::memory_order_acquire)) {
    owner_.depth = 1;
    return;
  }
  EMBER_CHECK(free == me, Error,
              std::string(what) +
                  ": this model is running a call on another thread: a model's activations and scratch serve one "
                  "call at a time (use a model per thread, or a mutex around the calls)");
  ++owner_.depth;  // a call inside this thread's own (fit's validation)
}

Model::Claim::~Claim() {
  if (--owner_.depth == 0) owner_.thread.store(std::thread::id{}, std::memory_order_release);
}
Model& Model::operator=(Model&&) noexcept = default;

Model::Model(const SymbolicTensor& input, const SymbolicTensor& output, std::string name)
    : Model(std::vector<SymbolicTensor>{input}, std::vector<SymbolicTensor>{output}, std::move(name)) {}

Model::Model(const std::vector<SymbolicTensor>& inputs, const std::vector<SymbolicTensor>& outputs, std::string name)
    : name_(std::move(name)) {
  topo_->from_symbolic(inputs, outputs);
}

const std::vector<int>& Model::layer_inputs(size_t i) const {
  EMBER_CHECK(i < topo_->nodes.size(), ArgumentError,
              "Model::layer_inputs: layer " + std::to_string(i) + " of a model of " +
                  std::to_string(topo_->nodes.size()) +
                  (built() || topo_->graph ? "" : " (a Sequential's graph exists from build())"));
  return topo_->nodes[i].inputs;
}

Tensor Model::pack_params_layout(const Tensor& padded) const {
  require_built("pack_params_layout");
  return arena_->pack(padded);
}

Tensor Model::unpack_params_layout(const Tensor& packed) const {
  require_built("unpack_params_layout");
  return arena_->unpack(packed);
}

Tensor Model::averaged_state() const {
  require_built("averaged_state");
  return arena_->averaged_state();
}

size_t Model::logit_layers() const {
  return final_softmax() != nullptr ? topo_->layers.size() - 1 : topo_->layers.size();
}

Layer* Model::final_softmax() const {
  const bool reads_input = topo_->outputs.size() == 1 && !topo_->layers.empty() &&
                           topo_->outputs[0] + 1 == static_cast<int>(topo_->layers.size()) &&
                           topo_->layers.back()->softmax_output() && compiled_->at(0).loss->takes_softmax_logits();
  return reads_input ? topo_->layers.back().get() : nullptr;
}

std::vector<Shape> Model::output_shapes() const {
  std::vector<Shape> out;
  for (int i : topo_->outputs) out.push_back(topo_->output_shapes.at(static_cast<size_t>(i)));
  return out;
}

std::vector<std::string> Model::output_names() const {
  std::vector<std::string> out;  // a later call of a shared layer: "name[k]" (unique)
  for (int i : topo_->outputs) out.push_back(layer_ref(static_cast<size_t>(i)));
  return out;
}

void Model::to(Device device) {
  const Claim claim(*this, "to");
  require_built("to");
  if (device == device_) return;
  arena_->to(device, *topo_);
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
  const Claim claim(*this, "compile");
  const size_t expected = topo_->outputs.empty() ? 1 : topo_->outputs.size();  // a Sequential before build: one
  EMBER_CHECK(outputs.size() == expected, ArgumentError,
              "Model::compile: " + std::to_string(outputs.size()) + " losses for a model of " +
                  std::to_string(expected) + " output" + (expected == 1 ? "" : "s"));
  std::vector<detail::CompiledOutputs::Head> heads;
  for (size_t k = 0; k < outputs.size(); ++k) {
    const bool softmax =
        outputs.size() > 1 && topo_->layers.at(static_cast<size_t>(topo_->outputs[k]))->softmax_output();
    heads.push_back(detail::CompiledOutputs::make_head(std::move(outputs[k].loss), outputs[k].weight,
                                                       std::move(outputs[k].metrics), k, outputs.size(), softmax));
  }
  set_optimizer(std::move(optimizer));
  compiled_->set(std::move(heads));
}

Loss& Model::loss(size_t output) { return *compiled_->at(output).loss; }
const MetricList& Model::metrics(size_t output) const { return compiled_->at(output).metrics; }

std::vector<std::string> Model::metric_names() const {
  require_heads("metric_names");
  return compiled_->metric_names(compiled_->size() == 1 ? std::vector<std::string>{} : output_names());
}

MetricSums Model::make_sums(Device device) const {
  require_heads("make_sums");
  return compiled_->make_sums(device);
}

std::vector<double> Model::metric_sums(const MetricSums::Values& v) const {
  return compiled_->metric_sums(v, output_shapes());
}

void Model::check_targets(DType target, const Shape& target_sample, const char* what, size_t output) const {
  compiled_->at(output);  // std::out_of_range first, as the heads' own look-up
  const Shape& shape = topo_->output_shapes.at(static_cast<size_t>(topo_->outputs.at(output)));
  compiled_->check_targets(shape, target, target_sample, what, output,
                           compiled_->size() == 1 ? std::string() : output_names()[output]);
}

// Before any of a step's work: the step ends in the optimizer.
void Model::require_optimizer() const {
  EMBER_CHECK(optimizer_ != nullptr, Error, "Model: compile() the model with an optimizer first");
}

void Model::require_built(const char* what) const {
  EMBER_CHECK(built(), Error, std::string("Model::") + what + ": build() the model first (or call fit())");
  EMBER_CHECK(owns_layers(), Error,
              std::string("Model::") + what + ": model '" + name_ +
                  "' gave its layers to a model built from them (its input() and layer_output(), or a call of "
                  "it); use that model");
}

bool Model::owns_layers() const {
  for (const auto& l : topo_->layers)
    if (l->owner().lock() != identity_) return false;
  return true;
}

void Model::require_heads(const char* what) const { compiled_->require(topo_->outputs.size(), what); }

bool Model::fused_with_next(size_t i) const {
  const detail::PrecisionScope precision_scope(precision_);  // as the model's own steps decide it
  return exec_->execution_plan().rewrite_at(i, fuses()) != nullptr;
}

const Tensor& Model::run_layers(std::span<const Tensor> xs, bool training, size_t begin, size_t end, const char* what,
                                bool release) {
  require_built(what);
  return exec_->forward(xs, training, begin, end, what, device_, fuses(), release);
}

const Tensor& Model::backward_pass(std::span<const Tensor* const> seeds, size_t begin, size_t end) {
  require_built("backward_layers");
  return exec_->backward(seeds, begin, end);
}

// With several outputs: output 0's (the last layer run is the last output's).
const Tensor& Model::forward(const Tensor& x, bool training) {
  const Call call(*this, "forward", call_threads());
  const detail::PrecisionScope precision_scope(precision_);
  const Tensor& last = run_layers({&x, 1}, training, 0, topo_->layers.size(), "forward");
  return topo_->outputs.size() > 1 ? output(0) : last;
}

const Tensor& Model::forward(const std::vector<Tensor>& xs, bool training) {
  const Call call(*this, "forward", call_threads());
  const detail::PrecisionScope precision_scope(precision_);
  const Tensor& last = run_layers(xs, training, 0, topo_->layers.size(), "forward");
  return topo_->outputs.size() > 1 ? output(0) : last;
}

// Without a final Softmax: the loss reads its input.
const Tensor& Model::forward_logits(const Tensor& x, bool training) {
  const Call call(*this, "forward_logits", call_threads());
  const detail::PrecisionScope precision_scope(precision_);
  const Tensor& last = run_layers({&x, 1}, training, 0, logit_layers(), "forward_logits");
  return topo_->outputs.size() > 1 ? output(0) : last;
}

const Tensor& Model::forward_logits(const std::vector<Tensor>& xs, bool training) {
  const Call call(*this, "forward_logits", call_threads());
  const detail::PrecisionScope precision_scope(precision_);
  const Tensor& last = run_layers(xs, training, 0, logit_layers(), "forward_logits");
  return topo_->outputs.size() > 1 ? output(0) : last;
}

const Tensor& Model::forward_layers(const Tensor& x, bool training, size_t begin, size_t end) {
  return run_layers({&x, 1}, training, begin, end, "forward_layers");
}

const Tensor& Model::backward_layers(const Tensor& dy, size_t begin, size_t end) {
  const Tensor* seed = &dy;
  return backward_pass({&seed, 1}, begin, end);
}

const Tensor& Model::input_gradient(size_t k) const { return exec_->input_gradient(k); }

void Model::backward(const Tensor& dlogits) {
  const Call call(*this, "backward", call_threads());
  const detail::PrecisionScope precision_scope(precision_);
  EMBER_CHECK(topo_->outputs.size() <= 1, ArgumentError,
              "Model::backward: the model has " + std::to_string(topo_->outputs.size()) +
                  " outputs: give a gradient for each (backward({&d0, &d1, ...}))");
  backward_layers(dlogits, 0, logit_layers());
}

void Model::backward(const std::vector<const Tensor*>& doutputs) {
  const Call call(*this, "backward", call_threads());
  const detail::PrecisionScope precision_scope(precision_);
  EMBER_CHECK(doutputs.size() == topo_->outputs.size(), ArgumentError,
              "Model::backward: " + std::to_string(doutputs.size()) + " gradients for a model of " +
                  std::to_string(topo_->outputs.size()) + " outputs");
  for (const Tensor* d : doutputs) EMBER_CHECK(d != nullptr, ArgumentError, "Model::backward: a null gradient");
  backward_pass(doutputs, 0, logit_layers());
}

const Tensor& Model::output(size_t k) const {
  EMBER_CHECK(
      k < topo_->outputs.size(), ArgumentError,
      "Model::output(" + std::to_string(k) + ") of a model of " + std::to_string(topo_->outputs.size()) + " outputs");
  const Tensor* t = exec_->output_of(static_cast<size_t>(topo_->outputs[k]));
  EMBER_CHECK(t != nullptr, Error, "Model::output: no forward has run");
  return *t;
}

void Model::set_num_threads(int n) {
  EMBER_CHECK(n >= 0 || n == kFreeCores, ArgumentError,
              "set_num_threads: thread count must be >= 0 or kFreeCores (-1), got " + std::to_string(n));
  threads_ = n;
}

int Model::num_threads() const {
  const int n = call_threads();
  return n > 0 ? n : ember::num_threads();
}

int64_t Model::macs_per_sample() const {
  if (!built()) return 0;
  int64_t macs = 0;
  for (size_t i = 0; i < topo_->layers.size(); ++i) {
    const auto& params = topo_->layers[i]->params();
    if (params.empty() || params[0].rank() == 0) continue;
    // Output positions: the output's values over the first parameter's leading dimension (a
    // Conv2D's filters, a Dense's units): each parameter is read once per position.
    const int64_t positions =
        std::max<int64_t>(1, topo_->output_shapes[i].numel() / std::max<int64_t>(1, params[0].dim(0)));
    for (const Tensor& p : params) macs += p.numel() * positions;
  }
  return macs;
}

void Model::set_cpu_micro_batch(int64_t rows) { batches_->set_rows(rows); }
int64_t Model::cpu_micro_batch() const { return batches_->rows(); }

int64_t Model::slice_rows(std::span<const Tensor> xs, std::span<const Tensor> ys, bool training) const {
  const int64_t n = detail::MicroBatches::batch_rows(xs);
  const int64_t rows = batches_->rows_for(xs, training, device_, *topo_, arena_->params.numel());
  if (rows < n)  // whole, before any slice adds to the sums or the gradients
    for (size_t k = 0; k < ys.size() && k < compiled_->size(); ++k)
      compiled_->check_sliced_target(ys[k], n, k, topo_->output_shapes[static_cast<size_t>(topo_->outputs[k])]);
  return rows;
}

// The training step's gradients, in order: forward, the losses (their gradients are the seeds),
// backward. The micro-batches run it once on the whole batch, or per slice adding the slices'
// gradients as the batch's pairwise tree; a strategy's all-reduce and the optimizer's update follow.
void Model::compute_gradients_of(std::span<const Tensor> xs, std::span<const Tensor> ys, MetricSums& sums) {
  require_built("compute_gradients");  // before the slicing reads the graph
  const size_t end = logit_layers();
  const auto step = [&](std::span<const Tensor> x, std::span<const Tensor> y, int64_t mean_rows) {
    const Tensor& last = run_layers(x, /*training=*/true, 0, end, "compute_gradients");
    backward_pass(compiled_->losses(exec_->loss_inputs(last), y, sums, mean_rows, final_softmax()), 0, end);
  };
  batches_->train(xs, ys, slice_rows(xs, ys, true), sums, arena_->grads, step);
}

// An inference pass that frees as it goes (Executor::forward), then the losses and metrics.
void Model::evaluate_batch_of(std::span<const Tensor> xs, std::span<const Tensor> ys, MetricSums& sums) {
  require_built("evaluate_batch");  // before the slicing reads the graph
  const size_t end = logit_layers();
  const auto pass = [&](std::span<const Tensor> x, std::span<const Tensor> y) {
    const Tensor& last = run_layers(x, /*training=*/false, 0, end, "evaluate_batch", /*release=*/true);
    if (const Tensor* probs = compiled_->evaluate(exec_->loss_inputs(last), y, sums, final_softmax()))
      exec_->hold(topo_->layers.size() - 1, *probs);
  };
  batches_->evaluate(xs, ys, slice_rows(xs, ys, false), sums, pass);
}

void Model::accumulate_gradients(const Tensor& x, const Tensor& labels, MetricSums& sums, int64_t batch_rows) {
  accumulate_gradients(std::vector<Tensor>{x}, std::vector<Tensor>{labels}, sums, batch_rows);
}

void Model::accumulate_gradients(const std::vector<Tensor>& xs, const std::vector<Tensor>& targets, MetricSums& sums,
                                 int64_t batch_rows) {
  EMBER_CHECK(
      batch_rows >= 1, ArgumentError,
      "accumulate_gradients: batch_rows (the mean's denominator) must be >= 1, got " + std::to_string(batch_rows));
  const Call call(*this, "accumulate_gradients", call_threads());
  const detail::PrecisionScope precision_scope(precision_);
  compute_gradients_of(xs, targets, sums);
  const int64_t rows = detail::MicroBatches::batch_rows(xs);
  accumulated_->add(arena_->grads, static_cast<float>(static_cast<double>(rows) / static_cast<double>(batch_rows)),
                    rows);
}

int64_t Model::finish_accumulation() {
  const Claim claim(*this, "finish_accumulation");
  return accumulated_->finish(arena_->grads);
}

void Model::compute_gradients(const Tensor& x, const Tensor& labels, MetricSums& sums) {
  const Call call(*this, "compute_gradients", call_threads());
  const detail::PrecisionScope precision_scope(precision_);
  compute_gradients_of({&x, 1}, {&labels, 1}, sums);
}

void Model::compute_gradients(const std::vector<Tensor>& xs, const Tensor& labels, MetricSums& sums) {
  const Call call(*this, "compute_gradients", call_threads());
  const detail::PrecisionScope precision_scope(precision_);
  compute_gradients_of(xs, {&labels, 1}, sums);
}

void Model::compute_gradients(const std::vector<Tensor>& xs, const std::vector<Tensor>& targets, MetricSums& sums) {
  const Call call(*this, "compute_gradients", call_threads());
  const detail::PrecisionScope precision_scope(precision_);
  compute_gradients_of(xs, targets, sums);
}

float Model::compute_gradients(const Tensor& x, const Tensor& labels, int64_t* correct) {
  const Call call(*this, "compute_gradients", call_threads());
  const detail::PrecisionScope precision_scope(precision_);
  MetricSums sums = make_sums();
  compute_gradients(x, labels, sums);  // read back
  const MetricSums::Values v = sums.read();
  if (correct) *correct = v.correct;
  return static_cast<float>(v.loss_sum / static_cast<double>(std::max<int64_t>(x.dim(0), 1)));
}

void Model::evaluate_batch(const Tensor& x, const Tensor& labels, MetricSums& sums) {
  const Call call(*this, "evaluate_batch", call_threads());
  const detail::PrecisionScope precision_scope(precision_);
  evaluate_batch_of({&x, 1}, {&labels, 1}, sums);
}

void Model::evaluate_batch(const std::vector<Tensor>& xs, const Tensor& labels, MetricSums& sums) {
  const Call call(*this, "evaluate_batch", call_threads());
  const detail::PrecisionScope precision_scope(precision_);
  evaluate_batch_of(xs, {&labels, 1}, sums);
}

void Model::evaluate_batch(const std::vector<Tensor>& xs, const std::vector<Tensor>& targets, MetricSums& sums) {
  const Call call(*this, "evaluate_batch", call_threads());
  const detail::PrecisionScope precision_scope(precision_);
  evaluate_batch_of(xs, targets, sums);
}

void Model::train_step(const Tensor& x, const Tensor& labels, MetricSums& sums) {
  const Call call(*this, "train_step", call_threads());
  const detail::PrecisionScope precision_scope(precision_);
  require_optimizer();
  compute_gradients(x, labels, sums);
  apply_gradients();
}

void Model::train_step(const std::vector<Tensor>& xs, const Tensor& labels, MetricSums& sums) {
  const Call call(*this, "train_step", call_threads());
  const detail::PrecisionScope precision_scope(precision_);
  require_optimizer();
  compute_gradients(xs, labels, sums);
  apply_gradients();
}

void Model::train_step(const std::vector<Tensor>& xs, const std::vector<Tensor>& targets, MetricSums& sums) {
  const Call call(*this, "train_step", call_threads());
  const detail::PrecisionScope precision_scope(precision_);
  require_optimizer();
  compute_gradients(xs, targets, sums);
  apply_gradients();
}

float Model::train_step(const Tensor& x, const Tensor& labels, int64_t* correct) {
  const Call call(*this, "train_step", call_threads());
  const detail::PrecisionScope precision_scope(precision_);
  require_optimizer();
  const float loss = compute_gradients(x, labels, correct);
  apply_gradients();
  return loss;
}

void Model::apply_gradients() {
  const Call call(*this, "apply_gradients", call_threads());
  const detail::PrecisionScope precision_scope(precision_);
  require_optimizer();
  if (optimizer_->regularization().weight_decay > 0) {
    const Tensor& m = optimizer_->decay_mask();
    if (!m.defined() || m.numel() != arena_->params.numel() || m.device() != arena_->params.device())
      optimizer_->set_decay_mask(decay_mask());
  }
  topo_->sync_trainable();
  optimizer_->set_update_spans(arena_->trainable_spans(*topo_));  // frozen layers stay as they are
  optimizer_->step(arena_->params, arena_->grads);
}

Tensor Model::decay_mask() const {
  require_built("decay_mask");
  return arena_->decay_mask(*topo_, decay_overrides_, device_);
}

void Model::set_weight_decay(const std::string& param, bool decay) {
  require_built("set_weight_decay");
  bool found = false;
  for (const auto& [name, t] : named_params()) found = found || name == param;
  EMBER_CHECK(found, ArgumentError, "Model::set_weight_decay: the model has no parameter '" + param + "'");
  decay_overrides_.emplace_back(param, decay);
  if (optimizer_ && optimizer_->decay_mask().defined()) optimizer_->set_decay_mask(decay_mask());
}

std::string Model::layer_ref(size_t i, const char* first) const { return topo_->layer_ref(i, first); }

std::vector<std::pair<std::string, Tensor>> Model::named_params() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t k = 0; k < topo_->layers.size(); ++k) {
    if (is_twin(k)) continue;  // a shared layer's parameters are listed once
    const auto& l = topo_->layers[k];
    const auto specs = l->param_specs();
    for (size_t i = 0; i < specs.size(); ++i) out.emplace_back(l->name() + "/" + specs[i].name, l->params()[i]);
  }
  return out;
}

std::vector<std::pair<std::string, Tensor>> Model::named_state() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t k = 0; k < topo_->layers.size(); ++k) {
    if (is_twin(k)) continue;
    const auto& l = topo_->layers[k];
    const auto specs = l->state_specs();
    for (size_t i = 0; i < specs.size(); ++i) out.emplace_back(l->name() + "/" + specs[i].name, l->state()[i]);
  }
  return out;
}

const std::vector<std::shared_ptr<Layer>>& Model::layers() const { return topo_->layers; }
bool Model::is_twin(size_t i) const { return topo_->is_twin(i); }
int Model::shared_with(size_t i) const { return i < topo_->shares.size() ? topo_->shares[i] : -1; }
bool Model::is_linear() const { return topo_->linear; }
bool Model::is_graph() const { return topo_->graph; }
const std::string& Model::input_name() const { return topo_->input_names.at(0); }
const Shape& Model::input_shape() const { return topo_->input_shapes.at(0); }
size_t Model::num_inputs() const { return topo_->input_shapes.size(); }
const std::vector<std::string>& Model::input_names() const { return topo_->input_names; }
const std::vector<Shape>& Model::input_shapes() const { return topo_->input_shapes; }
const Shape& Model::output_shape() const { return topo_->output_shapes.at(static_cast<size_t>(topo_->outputs.at(0))); }
size_t Model::num_outputs() const { return topo_->outputs.size(); }
const std::vector<int>& Model::output_layers() const { return topo_->outputs; }
const std::vector<Shape>& Model::layer_output_shapes() const { return topo_->output_shapes; }

bool Model::built() const { return arena_->params.defined(); }
Tensor& Model::params() { return arena_->params; }
const Tensor& Model::params() const { return arena_->params; }
Tensor& Model::grads() { return arena_->grads; }
int64_t Model::num_params() const { return arena_->num_params; }

void Model::set_trainable(bool trainable) {
  for (const auto& l : topo_->layers) l->set_trainable(trainable);
}

std::vector<Tensor> Model::trainable_gradients() {
  require_built("trainable_gradients");
  topo_->sync_trainable();
  const auto spans = arena_->trainable_spans(*topo_);
  if (!spans) return {arena_->grads};
  std::vector<Tensor> views;
  for (const Optimizer::Span& s : *spans) views.push_back(arena_->grads.view(s.offset, Shape{s.count}));
  return views;
}
Tensor& Model::state() { return arena_->state; }
const Tensor& Model::state() const { return arena_->state; }
int64_t Model::num_non_trainable() const { return arena_->num_non_trainable; }

}  // namespace ember
