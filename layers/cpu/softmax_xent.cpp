// Softmax cross-entropy: max-subtracted for stability; the loss accumulates in double so the
// batch mean does not depend on the batch size's rounding.
#include "softmax_xent.h"

#include <cmath>

#include "../../core/error.h"
#include "../losses_math.h"

namespace ember::cpu {

namespace {
// The checked operands: rows (N) and classes (K) of `in`, its values and the labels.
struct Rows {
  int64_t n, k;
  const float* in;
  const int32_t* labels;
};

// logits (or probs) f32 (N, K) row-major on the CPU, labels i32 (N), and `out` of logits' shape.
Rows check(const Tensor& logits, const Tensor& labels, const Tensor& out, const char* out_name) {
  EMBER_CHECK(logits.rank() == 2 && logits.dtype() == DType::F32 && logits.layout() == Layout::RowMajor &&
                  logits.device().is_cpu(),
              ShapeError, "softmax cross-entropy (cpu): logits must be f32 (N, K) on cpu, got " + logits.str());
  EMBER_CHECK(
      labels.shape() == Shape{logits.dim(0)} && labels.dtype() == DType::I32, ShapeError,
      "softmax cross-entropy (cpu): labels must be i32 (" + std::to_string(logits.dim(0)) + ",), got " + labels.str());
  EMBER_CHECK(out.shape() == logits.shape(), ShapeError,
              std::string("softmax cross-entropy (cpu): ") + out_name + " must be " + logits.shape().str() + ", got " +
                  out.shape().str());
  return {logits.dim(0), logits.dim(1), logits.f32(), labels.data<int32_t>()};
}

// probs = softmax(logits); returns the batch's loss sum (double: the mean and the epoch sums
// keep its precision).
double softmax_rows(const Tensor& logits, const Tensor& labels, Tensor& probs) {
  const auto [n, k, z, y] = check(logits, labels, probs, "probs");
  float* pr = probs.f32();
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t label = y[i];
    EMBER_CHECK(label >= 0 && label < k, ArgumentError,
                "softmax cross-entropy: label " + std::to_string(label) + " at row " + std::to_string(i) +
                    " is outside [0, " + std::to_string(k) + ")");
    const float* zi = z + i * k;
    float* pi = pr + i * k;
    int64_t best = 0;
    const double sum = detail::softmax_row(zi, pi, k, &best);
    total += std::log(sum) - static_cast<double>(zi[label] - zi[best]);  // -log softmax(z)[label]
  }
  return total;
}
}  // namespace

float softmax_xent_forward(const Tensor& logits, const Tensor& labels, Tensor& probs) {
  return static_cast<float>(softmax_rows(logits, labels, probs) / static_cast<double>(logits.dim(0)));
}

void softmax_xent_accumulate(const Tensor& logits, const Tensor& labels, Tensor& probs, Tensor& sums,
                             int64_t positions) {
  EMBER_CHECK(sums.numel() >= 4 && sums.dtype() == DType::F64 && sums.device().is_cpu(), ShapeError,
              "softmax cross-entropy (cpu): the metric sums must be >= 4 f64 on cpu, got " + sums.str());
  const double loss_sum = softmax_rows(logits, labels, probs);
  double* acc = sums.data<double>();
  acc[0] += loss_sum / static_cast<double>(positions);  // exact for one position per sample
  acc[1] += static_cast<double>(count_correct(logits, labels));
  if (std::isfinite(acc[0])) acc[3] += 1.0;  // batches before the first non-finite loss
}

void softmax_xent_backward(const Tensor& probs, const Tensor& labels, Tensor& dlogits, int64_t mean_rows) {
  const auto [n, k, p, y] = check(probs, labels, dlogits, "dlogits");
  float* d = dlogits.f32();
  const float scale = 1.0f / static_cast<float>(mean_rows);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < k; ++j) d[i * k + j] = p[i * k + j] * scale;
    d[i * k + y[i]] -= scale;
  }
}

int64_t count_correct(const Tensor& logits, const Tensor& labels) {
  const auto [n, k, z, y] = check(logits, labels, logits, "logits");
  int64_t correct = 0;
  for (int64_t i = 0; i < n; ++i) {
    int64_t best = 0;
    for (int64_t j = 1; j < k; ++j)
      if (z[i * k + j] > z[i * k + best]) best = j;
    correct += best == y[i];
  }
  return correct;
}

}  // namespace ember::cpu
