// Test helpers (see test_util.h).
#include "test_util.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/pairwise_sum.h"
#include "layers/cpu/conv2d.h"

namespace ember::test {

Dataset corner_dataset(int64_t n, uint64_t seed) {
  Tensor images = Tensor::zeros(Shape{n, 1, 8, 8}, DType::U8);
  Tensor labels = Tensor::zeros(Shape{n}, DType::I32);
  Rng rng(seed);
  uint8_t* px = images.data<uint8_t>();
  for (int64_t i = 0; i < n; ++i) {
    const int label = static_cast<int>(rng.below(2));
    labels.data<int32_t>()[i] = label;
    for (int j = 0; j < 64; ++j) px[i * 64 + j] = static_cast<uint8_t>(rng.below(60));
    const int off = label == 0 ? 0 : 4;
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 3; ++c) px[i * 64 + (off + r) * 8 + off + c] = 200;
  }
  return Dataset(images, labels, 2, "corners");
}

Tensor random_tensor(const Shape& shape, uint64_t seed, float lo, float hi) {
  return Tensor::uniform(shape, lo, hi, seed, Device::cpu());
}

Conv2dBackwardCase conv2d_backward_case(const Conv2dShape& g, uint64_t seed) {
  Conv2dBackwardCase cs;
  cs.x = random_tensor(Shape{g.n, g.c, g.h, g.w}, seed, 0.0f, 2.0f).to_layout(Layout::NHWC);
  const Tensor w = random_tensor(Shape{g.k, g.c, g.r, g.s}, seed + 1, -0.1f, 0.1f);
  const Tensor b = random_tensor(Shape{g.k}, seed + 2, -0.1f, 0.1f);
  Tensor y = Tensor::empty(Shape{g.n, g.k, g.p, g.q}, DType::F32, Device::cpu(), Layout::NHWC);
  cpu::conv2d_forward(g, cs.x, w, b, y);
  const Tensor dy = random_tensor(Shape{g.n, g.k, g.p, g.q}, seed + 3).to_layout(Layout::NHWC);
  cs.dw = Tensor::empty(w.shape());
  cs.db = Tensor::empty(b.shape());
  cpu::conv2d_backward(g, cs.x, w, y, dy, nullptr, cs.dw, cs.db);
  cs.masked_dy.assign(dy.f32(), dy.f32() + dy.numel());
  for (int64_t i = 0; i < dy.numel(); ++i)
    if (!(y.f32()[i] > 0)) cs.masked_dy[size_t(i)] = 0, ++cs.masked_out;
  return cs;
}

Shape build_standalone(Layer& layer, const Shape& sample_shape, uint64_t seed) {
  const Shape out = layer.build(sample_shape);
  std::vector<Tensor> params, grads;
  for (const auto& spec : layer.param_specs()) {
    params.push_back(Tensor::zeros(spec.shape));
    grads.push_back(Tensor::zeros(spec.shape));
  }
  layer.bind(params, grads);
  std::vector<Tensor> state;
  for (const auto& spec : layer.state_specs()) {
    state.push_back(Tensor::zeros(spec.shape));
    state.back().fill(spec.init);
  }
  layer.bind_state(state);
  layer.set_random_seed(seed);
  Rng rng(seed);
  layer.init_params(rng);
  const auto specs = layer.param_specs();
  // Biases (zeros) and scales (ones) drawn away from their start, so a reference that ignores
  // or misplaces them shows: zeros in [-0.5, 0.5], ones in [0.5, 1.5].
  for (size_t i = 0; i < specs.size(); ++i)
    if (specs[i].init == ParamSpec::Init::Zeros || specs[i].init == ParamSpec::Init::Ones) {
      const float centre = specs[i].init == ParamSpec::Init::Ones ? 1.0f : 0.0f;
      Tensor p = layer.params()[i];
      float* d = p.f32();
      for (int64_t j = 0; j < p.numel(); ++j) d[j] = centre + rng.uniform(-0.5f, 0.5f);
    }
  return out;
}

double max_rel_error(std::span<const float> a, std::span<const float> b, double floor) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (std::isnan(a[i]) != std::isnan(b[i])) return std::numeric_limits<double>::infinity();
    const double err = std::abs(double(a[i]) - double(b[i])) / std::max(floor, std::abs(double(b[i])));
    worst = std::max(worst, err);
  }
  return worst;
}

std::vector<float> pairwise_tree_of(const std::vector<std::vector<float>>& shares) {
  std::vector<float> out(shares.empty() ? 0 : shares[0].size());
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = pairwise_sum(0, int64_t(shares.size()), int64_t(i),
                          [&](int64_t j, int64_t e) { return shares[size_t(j)][size_t(e)]; });
  return out;
}

double scaled_error(std::span<const float> a, std::span<const float> b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    worst = std::max(worst, std::abs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return worst / scale;
}

Tensor cycling_labels(int64_t n, int classes) {
  Tensor y = Tensor::empty(Shape{n}, DType::I32, Device::cpu());
  for (int64_t i = 0; i < n; ++i) y.data<int32_t>()[i] = static_cast<int32_t>((i * 7 + 3) % classes);
  return y;
}

GradCheckResult check_gradient(const std::function<double()>& loss, std::span<float> values,
                               std::span<const float> analytic, const std::string& what, const GradCheckOptions& opt) {
  EXPECT_EQ(values.size(), analytic.size()) << what;
  // The library's check (layers/gradient_check.h), with this test's options and gtest's verdicts.
  GradientCheckOptions o;
  o.step = opt.step;
  o.tolerance = opt.tolerance;
  o.kink_threshold = opt.kink_threshold;
  o.max_skipped_fraction = opt.max_skipped_fraction;
  GradientCheckReport report;
  ember::detail::check_values(loss, values.data(), static_cast<int64_t>(std::min(values.size(), analytic.size())),
                              analytic.data(), what, o, report);
  GradCheckResult r{static_cast<int>(report.checked), static_cast<int>(report.skipped), report.max_error, report.worst};
  EXPECT_LE(r.max_error, opt.tolerance) << "gradient mismatch, worst " << r.worst;
  const double total = r.checked + r.skipped;
  EXPECT_LE(r.skipped, opt.max_skipped_fraction * total)
      << what << ": " << r.skipped << " of " << total << " elements sat on kinks; the check proves too little";
  EXPECT_GT(r.checked, 0) << what << ": nothing checked";
  return r;
}

void check_layer_gradients(Layer& layer, Tensor x, uint64_t seed, const GradCheckOptions& opt) {
  ASSERT_EQ(x.layout(), Layout::RowMajor);
  GradientCheckOptions o;  // the library's check (layers/gradient_check.h) with this test's options
  o.step = opt.step;
  o.tolerance = opt.tolerance;
  o.kink_threshold = opt.kink_threshold;
  o.max_skipped_fraction = opt.max_skipped_fraction;
  o.seed = seed;
  const GradientCheckReport r = check_gradients(layer, x, o);
  EXPECT_TRUE(r.passed) << layer.type() << ": " << r.summary();
}

GpuSettingsScope::GpuSettingsScope()
    : tf32_(allow_tf32()),
      deterministic_(gpu_deterministic()),
      find_(cudnn_find()),
      nhwc_(gpu_nhwc()),
      fused_conv_(fused_conv()),
      fused_dense_(fused_dense()),
      fused_loss_(fused_loss()),
      fused_advance_(fused_advance()) {}

GpuSettingsScope::~GpuSettingsScope() {
  set_allow_tf32(tf32_);
  set_gpu_deterministic(deterministic_);
  set_cudnn_find(find_);
  set_gpu_nhwc(nhwc_);
  set_fused_conv(fused_conv_);
  set_fused_dense(fused_dense_);
  set_fused_loss(fused_loss_);
  set_fused_advance(fused_advance_);
}

}  // namespace ember::test
