/// @file
/// Optimizer: updates the model's one flat parameter buffer from its one flat gradient buffer.
/// State (Adam's m and v, SGD's velocity) is flat too, so a step is one fused loop and a
/// checkpoint is a few buffers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../core/tensor.h"

namespace ember {

/// What every optimizer applies before its own update (Keras' optimizer arguments of these names;
/// 0 turns each off), in this order:
///  1. clipvalue:       g = clamp(g, -clipvalue, clipvalue)
///  2. global_clipnorm: g *= min(1, global_clipnorm / ||g||) over the whole gradient buffer (all
///                      layers: TF's clip_by_global_norm; a NaN or infinite norm makes every
///                      gradient NaN)
///  3. weight_decay:    p -= learning_rate * weight_decay * p, decoupled from the gradient (AdamW;
///                      Keras 3 and PyTorch's AdamW), only where the decay mask is 1 (a Model decays
///                      kernels, not biases or normalisation parameters: Model::set_weight_decay)
/// Clipping rewrites the gradient buffer in place (on a GPU on the device, with no host wait, so a
/// captured step clips too). Under a data-parallel strategy it runs after the all-reduce.
struct Regularization {
  float weight_decay = 0.0f;     ///< p -= learning_rate * weight_decay * p (step 3 above; 0: off)
  float global_clipnorm = 0.0f;  ///< the largest norm of the whole gradient (step 2 above; 0: off)
  float clipvalue = 0.0f;        ///< the largest magnitude of a gradient element (step 1 above; 0: off)
  bool active() const { return weight_decay > 0 || global_clipnorm > 0 || clipvalue > 0; }  ///< Any of the three on.
  /// ArgumentError naming `who` for a negative or non-finite value.
  void validate(const std::string& who) const;
};

/// An optimizer: updates a model's flat parameter buffer from its flat gradient buffer (see
/// optimizer.h). A subclass implements step() and the state and hyper-parameter accessors.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  /// The optimizer's name ("Adam", "SGD", ...): what checkpoints store and compile() matches.
  virtual std::string name() const = 0;
  /// One update: params -= f(grads, state). Both f32, same element count, same device.
  virtual void step(Tensor& params, const Tensor& grads) = 0;
  /// The host's part of a step whose device work ran without step(): a replay of a captured CUDA
  /// graph containing one (CudaGraph). Counts the iteration; step-dependent values of the update
  /// must already be on the device (Adam's are).
  virtual void count_step() { ++iterations_; }
  virtual float learning_rate() const = 0;  ///< The learning rate of the next step.
  /// Sets the learning rate of the next steps (a schedule calls it; on a GPU see sync_device_rate()).
  virtual void set_learning_rate(float lr) = 0;
  /// On a GPU the updates read the learning rate from device memory, written (queued on the
  /// stream, no host wait) by step() when learning_rate() has changed. A captured CUDA graph of a
  /// step therefore follows a per-step schedule without a new capture, as long as this runs before
  /// each replay (fit does; a no-op before the first GPU step and when the rate is unchanged). Not
  /// inside a capture: a step captured before any eager step, or after the rate changed without
  /// this, is an Error (the write would be replayed by every launch).
  void sync_device_rate();
  /// Named state buffers (allocated on the first step) and hyper-parameters, for checkpoints.
  virtual std::vector<std::pair<std::string, Tensor>> state() const = 0;
  /// Restores one state buffer by name (checkpoints); throws ArgumentError for an unknown name.
  virtual void set_state(const std::string& name, const Tensor& values) = 0;
  /// The hyper-parameters by name ("learning_rate", "beta1", ...), saved in checkpoints.
  virtual std::vector<std::pair<std::string, double>> hyperparameters() const = 0;
  /// The clipping and weight decay applied before each update (none by default).
  virtual const Regularization& regularization() const { return no_regularization_; }
  /// Which parameters decay: f32, one per parameter, 1 or 0, on the parameters' device. Without
  /// one, every parameter decays. Model sets it (kernels and embedding tables only, unless told otherwise).
  void set_decay_mask(Tensor mask);
  const Tensor& decay_mask() const { return decay_mask_; }  ///< See set_decay_mask() (undefined: none).
  /// A part of the flat buffers: `count` values from `offset`.
  struct Span {
    int64_t offset = 0;  ///< the first value's index
    int64_t count = 0;   ///< the values
  };
  /// The parts of the buffers a step updates and decays, in buffer order (nullopt, the default: all
  /// of it). A Model sets its trainable layers' (Layer::set_trainable): a frozen layer's
  /// parameters and its slots of the state stay as they are. A subclass applies its update to these
  /// parts only (for_each_span); clipping still sees the whole gradient (a frozen layer's is zero).
  void set_update_spans(std::optional<std::vector<Span>> spans) { spans_ = std::move(spans); }
  const std::optional<std::vector<Span>>& update_spans() const { return spans_; }  ///< See set_update_spans().
  int64_t iterations() const { return iterations_; }  ///< The steps taken (Keras' optimizer.iterations).
  /// Sets the step count (a checkpoint's); a state change (state_version()).
  void set_iterations(int64_t n) {
    iterations_ = n;
    ++state_version_;
  }
  /// Changes whenever the state is replaced from outside (set_iterations, set_state): a captured
  /// CUDA graph of a step reads the old buffers and counts, so fit captures it again.
  int64_t state_version() const { return state_version_; }
  /// Unique per optimizer object in this process (never reused, unlike an address).
  uint64_t id() const { return id_; }

 protected:
  /// Validates a step's arguments and allocates `state` buffers (zeros) on first use.
  void prepare(const Tensor& params, const Tensor& grads, std::vector<Tensor*> state);
  /// Copies `values` (f32, flat) into `slot`, allocating it.
  void restore(Tensor& slot, const Tensor& values);
  /// Applies `r` (see Regularization) to this step's gradients and parameters, with the step's
  /// learning rate: what step() does first.
  void regularize(Tensor& params, const Tensor& grads, float learning_rate, const Regularization& r);
  /// Calls f(offset, count) for each part of an n-value buffer a step updates (set_update_spans).
  template <class F>
  void for_each_span(int64_t n, F&& f) const {
    if (!spans_) {
      f(int64_t{0}, n);
      return;
    }
    for (const Span& s : *spans_)
      if (s.count > 0) f(s.offset, s.count);
  }
  /// On a GPU: learning_rate() on params' device (allocated and written on first use, rewritten
  /// when it changed), what the update kernels read.
  const float* device_rate(const Tensor& params);
  int64_t iterations_ = 0;     ///< iterations()' value: step() counts it
  int64_t state_version_ = 0;  ///< bumped by restore() and set_iterations()

 private:
  static uint64_t next_id();
  uint64_t id_ = next_id();
  Tensor decay_mask_;
  std::optional<std::vector<Span>> spans_;  // set_update_spans (nullopt: the whole buffer)
  Tensor norm_scratch_;                     // on a GPU: the global norm's partial sums and clip factor
  Tensor device_rate_;                      // on a GPU: the learning rate the kernels read (f32, one value)
  float device_rate_value_ = 0.0f;          // what device_rate_ holds (when defined)
  static inline const Regularization no_regularization_{};
};

}  // namespace ember
