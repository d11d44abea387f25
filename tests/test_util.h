// Helpers shared by the tests: random tensors, standalone layers, and the finite-difference
// gradient checker (central differences, relative tolerance, kink skip).
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ember.h"
#include "layers/geometry.h"

namespace ember::test {

// Two classes of 8x8 u8 images: a bright 3x3 square in the top-left or the bottom-right corner,
// plus noise. A small CNN learns it within a few hundred steps.
Dataset corner_dataset(int64_t n, uint64_t seed);

// A CPU f32 row-major tensor with U(lo, hi) entries.
Tensor random_tensor(const Shape& shape, uint64_t seed, float lo = -1.0f, float hi = 1.0f);

// Builds `layer` for a per-sample shape, gives it its own parameter/gradient/state buffers
// (state at its specs' initial values, the random seed `seed`) and
// Keras-default initialisation (biases and scales then randomised too, so a zero bias or a unit
// scale cannot hide a bug).
// Returns the per-sample output shape.
Shape build_standalone(Layer& layer, const Shape& sample_shape, uint64_t seed);

// Max |a - b| / max(floor, |b|) over two equal-length sequences (relative above the floor,
// absolute below it); a NaN on one side only counts as infinite.
double max_rel_error(std::span<const float> a, std::span<const float> b, double floor = 1.0);
// Element by element, the shares' values added in the batch's pairwise tree (core/pairwise_sum.h):
// what an all-reduce over replicas computes from their gradients.
std::vector<float> pairwise_tree_of(const std::vector<std::vector<float>>& shares);

// Max |a - b| over max |b|: the error of reordered float sums relative to the tensor's scale.
double scaled_error(std::span<const float> a, std::span<const float> b);
// n i32 labels in [0, classes), (7 i + 3) mod classes: every class, no pattern a layer could exploit.
Tensor cycling_labels(int64_t n, int classes);

struct GradCheckOptions {
  // Step: big enough that float32 rounding in a forward pass (~1e-6 relative) is small next to
  // the difference, small enough that smooth parts (softmax) stay close to linear.
  double step = 1e-2;
  // |analytic - numeric| / max(scale, |numeric|) allowed, the scale being the tensor's largest
  // gradient element (layers/gradient_check.h): 1e-2 catches any wrong index, scale or sign.
  double tolerance = 1e-2;
  // One-sided slopes that differ by more than this (of the scale) are probed at half the step: a
  // kink (ReLU at 0, a max that changes its winner) is skipped, curvature checked.
  double kink_threshold = 1e-2;
  // A check that skipped most of its elements proves nothing: fail above this fraction.
  double max_skipped_fraction = 0.25;
};

struct GradCheckResult {
  int checked = 0, skipped = 0;
  double max_error = 0;
  std::string worst;  // description of the worst element
};

// Perturbs each element of `values` in turn, evaluates `loss` and compares the central
// difference against `analytic` (same length). `what` names the tensor in messages.
GradCheckResult check_gradient(const std::function<double()>& loss, std::span<float> values,
                               std::span<const float> analytic, const std::string& what,
                               const GradCheckOptions& opt = {});

// Checks d(sum(layer(x) * R))/d(x) and /d(every parameter) for a fixed random R.
// x is row-major (the public layout). Fails the current test on any mismatch.
void check_layer_gradients(Layer& layer, Tensor x, uint64_t seed, const GradCheckOptions& opt = {});

// The CPU conv2d_backward's weight gradient of g (g.relu set) on random x (after a ReLU: in
// [0, 2)), w, b and dy (seeds seed .. seed + 3), with dy as the layer masks it (zero where the
// forward's output is not positive), for checks against a reference sum.
struct Conv2dBackwardCase {
  Tensor x, dw, db;  // x NHWC
  std::vector<float> masked_dy;
  int64_t masked_out = 0;  // how many of dy's values the mask zeroed
};
Conv2dBackwardCase conv2d_backward_case(const Conv2dShape& g, uint64_t seed);

// Holds the process-wide GPU settings (TF32, deterministic algorithms, cudnnFind, NHWC
// activations, the fused convolution, Dense, loss and advances) as they were when it was made and
// puts them back when it goes, also when an assertion ends a test early: a test's settings never
// reach the tests after it, whatever their order (--gtest_shuffle, --gtest_repeat, a filter).
/// The convolution policy (set_conv_algorithms) set for a scope, and the one before restored at
/// its end, also when an assertion returns early or a call throws.
class ConvAlgorithmsScope {
 public:
  explicit ConvAlgorithmsScope(ConvAlgorithms policy) : saved_(conv_algorithms()) { set_conv_algorithms(policy); }
  ~ConvAlgorithmsScope() { set_conv_algorithms(saved_); }
  ConvAlgorithmsScope(const ConvAlgorithmsScope&) = delete;
  ConvAlgorithmsScope& operator=(const ConvAlgorithmsScope&) = delete;

 private:
  ConvAlgorithms saved_;
};

class GpuSettingsScope {
 public:
  GpuSettingsScope();
  ~GpuSettingsScope();
  GpuSettingsScope(const GpuSettingsScope&) = delete;
  GpuSettingsScope& operator=(const GpuSettingsScope&) = delete;

 private:
  bool tf32_, deterministic_, find_, nhwc_, fused_conv_, fused_dense_, fused_loss_, fused_advance_;
};

}  // namespace ember::test
