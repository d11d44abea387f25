/// @file
/// Layer: the interface every built-in and user layer implements.
///
/// Life cycle (driven by the model engine, layers/model/model.h, or by a custom training loop):
///   1. build(sample_shape): validates the per-sample input shape (no batch dimension) and
///      returns the per-sample output shape;
///   2. param_specs(): names and shapes of the parameters (e.g. "kernel", "bias");
///   3. bind(params, grads): views into the model's one flat parameter buffer and one flat
///      gradient buffer, in param_specs() order;
///   4. init_params(rng): Keras defaults: Glorot-uniform kernels, zero biases;
///   5. state_specs() / bind_state(state): non-trainable state (BatchNormalization's moving
///      statistics, a random layer's step counter): views into the model's one flat state
///      buffer, beside the parameters, filled with each spec's initial value; saved in
///      checkpoints, moved with the model;
///   6. set_random_seed(seed): a layer that draws random numbers gets its own stream (derived
///      from the model's seed, the layer's position and the replica);
///   7. forward / backward: per batch.
///
/// Contract of forward/backward (non-virtual: they check, then call the layer's do_forward /
/// do_backward, which is what a subclass implements):
///   - forward(x) returns the output; the reference stays valid until the next forward.
///     The layer may keep `x` (shallowly) for backward.
///   - backward(dy) must follow forward (else Error) with dy of the output's shape (else
///     ShapeError); both are checked here, once for every layer. It WRITES (=) the parameter
///     gradients for this batch (never accumulates) and returns dx, or an undefined tensor
///     (no_input_grad()) when set_needs_input_grad(false).
///   - Layouts: inputs may come in any layout (RowMajor NCHW or NHWC); a layer converts what it
///     needs. Outputs carry their layout tag; dy must have the output's shape (any layout).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../core/rng.h"
#include "../core/tensor.h"

namespace ember {

namespace detail {
// What a backend keeps between an op's forward and backward (its layout of the input, argmax
// indices, scratch). The op's dispatch (layers/ops/) creates and reads it; the layer only holds it.
class OpState {
 public:
  virtual ~OpState() = default;
};
}  // namespace detail

/// A trainable parameter of a layer: its name, shape and initialiser (Layer::param_specs()).
struct ParamSpec {
  std::string name;  ///< "kernel", "bias"
  Shape shape;       ///< the parameter's shape
  /// How init_params() fills the parameter: Glorot-uniform (from fan_in and fan_out), zeros, ones,
  /// U(-scale, scale) or normal(0, scale).
  enum class Init { GlorotUniform, Zeros, Ones, Uniform, Normal } init = Init::Zeros;  ///< the initialiser
  /// The fans of a GlorotUniform parameter: U(-l, l) with l = sqrt(6 / (fan_in + fan_out)).
  ///@{
  int64_t fan_in = 0, fan_out = 0;
  ///@}
  float scale = 0.0f;  ///< Uniform's limit, Normal's standard deviation
};

/// Non-trainable state of a layer: one f32 tensor, updated by forward(training) and never by
/// the optimizer.
struct StateSpec {
  std::string name;   ///< "moving_mean"
  Shape shape;        ///< the tensor's shape
  float init = 0.0f;  ///< the value every element starts with
  /// true: a statistic that replicas average after every step (under Mirrored and MultiWorker
  /// every replica then holds the same values), counted as a non-trainable parameter in
  /// summary(). false: a counter that every replica advances alike (a random layer's step).
  bool averaged = true;
};

/// A layer's configuration: its constructor's arguments by name, as text (Keras' get_config), what
/// a checkpoint stores and load_model gives back to the layer's factory (layers/model/registry.h,
/// which also reads and writes the values: numbers that read back exactly, sizes as "3,3").
using LayerConfig = std::map<std::string, std::string>;

/// The interface every built-in and user layer implements: see layer.h for the life
/// cycle and the contract of forward() and backward(). A subclass implements type(), build(),
/// do_forward() and do_backward(), and what else it needs of the virtual functions.
class Layer {
 public:
  virtual ~Layer() = default;
  Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  virtual std::string type() const = 0;  ///< "Conv2D"
  /// What recreates this layer through its type's factory (empty: a layer without arguments). A
  /// layer that cannot be recreated from its type and this is not saved with its architecture.
  virtual LayerConfig config() const { return {}; }
  /// Validates the per-sample input shape (no batch dimension) and returns the per-sample output
  /// shape (ShapeError naming what does not fit).
  virtual Shape build(const Shape& sample_shape) = 0;
  /// Names, shapes and initialisers of the parameters, in the order bind() takes them (none by
  /// default).
  virtual std::vector<ParamSpec> param_specs() const { return {}; }
  /// The output for a batch x (N, ...), in training or inference mode: do_forward(); the reference
  /// stays valid until the next forward.
  const Tensor& forward(const Tensor& x, bool training);
  /// Writes (=) the parameter gradients for dy, the gradient of the last forward's output, and
  /// returns dx (or no_input_grad()): do_backward(), once forward has run (else Error) and dy has
  /// the output's shape (else ShapeError).
  const Tensor& backward(const Tensor& dy);

  // --- Layers of several inputs (merge layers: Add, Concatenate ...) ----------------------------
  /// Such a layer returns true from multi_input() and implements build_inputs / do_forward_inputs /
  /// do_backward_inputs instead of the one-input trio (which then throw). The contract is the
  /// one-input one, per input: forward_inputs' tensors may come in any layout; backward_inputs
  /// returns one input gradient per input, each of that input's shape (any layout), valid until
  /// the next backward; it must follow forward_inputs (checked here, with dy's shape).
  virtual bool multi_input() const { return false; }
  /// build() for a layer of several inputs: one per-sample shape per input. By default a layer
  /// takes exactly one (ArgumentError otherwise) and this is build().
  virtual Shape build_inputs(const std::vector<Shape>& sample_shapes);
  /// forward() for a layer of several inputs (multi_input()): do_forward_inputs().
  const Tensor& forward_inputs(const std::vector<const Tensor*>& xs, bool training);
  /// backward() for a layer of several inputs: one gradient per input (see multi_input()).
  const std::vector<Tensor>& backward_inputs(const Tensor& dy);
  /// What runs this layer at this batch size on `device`, for --log-device-placement
  /// (e.g. "fwd oneDNN jit:avx2 ..., bwd-data ember winograd F(4x4,3x3), ...").
  virtual std::string kernel_info(int64_t /*batch*/, Device device) const {
    return device.is_cuda() ? "ember CUDA kernel" : "ember cpu kernel";
  }

  /// ReLU-backward fusion. Model::build pairs a layer whose output went through a ReLU
  /// (relu_output()) with its only consumer when that can apply the ReLU's mask inside its own
  /// backward (fuse_input_relu_mask() returns true and from then on does so, e.g. MaxPool2D);
  /// the first layer is then told its output gradient arrives already masked and skips that
  /// pass over memory.
  virtual bool relu_output() const { return false; }
  /// Whether the layer reads i32 ids (Embedding); every other layer's forward takes f32 only and
  /// refuses i32 input with a ShapeError naming the layer (ids must go to an Embedding first).
  virtual bool takes_ids() const { return false; }
  /// A softmax over the last axis: as a model's last layer, the loss reads its input (logits).
  virtual bool softmax_output() const { return false; }
  /// Asks this layer to apply its input's ReLU mask inside its own backward (see relu_output()):
  /// true when it can and from then on does, false (the default) when it cannot.
  virtual bool fuse_input_relu_mask() { return false; }
  /// True when each output row depends on its own input row only and backward's parameter
  /// gradients are sums over rows, in this mode (training or inference): the batch may then run
  /// as consecutive slices whose gradients add up (the engine's CPU micro-batches). False by
  /// default, so a layer that does not say so is never sliced; false for what mixes rows or
  /// draws per call (BatchNormalization and Dropout in training).
  virtual bool rows_independent(bool /*training*/) const { return false; }
  /// Tells the layer that its output gradient arrives with the ReLU mask already applied by its
  /// consumer (see relu_output()).
  void set_output_grad_premasked(bool v) { output_grad_premasked_ = v; }
  bool output_grad_premasked() const { return output_grad_premasked_; }  ///< See set_output_grad_premasked().

  /// Binds parameter and gradient views (param_specs() order). Called once after build().
  virtual void bind(std::vector<Tensor> params, std::vector<Tensor> grads);
  /// Fills the bound parameters per their ParamSpec::Init.
  virtual void init_params(Rng& rng);
  /// Names, shapes and initial values of the non-trainable state, in the order bind_state() takes
  /// them (none by default).
  virtual std::vector<StateSpec> state_specs() const { return {}; }
  /// Binds the state views (state_specs() order); called after bind(), and again when the
  /// model moves. The model fills them with their initial values.
  virtual void bind_state(std::vector<Tensor> state);
  /// The seed of this layer's random numbers (only layers that draw any use it).
  virtual void set_random_seed(uint64_t /*seed*/) {}
  /// That seed as the layer holds it (0 for a layer that draws none): a captured CUDA graph holds
  /// it as a kernel argument, so fit captures again when it changes.
  virtual uint64_t random_seed() const { return 0; }
  /// Drops every buffer forward/backward keep between calls (the output, saved inputs, scratch,
  /// gradients), keeping the parameters, the state and the backends' plans (cached per shape, not
  /// here): the model engine's inference passes (evaluate, predict) call it once it holds the
  /// layer's output itself, so an activation lives only until its last reader has run. A backward
  /// then needs a new forward (Error). A layer holding buffers of its own beside `state_` overrides
  /// do_release_buffers and calls the base.
  void release_buffers();

  /// The layer's name in its model ("conv2d", "dense_1", ...; Model::build names unnamed layers).
  const std::string& name() const { return name_; }
  /// The model whose buffers this layer's views point into (set by Model::build): a layer serves
  /// one model at a time; expired once that model is gone.
  const std::weak_ptr<const void>& owner() const { return owner_; }
  void set_owner(std::weak_ptr<const void> owner) { owner_ = std::move(owner); }  ///< See owner().
  void set_name(std::string name) { name_ = std::move(name); }                    ///< See name().
  /// Calls of this layer through the functional API (layers/model/graph.h): the first runs this
  /// object; every later one a twin made by the layer registry that shares its parameters and
  /// state (Keras' shared layers). note_call() and restore_calls() (a failed call undone) are the
  /// graph API's.
  int calls() const { return calls_; }
  void note_call() { ++calls_; }                     ///< Counts one more call (see calls()).
  void restore_calls(int calls) { calls_ = calls; }  ///< Sets the count back (see calls()).
  /// Whether backward() computes dx (true by default; else it returns no_input_grad()). Model::
  /// build turns it off for a layer that reads only model inputs, and a model's backward pass for a
  /// layer below which nothing trains (set_trainable: no earlier layer wants a gradient).
  void set_needs_input_grad(bool v) { needs_input_grad_ = v; }
  bool needs_input_grad() const {
    return needs_input_grad_ && !nothing_trains_below_;
  }  ///< See set_needs_input_grad().
  /// Freezing (Keras' layer.trainable = False; true by default). A frozen layer's parameters keep
  /// their values in training: a model's backward pass computes no parameter gradient for it (its
  /// gradients read zero; Conv2D and Dense skip the work) and runs its backward only for what
  /// earlier layers that train need (not at all when none does), the optimizer and its weight
  /// decay leave it, and a frozen BatchNormalization runs in inference mode (its moving statistics
  /// normalise and stay as they are). summary() counts its parameters as non-trainable;
  /// checkpoints keep the flag. Takes effect at the next step; under a strategy freeze in the recipe
  /// (every replica alike).
  void set_trainable(bool v) { trainable_ = v; }
  bool trainable() const { return trainable_; }  ///< See set_trainable().
  /// Set by a model's backward pass: no layer before this one trains, so its input gradient would
  /// go unused (needs_input_grad() is then false).
  void set_nothing_trains_below(bool v) { nothing_trains_below_ = v; }
  const std::vector<Tensor>& params() const { return params_; }        ///< The bound parameter views.
  const std::vector<Tensor>& grads() const { return grads_; }          ///< The bound gradient views.
  const std::vector<Tensor>& state() const { return state_tensors_; }  ///< The bound state views.
  int64_t num_params() const;  ///< Trainable values: the elements of every ParamSpec.
  /// Elements of averaged state: Keras' "non-trainable params" (moving mean and variance).
  int64_t num_non_trainable() const;

 protected:
  /// The layer's work; forward()/backward() have checked what the contract above says.
  virtual const Tensor& do_forward(const Tensor& x, bool training) = 0;
  /// The layer's backward: writes (=) the parameter gradients and returns dx (or no_input_grad()
  /// when needs_input_grad() is false); dy has the output's shape, checked by backward().
  virtual const Tensor& do_backward(const Tensor& dy) = 0;
  /// Layers of several inputs (multi_input()): the default ones throw.
  virtual const Tensor& do_forward_inputs(const std::vector<const Tensor*>& xs, bool training);
  /// backward_inputs()' work for a layer of several inputs: one gradient per input. The default
  /// throws Error.
  virtual const std::vector<Tensor>& do_backward_inputs(const Tensor& dy);
  /// The undefined tensor backward returns when no input gradient is wanted.
  static const Tensor& no_input_grad();
  /// release_buffers()' work: drops `state_`; a layer with buffers of its own overrides it and calls
  /// the base.
  virtual void do_release_buffers() { state_.reset(); }

  /// The views bind() received: parameters and their gradients, in param_specs() order.
  ///@{
  std::vector<Tensor> params_, grads_;
  ///@}
  std::vector<Tensor> state_tensors_;       ///< views into the model's state buffer (state_specs())
  bool needs_input_grad_ = true;            ///< set_needs_input_grad()'s value
  bool output_grad_premasked_ = false;      ///< set_output_grad_premasked()'s value
  bool trainable_ = true;                   ///< set_trainable()'s value
  bool nothing_trains_below_ = false;       ///< set_nothing_trains_below()'s value
  std::unique_ptr<detail::OpState> state_;  ///< the backend's, opaque (see detail::OpState)

 private:
  std::string name_;
  std::weak_ptr<const void> owner_;
  Shape out_shape_;         // of the last forward's output: what backward's dy must be
  bool forwarded_ = false;  // forward has run since build (and its buffers were not released since)
  bool released_ = false;   // release_buffers() ran after the last forward
  int calls_ = 0;
};

}  // namespace ember
