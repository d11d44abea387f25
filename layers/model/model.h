/// @file
/// Model: the one model engine. A model is a directed acyclic graph of layer calls (Keras'
/// functional model, built with layers/model/graph.h); Sequential (layers/model/sequential.h) is its
/// linear case. Everything below works for both.
///
/// @code
///   SymbolicTensor x = Input(Shape{1, 28, 28});
///   SymbolicTensor h = layer<Conv2D>(32, Size2{3, 3}, Activation::ReLU)(x);
///   ...
///   Model model(x, y);                         // y: per-sample logits (classes,)
///   model.build();                             // or let fit() build it
///   model.compile(std::make_unique<Adam>());
///   History h = model.fit(train, {.epochs = 5, .batch_size = 64}, &test);
/// @endcode
///
/// The engine runs the layer calls in a topological order (depth first from the output, inputs in
/// order: a Sequential's order), sums the gradients of a tensor that feeds several layers (in the
/// reverse of that order, converted to the first gradient's layout), and fuses on the CPU what fits
/// (a Conv2D whose only consumer is the next MaxPool2D; a ReLU's mask into the next layer's
/// backward). Several inputs (a dataset of several inputs feeds them: data/dataset.h) and several
/// outputs (a loss each, weighted, with its own metrics: compile(optimizer, outputs)); a layer object
/// called again runs as a twin with its first call's parameters and state (graph.h), whose
/// gradients are added to the first call's after each backward pass.
///
/// All parameters live in one flat buffer and all gradients in another (layers hold views),
/// so an all-reduce is one call, Adam is one fused loop and a checkpoint is a few buffers.
/// Non-trainable state (BatchNormalization's moving statistics, Dropout's step counter) lives
/// in a third flat buffer beside them, the statistics replicas average first (averaged_state()).
/// The loss and metrics are objects given to compile() (layers/loss.h, metrics.h); by default
/// softmax cross-entropy on integer labels with accuracy. A model may end in a Softmax: a loss that
/// takes softmax logits (the categorical cross-entropies) then reads the Softmax's input (stable),
/// the Softmax's own backward is not run, and predict() returns probabilities.
///
/// One call at a time: a model's activations, gradients and scratch serve the call that runs. A
/// call of fit, evaluate, predict, train_step, compute_gradients, evaluate_batch, apply_gradients,
/// forward, backward, build, compile, to, save, load or finish_accumulation made from a second
/// thread while one of them runs on the model is an Error that says so; calls on one thread nest
/// (fit runs evaluate). Readers of its state (params(), grads(), output(), ...) take no part: read
/// them between calls. Use a model per thread (docs/usage.md, Threads), or a mutex around the
/// calls.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "../../core/rng.h"
#include "../../core/runtime.h"
#include "../../core/tensor.h"
#include "../../optim/optimizer.h"
#include "../layer.h"
#include "../loss.h"
#include "fit_options.h"
#include "graph.h"
#include "training_state.h"

namespace ember {

class Dataset;
class DataLoader;
namespace detail {
struct Topology;
class ParamArena;
class Executor;
class CompiledOutputs;
class MicroBatches;
class GradientTree;
/// One of the parts a Model owns (model.cpp instantiates it for each): never null; a moved-from
/// part holds a fresh empty one, so a moved-from Model stays a valid empty model.
template <class T>
class Part {
 public:
  Part();
  Part(Part&& other) noexcept;
  Part& operator=(Part&& other) noexcept;
  ~Part();
  T* operator->() const { return p_.get(); }
  T& operator*() const { return *p_; }

 private:
  std::unique_ptr<T> p_;
};
}  // namespace detail

/// compile(optimizer, outputs): one output's loss, its weight in the model's loss (Keras'
/// loss_weights) and its metrics.
struct OutputLoss {
  std::unique_ptr<Loss> loss;  ///< the output's loss
  double weight = 1.0;         ///< its weight in the model's loss
  MetricList metrics{};        ///< the output's metrics
};

/// The one model engine: a graph of layer calls with its flat parameter, gradient and state
/// buffers, its losses and metrics, and the Keras-like training API (see model.h).
class Model {
 public:
  /// The graph from `input` to `output` (per-sample logits (classes,), or a final Softmax's
  /// probabilities). ArgumentError when an output depends on an Input that is not given, when an
  /// input is not used, or when a later call of a shared layer is here without its first call.
  /// Several inputs: their order is the
  /// order of a batch's inputs; several outputs: the order of its targets (a dataset's named inputs
  /// and targets are matched by name: the Inputs' names and the output layers').
  Model(const SymbolicTensor& input, const SymbolicTensor& output, std::string name = "model");
  /// The graph from several `inputs` to several `outputs`, in the orders described above.
  Model(const std::vector<SymbolicTensor>& inputs, const std::vector<SymbolicTensor>& outputs,
        std::string name = "model");
  virtual ~Model();
  Model(Model&&) noexcept;                           ///< Moves the whole model; its layers now belong to this one.
  Model& operator=(Model&&) noexcept;                ///< Moves the whole model; its layers now belong to this one.
  const std::string& name() const { return name_; }  ///< "model", "sequential", or the name given.

  // --- Nesting: a model used as a layer of another ---------------------------------------------
  /// Calls this model on symbolic tensors (one per input, of its input shapes; a Sequential: one,
  /// which builds its layers for it) and returns its outputs: its layers become part of the graph
  /// being built, named `<this model's name>/<layer>` (default layer names counted within this
  /// model). Calling it again shares their weights (as a layer called again: twins). An unbuilt
  /// model is a block of the outer model, which owns and trains its layers (Keras' nested model also
  /// stays usable on its own, sharing weights; here build and use the outer model). A built model
  /// (one load_model returned) may be called once: its built layers, keeping their names, join the
  /// new model, which adopts them at its build (see input() below). ArgumentError for a built model
  /// called again, ShapeError for inputs of other shapes.
  SymbolicTensor operator()(const SymbolicTensor& x);  ///< one input, one output
  /// The same for a model of several inputs or outputs: one symbolic tensor per input, one returned
  /// per output.
  std::vector<SymbolicTensor> operator()(const std::vector<SymbolicTensor>& xs);

  // --- A built model's layers in a new model (fine-tuning) ------------------------------------
  /// A built model (one load_model returned) is a graph of built layers that a new model can take
  /// over, Keras' `Model(base.input, head(base.get_layer("flatten").output))` or `head(base(x))`:
  ///
  /// @code
  ///   auto base = load_model("mnist.safetensors");
  ///   base->set_trainable(false);
  ///   SymbolicTensor y = layer<Dense>(10)(base->layer_output("dense"));
  ///   Model tuned(base->input(), y);               // or: Input, then (*base)(x) once
  /// @endcode
  ///
  /// The new model's build adopts the built layers with their values (parameters, statistics,
  /// trainable flags): they move into its buffers, one copy at build, and the new model trains
  /// them from then on; the old model gives them up (any later use of it is an Error saying so).
  /// A built model called as a layer keeps its layers' names (they are its own already) and may be
  /// called once.
  /// @{
  /// Input k of this built model's graph as a symbolic tensor (the same one on every call).
  SymbolicTensor input(size_t k = 0);
  /// The output of the layer call named `layer` ("flatten"; "name[1]" for a shared layer's later
  /// call) in this built model's graph, a symbolic tensor on input(). ArgumentError for a name
  /// the model has not.
  SymbolicTensor layer_output(const std::string& layer);
  /// @}
  /// The layer named `name` (a shared layer's first call's object for "name" and its twins'
  /// "name[1]", ...). ArgumentError for a name the model has not (the error lists the names).
  Layer& get_layer(const std::string& name);

  /// Freezes (false) or unfreezes every layer of this model (Layer::set_trainable), also once it is
  /// a block of another model (its layers are the outer model's then: this sets their flags).
  void set_trainable(bool trainable);

  /// Allocates the flat parameter and gradient buffers, names the unnamed layers (Keras' names:
  /// "conv2d", "conv2d_1", ...) and initialises the parameters from `seed` (on the CPU, the same
  /// bits on every device); inside a DeviceScope the model then moves to the scope's device. A
  /// graph model's layers were built when they were called: `sample_shape` must be its input's
  /// (ShapeError else); a Sequential builds its layers for it here.
  void build(const Shape& sample_shape, uint64_t seed = 0);
  void build(uint64_t seed = 0);  ///< a graph model, for its input's shape
  bool built() const;             ///< Whether build() has run.
  /// Sets the optimizer. After a load() without one, the checkpoint's optimizer state goes into
  /// it when it is the same kind (Adam's moments and step count: the run continues exactly);
  /// another kind starts fresh, with a warning.
  /// compile(optimizer): softmax cross-entropy on integer labels, with the "accuracy" metric
  /// (Keras' compile(optimizer, "sparse_categorical_crossentropy", ["accuracy"])).
  void compile(std::unique_ptr<Optimizer> optimizer);
  /// Any loss and metrics (layers/loss.h, metrics.h); fit/evaluate check them against the data
  /// (ShapeError naming the output's and the targets' shapes).
  void compile(std::unique_ptr<Optimizer> optimizer, std::unique_ptr<Loss> loss, MetricList metrics = {});
  /// A model of several outputs: a loss, weight and metrics per output, in output order (one entry
  /// for a one-output model is the call above). The model's loss is the weighted sum; the history
  /// and progress bar show it as "loss", each output's as `<output>_loss` and its metrics as
  /// `<output>_<metric>` (Keras' names; `<output>` is the output layer's name). A loss that takes
  /// softmax logits on an output that is a Softmax layer needs a one-output model (ArgumentError).
  void compile(std::unique_ptr<Optimizer> optimizer, std::vector<OutputLoss> outputs);
  Loss& loss(size_t output = 0);  ///< The training loss of output `output`.
  /// Weight decay (an optimizer's Regularization::weight_decay) applies to kernels and embedding
  /// tables: every parameter named "kernel" or "..._kernel" (MultiHeadAttention's) and every
  /// "embeddings", not biases, nor the normalisations' gamma and beta (the common recipe: nanoGPT
  /// decays its matrices only). This switches one parameter ("dense_1/bias", as named_params() names it) on or off.
  /// ArgumentError for a name the built model does not have. Under a strategy, give the switches
  /// in its ModelRecipe::weight_decay (every replica must decay alike).
  /// Checkpoints keep the switches: load_model restores them, and load() into a model that has none
  /// of its own adopts them (a model that set any keeps its own).
  void set_weight_decay(const std::string& param, bool decay);
  /// The set_weight_decay() switches, in call order.
  const std::vector<std::pair<std::string, bool>>& weight_decay_switches() const { return decay_overrides_; }
  /// Per parameter element, 1 where weight decay applies (on the model's device).
  Tensor decay_mask() const;
  /// The compiled metrics of output `output`.
  const MetricList& metrics(size_t output = 0) const;
  /// The names of what the history logs beside "loss": the metrics; with several outputs each
  /// output's loss, then each output's metrics (see compile).
  std::vector<std::string> metric_names() const;
  /// Sums with a slot for every compiled metric (a block per output), on `device` (the model's by
  /// default).
  ///@{
  MetricSums make_sums() const { return make_sums(device_); }
  MetricSums make_sums(Device device) const;
  ///@}
  /// The values metric_names() names, as sums over the samples, from `values` (each metric from
  /// its slot or the loss's fused count; with several outputs each output's loss sum first). A
  /// Values without blocks (reduced by hand across processes) holds that list already.
  std::vector<double> metric_sums(const MetricSums::Values& values) const;
  /// ShapeError unless output k's loss and metrics fit targets of `target` dtype and per-sample
  /// shape.
  void check_targets(DType target, const Shape& target_sample, const char* what, size_t output = 0) const;
  /// The inputs' shapes, the losses' and metrics' fit and the label count of `data` (ShapeError).
  /// The data's inputs and targets must be in the model's order (arranged() puts named ones there).
  void check_data(const Dataset& data, const char* what) const;
  /// `data` with its inputs and targets in this model's order (named ones matched to input_names()
  /// and output_names()), checked by check_data: what fit and evaluate train and evaluate on.
  Dataset arranged(const Dataset& data, const char* what) const;
  /// An evaluation's means from its sums over `seen` samples.
  EvalResult eval_result(const MetricSums::Values& values, int64_t seen) const;
  /// Moves the parameters (and optimizer state) to `device`; layers then run there (the CUDA
  /// module's ops on a GPU). Inputs must be on the same device: fit/evaluate/predict copy their
  /// batches explicitly; forward() refuses tensors on another device.
  void to(Device device);
  Device device() const { return device_; }  ///< Where the parameters are and the layers run.

  // --- Keras-like training API --------------------------------------------------------------
  /// Trains on `train` as Keras' fit does (see FitOptions): builds an unbuilt model for the data's
  /// samples, batches and shuffles the data, runs the training steps with a progress bar, evaluates
  /// `validation` (or FitOptions::validation_split) after each epoch, and returns the history.
  /// ShapeError when the data do not fit the model, its loss or its metrics.
  History fit(const Dataset& train, const FitOptions& options, const Dataset* validation = nullptr);
  /// The loss and metrics over every sample of `data`, in batches of `batch_size` (an inference
  /// pass: see predict()).
  EvalResult evaluate(const Dataset& data, int64_t batch_size = 256);
  /// One pass over `loader`'s epoch 0 (its batches built on the model's device). A loader kept
  /// across calls keeps its data on the GPU: fit evaluates its validation data this way, so it
  /// is uploaded once per fit, not once per epoch.
  EvalResult evaluate(DataLoader& loader);
  /// The outputs for inputs x (N, ...) f32 in any layout, row-major (N, outputs...) result.
  ///
  /// Memory: evaluate, evaluate_batch and predict are inference passes that free as they go (as
  /// PyTorch under no_grad): an activation lives until the last layer reading it has run, and each
  /// layer drops its saved inputs and scratch (Layer::release_buffers); only the outputs stay until
  /// the next pass. forward(x, false) keeps every buffer, so a custom loop may call backward after
  /// it (an input's gradient in inference mode); backward after evaluate/predict is an Error.
  Tensor predict(const Tensor& x, int64_t batch_size = 256);
  /// A model of several inputs: one tensor per input, in input_names()' order, N rows each.
  Tensor predict(const std::vector<Tensor>& xs, int64_t batch_size = 256);
  /// Every output's predictions (predict() takes a one-output model), in output order.
  std::vector<Tensor> predict_outputs(const std::vector<Tensor>& xs, int64_t batch_size = 256);
  /// Keras-style table: layer (type), output shape, parameter count (a graph model: with its
  /// Input and each layer's inputs, Keras' "Connected to"); totals.
  std::string summary() const;

  // --- Checkpoints (safetensors; see layers/model/checkpoint.h) -------------------------------
  /// Writes a checkpoint of this model, its optimizer state and `state` to `path` (save_checkpoint).
  void save(const std::string& path, const TrainingState& state = {}) const;
  /// Loads a checkpoint into this built model and returns its training state (load_checkpoint).
  TrainingState load(const std::string& path);
  const Optimizer* optimizer() const { return optimizer_.get(); }  ///< The compiled optimizer (null before compile).

  // --- Building blocks for custom loops -----------------------------------------------------
  /// Every layer's output (with a final Softmax: probabilities); with several outputs output 0's
  /// (output(k) has each). A model of several inputs takes a list, one batch per input in
  /// input_names()' order (the same rows in each); every function below that takes x has such an
  /// overload, and one that takes a list of targets (one per output) where it takes targets.
  ///@{
  const Tensor& forward(const Tensor& x, bool training);
  const Tensor& forward(const std::vector<Tensor>& xs, bool training);
  ///@}
  /// The outputs the loss reads: forward() without a final Softmax when the loss takes softmax
  /// logits (the same as forward() else).
  ///@{
  const Tensor& forward_logits(const Tensor& x, bool training);
  const Tensor& forward_logits(const std::vector<Tensor>& xs, bool training);
  ///@}
  /// Output k of the last forward.
  const Tensor& output(size_t k) const;
  /// Backpropagates d(loss)/d(outputs) (forward_logits' output) through the layers below them,
  /// writing (=) the gradient buffer.
  void backward(const Tensor& dlogits);
  /// Several outputs: d(loss)/d(output k) for every output, in output order.
  void backward(const std::vector<const Tensor*>& doutputs);
  /// After backward: the gradient of input k when the layers reading it computed theirs (a layer
  /// reading only model inputs computes none unless set_needs_input_grad(true)), else undefined.
  const Tensor& input_gradient(size_t k = 0) const;
  /// forward + loss + backward + optimizer step on one batch of inputs x and targets (labels for
  /// the default loss); returns the batch's mean loss and (via `correct`, with the default loss)
  /// how many predictions were right.
  float train_step(const Tensor& x, const Tensor& labels, int64_t* correct = nullptr);
  /// Same without the optimizer step: gradients are left in grads() (for data-parallel strategies).
  float compute_gradients(const Tensor& x, const Tensor& labels, int64_t* correct = nullptr);
  /// The two above, adding the batch's loss sum and metric sums to `sums` (on the model's device;
  /// make_sums() has a slot per metric) instead of returning them: on a GPU the step then queues
  /// its work and returns without waiting for the device (fit() reads the sums only when it
  /// prints). The float versions are these with sums of their own, read back (one mechanism).
  ///@{
  void train_step(const Tensor& x, const Tensor& labels, MetricSums& sums);
  void compute_gradients(const Tensor& x, const Tensor& labels, MetricSums& sums);
  void train_step(const std::vector<Tensor>& xs, const Tensor& labels, MetricSums& sums);
  void compute_gradients(const std::vector<Tensor>& xs, const Tensor& labels, MetricSums& sums);
  void train_step(const std::vector<Tensor>& xs, const std::vector<Tensor>& targets, MetricSums& sums);
  void compute_gradients(const std::vector<Tensor>& xs, const std::vector<Tensor>& targets, MetricSums& sums);
  ///@}
  /// The optimizer step on the gradients in grads() (train_step's last part). Error before compile().
  void apply_gradients();
  /// Gradient accumulation: several micro-batches, one update. Each call runs compute_gradients on
  /// a micro-batch (its metric sums added to `sums` as a batch of its own) and adds its gradients,
  /// scaled by its rows / batch_rows (its share of a mean over batch_rows rows: the whole batch's,
  /// or any denominator), to the accumulation; finish_accumulation() then leaves their sum in
  /// grads() for apply_gradients(). The micro-batches are added as the batch's pairwise tree
  /// (core/pairwise_sum.h): on the CPU, micro-batches of a power-of-two number of 16-row groups
  /// (16, 32, 64 rows) making up a power-of-two batch give the whole batch's gradients bit for bit
  /// (a scaling by a power of two is exact; not under mixed_bf16, whose Dense and convolution weight
  /// gradients are one product over a batch), others the same to rounding. BatchNormalization's
  /// statistics are each micro-batch's own, and a regularizer's gradient is added per micro-batch
  /// (scaled as the rest). ArgumentError for batch_rows < 1.
  ///@{
  void accumulate_gradients(const Tensor& x, const Tensor& labels, MetricSums& sums, int64_t batch_rows);
  void accumulate_gradients(const std::vector<Tensor>& xs, const std::vector<Tensor>& targets, MetricSums& sums,
                            int64_t batch_rows);
  /// grads() = the accumulated sum; returns how many micro-batches it holds, and starts a new
  /// accumulation. ArgumentError when none was accumulated.
  int64_t finish_accumulation();
  ///@}
  /// Inference on one batch, adding its loss and metric sums to `sums` (what evaluate() runs per
  /// batch; it uses a loss object of its own, not the training step's).
  ///@{
  void evaluate_batch(const Tensor& x, const Tensor& labels, MetricSums& sums);
  void evaluate_batch(const std::vector<Tensor>& xs, const Tensor& labels, MetricSums& sums);
  void evaluate_batch(const std::vector<Tensor>& xs, const std::vector<Tensor>& targets, MetricSums& sums);
  ///@}

  /// @name CPU micro-batches
  /// On the CPU, a batch of more than `rows` rows runs through compute_gradients/train_step,
  /// evaluate_batch/evaluate and predict as consecutive slices of at most `rows` rows: the
  /// gradients are summed over the slices and the loss is the mean over the whole batch, so the
  /// step means what it meant; each layer's activations then stay the size of a slice, which
  /// keeps them in the cores' caches (docs/benchmarks.md measures it) and the process's memory small. Only for
  /// row-major inputs (the loaders' and predict's) and when every layer's rows are independent in that mode
  /// (Layer::rows_independent: not BatchNormalization or Dropout in training); then the results equal the whole batch's
  /// bit for bit where each slice is a power-of-two number of groups of the batch's sum order (below; 64 rows: four),
  /// else up to the order of float sums, and are the same bits from run to run. 0: whole batches. Default 64, where a
  /// slice's activations (the layers' outputs per row, times 64) outnumber the parameters (an MLP whose weights
  /// outweigh its activations runs whole batches unless set_cpu_micro_batch asks otherwise). GPUs always run whole
  /// batches. The batch's sum order (core/pairwise_sum.h): every Conv2D and Dense CPU weight gradient sums a batch's
  /// rows in groups of 16 added as a pairwise tree ((g0 + g1) + (g2 + g3), ...), the slices' gradients are added as the
  /// same tree, and so is the all-reduce's sum over replicas. A replica whose share of the batch is an aligned
  /// power-of-two number of groups then sums a subtree of the one model's tree, and Mirrored and MultiWorker compute
  /// the one model's gradient bit for bit under either convolution policy where each group's kernels give the same bits
  /// at any thread count (Ember's do; oneDNN's weight gradient, for shapes no Ember kernel takes, may not:
  /// tests/distribute, docs/architecture.md). Under Exact (core/runtime.h) a training batch also always runs in slices
  /// of kExactSliceRows rows, whatever this setting.
  /// @{

  static constexpr int64_t kExactSliceRows = 16;  ///< rows per slice of a CPU training batch under Exact
  /// Slices of at most `rows` rows (0: whole batches; ArgumentError when negative); see above.
  void set_cpu_micro_batch(int64_t rows);
  int64_t cpu_micro_batch() const;  ///< The rows per slice (64 by default).
  /// @}

  // --- CPU threads ---------------------------------------------------------------------------
  /// The CPU threads this model's calls run on: fit, evaluate, predict, train_step and the rest
  /// apply it to the thread they run on (OpenMP's setting is per thread) and restore that
  /// thread's after. 0 (the default): the process's set_num_threads (core/runtime.h), or the
  /// calling thread's OpenMP setting while that was never called. Two models trained at once from
  /// two threads share the cores with 1 each on a 2-core machine (docs/usage.md). A predict whose
  /// work is too small to split (under kSplitMacs multiply-adds per forward pass) runs on one thread
  /// whatever the setting: its fork and join would cost more than they save, and on a busy
  /// machine a split waits for a thread the OS has parked. kFreeCores (core/runtime.h): the cores other
  /// processes leave free, counted when a fit or evaluate starts. ArgumentError for other n < 0.
  /// @{
  void set_num_threads(int n);
  int num_threads() const;                          ///< The model's setting as it applies now (resolved as above).
  static constexpr int64_t kSplitMacs = 8'000'000;  ///< a predict below this runs on one thread
  /// The multiply-adds of one sample's forward pass, estimated from the layers' parameters and
  /// output shapes (each parameter used once per output position: exact for Conv2D and Dense,
  /// rough for attention, whose T x T products it leaves out, and for tables); 0 before build().
  int64_t macs_per_sample() const;
  /// @}

  // --- Precision ----------------------------------------------------------------------------
  /// This model's precision policy (core/runtime.h, Precision): its calls run under it whatever the
  /// process's set_precision says; nullopt (the default) follows the process's. The parameters
  /// stay fp32 either way, so a model trained under one policy saves, loads and runs under the other.
  /// @{
  void set_precision(std::optional<Precision> policy) { precision_ = policy; }
  /// The policy this model's calls run under: its own, else the process's.
  Precision precision() const { return precision_ ? *precision_ : ::ember::precision(); }
  /// @}

  // --- CPU layer fusion ---------------------------------------------------------------------
  /// On the CPU, a Conv2D followed by a MaxPool2D whose windows tile its output (stride = pool
  /// size, no padding) runs as one pass per image when the convolution is a few multiply-adds
  /// per output (C*R*S <= 32: a first layer on grey or RGB images) and is the model's first layer
  /// (no input gradient): its output then never exists in memory (docs/benchmarks.md gives the
  /// cost). The results equal the unfused pair's up
  /// to the order of float sums, except that a NaN stays a NaN (the unfused pair's ReLU and pool
  /// drop it); the same bits from run to run. fused_with_next(i): layers i and i + 1 run fused
  /// here. On by default; GPUs run the layers one by one, and so does a pair whose convolution was
  /// asked for its input gradient (set_needs_input_grad(true)) after build.
  void set_cpu_fusion(bool on) { cpu_fusion_ = on; }
  bool cpu_fusion() const { return cpu_fusion_; }  ///< Whether CPU layer fusion is on (see set_cpu_fusion()).
  bool fused_with_next(size_t i) const;            ///< Whether layers i and i + 1 run fused (see set_cpu_fusion()).
  /// Layers [begin, end) forward (x: layer begin - 1's output, or the model's input when begin is
  /// 0) and backward (dy: layer end - 1's output gradient; returns layer begin's input gradient,
  /// undefined for the first layer), fusing the pairs inside the range as forward() does: what a
  /// profile times. A forward range that splits a pair runs it unfused; a backward range must not
  /// split a pair that ran fused (ArgumentError).
  ///@{
  const Tensor& forward_layers(const Tensor& x, bool training, size_t begin, size_t end);
  const Tensor& backward_layers(const Tensor& dy, size_t begin, size_t end);
  ///@}

  /// The flat buffers. Every view in them (a parameter, its gradient, a state tensor) starts on a
  /// kViewAlignment-byte boundary of the buffer (cuDNN's and cuBLAS's vectorised kernels want
  /// aligned pointers; the buffers' own starts are 256-byte aligned on a GPU, 64 on the CPU), so
  /// the buffers hold zero padding between views: params().numel() >= num_params(). The padding
  /// stays zero (no layer writes it, its gradient is zero, so every optimizer leaves it at zero).
  static constexpr int64_t kViewAlignment = 256;
  /// The floats a view of n values takes, padding included.
  static constexpr int64_t aligned_view(int64_t n) {
    constexpr int64_t per = kViewAlignment / static_cast<int64_t>(sizeof(float));
    return (n + per - 1) / per * per;
  }
  Tensor& params();              ///< The flat parameter buffer (f32, padded).
  const Tensor& params() const;  ///< The flat parameter buffer (f32, padded).
  Tensor& grads();               ///< The flat gradient buffer, of params()' layout.
  /// Freezing (Layer::set_trainable): views of grads() that hold the trainable layers' gradients,
  /// in buffer order (the whole buffer when every layer trains, none when no layer does): what a
  /// data-parallel strategy all-reduces.
  std::vector<Tensor> trainable_gradients();
  /// A flat buffer of params()' layout (the optimizers' state) without its padding (num_params()
  /// values, the layers' parameters in order: what a checkpoint stores), and back.
  ///@{
  Tensor pack_params_layout(const Tensor& padded) const;
  Tensor unpack_params_layout(const Tensor& packed) const;
  ///@}
  Optimizer* optimizer() { return optimizer_.get(); }  ///< The compiled optimizer (null before compile).
  /// The layers in the order they run (a graph model's topological order; no Input).
  const std::vector<std::shared_ptr<Layer>>& layers() const;
  /// Per layer, what it is called on: an index into layers(), or -1 - k for the model's input k.
  const std::vector<int>& layer_inputs(size_t i) const;
  /// Layer i runs a later call of a shared layer (a twin: the parameters and state of layer
  /// shared_with(i), its first call's); layer_ref(i) names the call: the layer's name for the
  /// first call in run order, "name[1]", "name[2]" ... for the later ones (Keras' node index; the
  /// summary appends "[0]" to the first, checkpoints do not).
  ///@{
  bool is_twin(size_t i) const;
  int shared_with(size_t i) const;
  std::string layer_ref(size_t i, const char* first = "") const;
  ///@}
  /// True when every layer takes the one before it (or the input, the first): a stack.
  bool is_linear() const;
  /// Made from symbolic tensors (a Sequential is not), and the name of its input ("input_1").
  bool is_graph() const;
  const std::string& input_name() const;  ///< Input 0's name ("input_1").
  const Shape& input_shape() const;       ///< Input 0's per-sample shape.
  /// Every input, in the order a batch gives them ("input_1", "input_2", ... unless named).
  ///@{
  size_t num_inputs() const;
  const std::vector<std::string>& input_names() const;
  const std::vector<Shape>& input_shapes() const;
  ///@}
  const Shape& output_shape() const;  ///< output 0's
  /// Every output (per sample), its name (its layer's, after build) and its layer's index.
  ///@{
  size_t num_outputs() const;
  std::vector<Shape> output_shapes() const;
  std::vector<std::string> output_names() const;
  const std::vector<int>& output_layers() const;
  ///@}
  const std::vector<Shape>& layer_output_shapes() const;  ///< per sample
  int64_t num_params() const;                             ///< trainable values (the padding not counted)
  /// The flat non-trainable state (see StateSpec): every layer's, averaged statistics first.
  ///@{
  Tensor& state();
  const Tensor& state() const;
  ///@}
  /// The part of state() that replicas average after every step (a view; may be empty).
  Tensor averaged_state() const;
  /// Elements of averaged state: summary()'s "Non-trainable params".
  int64_t num_non_trainable() const;
  /// "<layer>/<state>" views ("batch_normalization/moving_mean"), in layer order (the buffer
  /// holds every layer's averaged statistics first).
  std::vector<std::pair<std::string, Tensor>> named_state() const;
  /// Replica `stream` of a data-parallel strategy: random layers (Dropout) draw from their own
  /// streams per replica, so replicas do not drop the same units of their shards. 0 by default.
  void set_random_stream(uint64_t stream);
  /// The seed random layers draw from (build()'s seed); checkpoints save it and load() sets it, so
  /// a resumed run drops what the uninterrupted one would have, whatever seed it was built with.
  uint64_t random_seed() const { return seed_; }
  void set_random_seed(uint64_t seed);  ///< Sets random_seed() (the random layers are seeded again).
  /// "kernel"/"bias" views per layer, named "<layer>/<param>", in buffer order.
  std::vector<std::pair<std::string, Tensor>> named_params() const;
  /// Per layer: name, type, device and the kernel that runs it at this batch size
  /// (--log-device-placement).
  std::string placement_report(int64_t batch_size) const;

 protected:
  Model();  ///< Sequential: its layers come by add() and are called in a line at build()
  /// Appends a layer to a model whose graph is a line (Sequential::add).
  Layer& append(std::shared_ptr<Layer> layer, const char* who);
  std::string name_;  ///< name()'s value

 private:
  // The parts (each header says what it owns and knows); this class builds them, runs the step in
  // order and answers for them.
  detail::Part<detail::Topology> topo_;             // the graph: layer calls, inputs, outputs, shapes, twins, names
  detail::Part<detail::ParamArena> arena_;          // the flat parameter, gradient and state buffers
  detail::Part<detail::Executor> exec_;             // the plan and the forward and backward passes
  detail::Part<detail::CompiledOutputs> compiled_;  // compile()'s losses and metrics per output
  detail::Part<detail::MicroBatches> batches_;      // how a CPU batch runs: whole or in slices
  detail::Part<detail::GradientTree> accumulated_;  // accumulate_gradients' micro-batches

  // This model's identity for Layer::owner (moves with the model).
  std::shared_ptr<const int> identity_ = std::make_shared<const int>(0);
  int nested_calls_ = 0;  // times this model was called as a layer (operator())
  // input() and layer_output()'s graph over this built model's layers (made on first use).
  std::vector<SymbolicTensor> graph_inputs_, graph_calls_;
  std::vector<SymbolicTensor> built_calls(const std::vector<SymbolicTensor>& xs) const;  // the layers, called on xs
  size_t layer_index(const std::string& name, const char* what) const;
  bool owns_layers() const;  // false once another model adopted them
  uint64_t seed_ = 0, random_stream_ = 0;
  Device device_ = Device::cpu();
  std::unique_ptr<Optimizer> optimizer_;
  std::vector<std::pair<std::string, bool>> decay_overrides_;  // set_weight_decay's, in call order
  // load() before compile(): the checkpoint's optimizer state, restored by compile().
  std::optional<SavedOptimizerState> saved_optimizer_;
  friend void detail::keep_optimizer_state(Model& model, std::optional<SavedOptimizerState> saved);
  bool cpu_fusion_ = true;
  int threads_ = 0;                     // set_num_threads (0: the process's)
  std::optional<Precision> precision_;  // set_precision (nullopt: the process's)
  // The count a call runs on (0: leave the thread's as it is); kFreeCores counted afresh with `fresh`.
  int call_threads(bool fresh = false) const {
    return detail::resolve_threads(threads_ != 0 ? threads_ : detail::process_threads(), fresh);
  }
  // The thread that runs a call on this model now, and how deep (fit runs evaluate inside it).
  // Moving a model moves no call (a model is not moved while one runs).
  struct CallOwner {
    std::atomic<std::thread::id> thread{};
    int depth = 0;
    CallOwner() = default;
    CallOwner(CallOwner&&) noexcept {}
    CallOwner& operator=(CallOwner&&) noexcept { return *this; }
  };
  mutable CallOwner call_owner_;
  // The calling thread's claim on the model for one call (Error when another thread holds it).
  class Claim {
   public:
    Claim(const Model& model, const char* what);
    ~Claim();
    Claim(const Claim&) = delete;
    Claim& operator=(const Claim&) = delete;

   private:
    CallOwner& owner_;
  };
  // One model call's scope: the claim, then the thread count (detail::ThreadScope).
  class Call {
   public:
    Call(const Model& model, const char* what, int threads) : claim_(model, what), threads_(threads) {}

   private:
    Claim claim_;
    detail::ThreadScope threads_;
  };

  void require_built(const char* what) const;
  void require_optimizer() const;                              // Error before compile()
  void require_heads(const char* what) const;                  // Error unless compiled with a head per output
  void build_model(const Shape* sample_shape, uint64_t seed);  // null: a graph model's own input shapes
  void seed_random_layers();
  void set_optimizer(std::unique_ptr<Optimizer> optimizer);  // compile's optimizer part (a loaded state)
  size_t logit_layers() const;                               // layers before the loss: all but a final Softmax
  Layer* final_softmax() const;  // the final Softmax when the loss reads its input, else null
  bool fuses() const { return cpu_fusion_ && device_.is_cpu(); }  // the plan's rewrites run now
  // Layers [begin, end) on xs (Executor::forward); release: an inference pass that frees as it goes.
  const Tensor& run_layers(std::span<const Tensor> xs, bool training, size_t begin, size_t end, const char* what,
                           bool release = false);
  const Tensor& backward_pass(std::span<const Tensor* const> seeds, size_t begin, size_t end);
  // Rows per slice for a batch of xs (its rows when it runs whole); a sliced batch's targets are
  // checked whole first.
  int64_t slice_rows(std::span<const Tensor> xs, std::span<const Tensor> ys, bool training) const;
  void compute_gradients_of(std::span<const Tensor> xs, std::span<const Tensor> ys, MetricSums& sums);
  void evaluate_batch_of(std::span<const Tensor> xs, std::span<const Tensor> ys, MetricSums& sums);
  std::vector<Tensor> predict_of(std::span<const Tensor> xs, int64_t batch_size);
};

}  // namespace ember
