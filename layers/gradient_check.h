/// @file
/// check_gradients: a layer's or a loss's backward against central differences of its forward,
/// for your own layers and losses (what the library's own tests run on every built-in).
///
/// @code
///   ChannelScale layer;                                   // your Layer
///   GradientCheckReport r = check_gradients(layer, Shape{3, 4, 4});
///   if (!r.passed) std::printf("%s\n", r.summary().c_str());
/// @endcode
///
/// The layer is built for `sample_shape` on its own (parameters, gradients and state of its own,
/// Glorot kernels, biases drawn in [-0.5, 0.5] so none sits at zero), run on a random batch in
/// training mode, and d(sum(y * R))/dx and d/d(every parameter) for a random R compared with
/// (f(v + h) - f(v - h)) / 2h, element by element. A loss: d(mean loss)/d(outputs).
///
/// Tolerances (GradientCheckOptions' defaults): the step h = 1e-2 is big enough that float32
/// rounding in a forward (~1e-6 relative) is small next to the difference, small enough that
/// smooth functions stay close to linear over it. Each tensor (the input gradient, each
/// parameter's) is judged at its own scale s, its largest |numeric| or |analytic| element (not
/// below the check's resolution, 100 x 2^-24 |f| / h, so that a gradient that is truly zero, its
/// numeric values rounding noise, passes): an element passes when |analytic - numeric| /
/// max(s, |numeric|) <= 1e-2. Float32 rounding in the forward leaves far less at this step, and
/// a wrong index, scale or sign is far beyond it, also where every element is small (an
/// average's 1/20 taken as 1/19 is 5% off). The loss is read in double from its sums. Kinks: where
/// the one-sided slopes differ by more than 1e-2 of the scale, the element is probed again at
/// h / 2: curvature (a smooth function: the difference f'' h halves with the step, and the central
/// differences at h and h / 2 agree to 1/8 of the 1e-2) is checked as any element; a kink inside
/// the step (ReLU at 0, a max that changes its winner: the slope's jump stays whole, or the
/// central difference moves) has no derivative there and is skipped. A check that skips more than
/// a quarter of its elements fails (it would prove too little).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "../core/tensor.h"
#include "layer.h"
#include "loss.h"

namespace ember {

/// The step, tolerances and random draws of check_gradients() (see gradient_check.h).
struct GradientCheckOptions {
  double step = 1e-2;       ///< h of the central differences (f(v + h) - f(v - h)) / 2h
  double tolerance = 1e-2;  ///< the largest error an element passes with (|analytic - numeric| / max(scale, |numeric|))
  /// One-sided slopes that differ by more than this (of the scale) are probed at step / 2: a kink
  /// there is skipped, curvature is checked.
  double kink_threshold = 1e-2;
  double max_skipped_fraction = 0.25;  ///< a check that skips more of its elements fails
  int64_t batch = 2;                   ///< rows of the random input batch (layers)
  uint64_t seed = 1;                   ///< seeds the parameters, the input batch and R
};

/// What check_gradients() found.
struct GradientCheckReport {
  bool passed = true;  ///< every checked element within the tolerance, and not too many skipped
  /// Elements compared, and elements skipped at kinks.
  ///@{
  int64_t checked = 0, skipped = 0;
  ///@}
  double max_error = 0;         ///< the largest |analytic - numeric| / max(scale, |numeric|) (see gradient_check.h)
  std::string worst;            ///< where, with both values
  std::string failure;          ///< why it failed ("" when it passed)
  std::string summary() const;  ///< "passed (40 checked, 0 skipped at kinks, max error ...)" or "FAILED: ..."
};

/// Builds `layer` for `sample_shape` and checks its input gradient (when it computes one) and every
/// parameter's gradient. The layer must not belong to a model.
GradientCheckReport check_gradients(Layer& layer, const Shape& sample_shape, const GradientCheckOptions& options = {});
/// The same on a layer already built and bound (by a model, or by you), at input x (f32, row-major,
/// on the CPU; perturbed in place and restored).
GradientCheckReport check_gradients(Layer& layer, Tensor x, const GradientCheckOptions& options = {});
/// Checks `loss`'s backward() at `outputs` (f32, row-major, on the CPU) against `targets`.
GradientCheckReport check_gradients(Loss& loss, Tensor outputs, const Tensor& targets,
                                    const GradientCheckOptions& options = {});

namespace detail {
// The comparison itself, over `values` perturbed in place (restored after): what both checks
// run, and the library's tests through tests/test_util.h. `what` names the values in reports.
// Errors are |analytic - numeric| / max(floor, |numeric|); a floor of 0 takes the gradient's own
// scale (the largest |numeric| or |analytic| element), so an all-zero gradient fails too.
void check_values(const std::function<double()>& f, float* values, int64_t n, const float* analytic,
                  const std::string& what, const GradientCheckOptions& options, GradientCheckReport& report,
                  double floor = 0.0);
// Finishes a report: skipped fraction, nothing checked.
void conclude(GradientCheckReport& report, const GradientCheckOptions& options);
}  // namespace detail

}  // namespace ember
