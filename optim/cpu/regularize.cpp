// Clipping and decay loops (see regularize.h): one pass each, vectorised by the compiler.
#include "regularize.h"

#include <cmath>

namespace ember::cpu {

void clip_by_value(float* g, int64_t n, float c) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) g[i] = g[i] > c ? c : (g[i] < -c ? -c : g[i]);
}

double global_norm(const float* g, int64_t n) {
  double s = 0.0;
  // simd reduction: a fixed grouping of partial sums for a given build, so the same bits every run.
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(g[i]) * static_cast<double>(g[i]);
  return std::sqrt(s);
}

void scale(float* g, int64_t n, float s) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) g[i] *= s;
}

void decay(float* p, const float* mask, int64_t n, float factor) {
  if (!mask) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) p[i] -= factor * p[i];
    return;
  }
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) p[i] -= factor * mask[i] * p[i];
}

}  // namespace ember::cpu
