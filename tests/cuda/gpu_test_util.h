// Helpers of the GPU tests that compare a GPU path with the CPU or with another GPU path.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "test_util.h"

namespace ember::test {

// A device tensor full of NaN: whatever an op does not write stays NaN.
inline Tensor nan_on_gpu(const Shape& s, int device = 0) {
  Tensor t = Tensor::empty(s, DType::F32, Device::cpu());
  t.fill(std::numeric_limits<float>::quiet_NaN());
  return t.to(Device::cuda(device));
}

// Max |a - b| / max(1, |b|); NaN anywhere counts as infinite.
inline double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, std::abs(double(a[i]) - b[i]) / std::max(1.0, std::abs(double(b[i]))));
  }
  return worst;
}

// Max |a - b| over max |b|, NaN anywhere (or unequal sizes) counting as infinite: the error of long
// float sums relative to their tensor's scale. An entry of such a sum that lies near 0 carries the
// rounding of the whole sum; rel_error's floor of 1 would hold it to an absolute bound of that size.
inline double long_sum_error(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double worst = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, std::abs(double(a[i]) - b[i]));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return scale > 0 ? worst / scale : worst;
}

// An f32 tensor's bits (from either device), for comparisons that NaN payloads and signed zeros
// must pass too.
inline std::vector<uint32_t> bits(const Tensor& t) {
  const std::vector<float> v = t.to_vector();
  std::vector<uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
  return b;
}

// ReLU decisions of a GPU run (its post-ReLU y > 0) that differ from the CPU's pre-activation
// z > 0: all of them, and those where |z| >= 1e-5, i.e. not within rounding of 0 (a bug).
struct ReluFlips {
  int64_t all = 0, far = 0;
};
inline ReluFlips relu_flips(const Tensor& y_gpu, const Tensor& z_cpu) {
  const std::vector<float> y = y_gpu.to_vector(), z = z_cpu.to_vector();
  ReluFlips f;
  for (size_t i = 0; i < y.size() && i < z.size(); ++i)
    if ((y[i] > 0) != (z[i] > 0)) {
      ++f.all;
      if (std::abs(z[i]) >= 1e-5f) ++f.far;
    }
  return f;
}

}  // namespace ember::test
