// Metric sums and accuracy.
#include "metrics.h"

#include <cmath>
#include <cstring>

#include "../core/error.h"
#include "ops/softmax_xent.h"

namespace ember {

MetricSums::MetricSums(Device device) : buf_(Tensor::zeros(Shape{kSlots}, DType::F64, device)) {}

void MetricSums::reset() { buf_.zero(); }  // on a GPU queued, no wait

MetricSums::Values MetricSums::read() const {
  double host[kSlots];
  if (buf_.device().is_cpu()) {
    std::memcpy(host, buf_.raw(), sizeof host);
  } else {
    Tensor t = buf_.to(Device::cpu());  // waits for the device's queued work
    std::memcpy(host, t.raw(), sizeof host);
  }
  EMBER_CHECK(host[2] == 0.0, ArgumentError,
              "softmax cross-entropy (" + buf_.device().str() + "): a label was outside [0, classes)");
  return {host[0], static_cast<int64_t>(host[1]), static_cast<int64_t>(host[3])};
}

bool MetricSums::Values::finite() const { return std::isfinite(loss_sum); }

int64_t count_correct(const Tensor& logits, const Tensor& labels) { return detail::count_correct(logits, labels); }

}  // namespace ember
