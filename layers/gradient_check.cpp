// Central differences against backward() (see gradient_check.h).
#include "gradient_check.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "../core/error.h"
#include "../core/rng.h"

namespace ember {

std::string GradientCheckReport::summary() const {
  std::string s = passed ? "passed" : "FAILED: " + failure;
  s += " (" + std::to_string(checked) + " checked, " + std::to_string(skipped) + " skipped at kinks, max error " +
       std::to_string(max_error) + (worst.empty() ? "" : ", worst " + worst) + ")";
  return s;
}

namespace detail {

void check_values(const std::function<double()>& f, float* values, int64_t n, const float* analytic,
                  const std::string& what, const GradientCheckOptions& o, GradientCheckReport& r, double floor) {
  // First every element's one-sided slopes, then the judgement: a floor of 0 is the scale of the
  // gradient itself (the largest |numeric| or |analytic|), known only once all are measured.
  struct Slopes {
    double left, right, numeric;
  };
  // The one-sided slopes and the central difference at v +- step (the steps actually taken in float).
  const auto slopes_at = [&](float* v, double f0, double step) {
    const float saved = *v;
    *v = static_cast<float>(saved + step);
    const double h_plus = double(*v) - double(saved);
    const double fp = f();
    *v = static_cast<float>(saved - step);
    const double h_minus = double(saved) - double(*v);
    const double fm = f();
    *v = saved;
    return Slopes{(f0 - fm) / h_minus, (fp - f0) / h_plus, (fp - fm) / (h_plus + h_minus)};
  };
  std::vector<Slopes> slopes(static_cast<size_t>(n));
  const double f0 = f();
  double largest = 0;
  for (int64_t i = 0; i < n; ++i) {
    Slopes& s = slopes[static_cast<size_t>(i)];
    s = slopes_at(values + i, f0, o.step);
    largest = std::max({largest, std::abs(s.numeric), std::abs(double(analytic[i]))});
  }
  // A floor of 0: the gradient's own scale, but not below what float32 rounding in the forward
  // leaves in a central difference (about 2^-24 of f over the step), times 1 / 1e-2, so that a
  // gradient that is truly zero (its numeric values that noise alone) passes.
  const double resolution = 100 * std::ldexp(std::abs(f0), -24) / o.step;
  const double own = std::max(largest, resolution);
  const double scale = floor > 0 ? floor : (own > 0 ? own : 1.0);
  for (int64_t i = 0; i < n; ++i) {
    const Slopes& s = slopes[static_cast<size_t>(i)];
    const double bound = o.kink_threshold * std::max(scale, std::abs(s.right) + std::abs(s.left));
    if (std::abs(s.right - s.left) > bound) {
      // Curvature or a kink? A smooth function's slopes differ by about f'' h, half that at half
      // the step, and its central differences agree at both steps; a kink's jump stays whole (or
      // leaves the half step) and moves the central difference.
      const Slopes half = slopes_at(values + i, f0, o.step / 2);
      // The central differences must agree to 1/8 of the bound: a smooth function's move,
      // f''' h^2 / 8, is far below it, while a small jump J at t h (which the first test can take
      // for curvature near t = 1/3) moves them by J t / 2; what gets through is then off by at
      // most half the bound.
      const bool curvature = std::abs((s.right - s.left) - 2 * (half.right - half.left)) <= bound &&
                             std::abs(s.numeric - half.numeric) <= bound / 8;
      if (!curvature) {
        ++r.skipped;
        continue;
      }
    }
    const double err = std::abs(double(analytic[i]) - s.numeric) / std::max(scale, std::abs(s.numeric));
    ++r.checked;
    if (!(err <= r.max_error)) {  // NaN counts as the worst
      r.max_error = std::isnan(err) ? std::numeric_limits<double>::infinity() : err;
      r.worst = what + "[" + std::to_string(i) + "]: analytic " + std::to_string(analytic[i]) + ", numeric " +
                std::to_string(s.numeric);
    }
  }
}

void conclude(GradientCheckReport& r, const GradientCheckOptions& o) {
  const double total = static_cast<double>(r.checked + r.skipped);
  if (r.max_error > o.tolerance) {
    r.passed = false;
    r.failure = "an analytic gradient is off by more than the tolerance " + std::to_string(o.tolerance);
  } else if (static_cast<double>(r.skipped) > o.max_skipped_fraction * total) {
    r.passed = false;
    r.failure = std::to_string(r.skipped) + " of " + std::to_string(r.skipped + r.checked) +
                " elements sat on kinks: the check proves too little";
  } else if (r.checked == 0) {
    r.passed = false;
    r.failure = "nothing was checked";
  }
}

}  // namespace detail

GradientCheckReport check_gradients(Layer& layer, const Shape& sample_shape, const GradientCheckOptions& o) {
  EMBER_CHECK(o.step > 0 && o.tolerance > 0 && o.batch > 0, ArgumentError,
              "check_gradients: step, tolerance and batch must be > 0");
  layer.build(sample_shape);
  std::vector<Tensor> params, grads, state;
  for (const auto& spec : layer.param_specs()) {
    params.push_back(Tensor::zeros(spec.shape, DType::F32, Device::cpu()));
    grads.push_back(Tensor::zeros(spec.shape, DType::F32, Device::cpu()));
  }
  layer.bind(params, grads);
  for (const auto& spec : layer.state_specs()) {
    state.push_back(Tensor::zeros(spec.shape, DType::F32, Device::cpu()));
    state.back().fill(spec.init);
  }
  layer.bind_state(state);
  layer.set_random_seed(o.seed);
  Rng rng(o.seed);
  layer.init_params(rng);
  const auto specs = layer.param_specs();
  for (size_t i = 0; i < specs.size(); ++i)  // zero-initialised parameters (biases) away from zero
    if (specs[i].init == ParamSpec::Init::Zeros) {
      Tensor p = layer.params()[i];  // a view: writes reach the layer
      for (int64_t j = 0; j < p.numel(); ++j) p.f32()[j] = rng.uniform(-0.5f, 0.5f);
    }
  return check_gradients(layer,
                         Tensor::uniform(sample_shape.with_batch(o.batch), -1.0f, 1.0f, o.seed + 1, Device::cpu()), o);
}

GradientCheckReport check_gradients(Layer& layer, Tensor x, const GradientCheckOptions& o) {
  EMBER_CHECK(x.dtype() == DType::F32 && x.device().is_cpu() && x.layout() == Layout::RowMajor, ShapeError,
              "check_gradients: x must be f32 row-major on the cpu, got " + x.str());
  const Tensor& y0 = layer.forward(x, true);
  const Tensor r = Tensor::uniform(y0.shape(), -1.0f, 1.0f, o.seed + 2, Device::cpu());  // dy of sum(y * R)
  const std::vector<float> w = r.to_vector();
  const auto f = [&] {
    const std::vector<float> y = layer.forward(x, true).to_vector();  // row-major logical order
    double s = 0;
    for (size_t i = 0; i < y.size(); ++i) s += double(y[i]) * double(w[i]);
    return s;
  };
  f();
  const Tensor& dx = layer.backward(r);
  const std::vector<float> dx_v = layer.needs_input_grad() ? dx.to_vector() : std::vector<float>{};
  std::vector<std::vector<float>> dparams;
  for (const auto& g : layer.grads()) dparams.push_back(g.to_vector());
  GradientCheckReport report;
  if (layer.needs_input_grad())
    detail::check_values(f, x.f32(), x.numel(), dx_v.data(), layer.type() + " input", o, report);
  const auto specs = layer.param_specs();
  for (size_t i = 0; i < specs.size(); ++i) {
    Tensor p = layer.params()[i];
    detail::check_values(f, p.f32(), p.numel(), dparams[i].data(), layer.type() + " " + specs[i].name, o, report);
  }
  detail::conclude(report, o);
  return report;
}

GradientCheckReport check_gradients(Loss& loss, Tensor outputs, const Tensor& targets, const GradientCheckOptions& o) {
  EMBER_CHECK(outputs.dtype() == DType::F32 && outputs.device().is_cpu() && outputs.layout() == Layout::RowMajor,
              ShapeError, "check_gradients: outputs must be f32 row-major on the cpu, got " + outputs.str());
  Tensor z = outputs.clone();  // perturbed in place: the caller's stays as it was
  MetricSums sums(Device::cpu());
  loss.forward(z, targets, sums);
  const std::vector<float> analytic = loss.backward(0).to_vector();
  std::unique_ptr<Loss> probe = loss.clone();
  MetricSums probe_sums(Device::cpu());
  const double rows = static_cast<double>(std::max<int64_t>(z.dim(0), 1));
  const auto f = [&] {  // the mean loss in double, from the loss's own sums
    probe_sums.reset();
    probe->forward(z, targets, probe_sums);
    return probe_sums.read().loss_sum / rows;
  };
  GradientCheckReport report;
  detail::check_values(f, z.f32(), z.numel(), analytic.data(), loss.name(), o, report, /*floor=*/0.0);
  detail::conclude(report, o);
  return report;
}

}  // namespace ember
