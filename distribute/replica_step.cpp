// The replica step shared by the Mirrored and MultiWorker strategies.
#include "distribute/replica_step.h"

#include <chrono>

namespace ember::detail {

StepResult replica_step(Sequential& model, Communicator& comm, const Tensor& x, const Tensor& y, int64_t global,
                        double* allreduce_s) {
  StepResult r;
  const int64_t n = x.dim(0);
  Tensor& grads = model.grads();
  if (n > 0) {
    const float loss = model.compute_gradients(x, y, &r.correct);
    r.loss_sum = static_cast<double>(loss) * static_cast<double>(n);
    r.samples = n;
    const float w = static_cast<float>(n) / static_cast<float>(global);
    float* g = grads.f32();
    for (int64_t i = 0; i < grads.numel(); ++i) g[i] *= w;
  } else {
    grads.fill(0.0f);
  }
  const auto t0 = std::chrono::steady_clock::now();
  comm.all_reduce_sum(grads);
  if (allreduce_s) *allreduce_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  model.apply_gradients();
  return r;
}

EvalResult sharded_evaluate(Sequential& model, Communicator& comm, const Dataset& data, int64_t batch_size) {
  DataLoader loader(data, {.batch_size = std::max<int64_t>(batch_size, comm.size()), .shuffle = false, .seed = 0,
                           .num_shards = comm.size(), .shard = comm.rank()});
  loader.start_epoch(0);
  Batch b;
  SoftmaxCrossEntropy loss;
  double sums[3] = {0, 0, 0};  // loss * n, correct, n
  while (loader.next(b)) {
    const int64_t n = b.x.dim(0);
    if (n == 0) continue;
    const Tensor& logits = model.forward(b.x, false);
    sums[0] += static_cast<double>(loss.forward(logits, b.y)) * static_cast<double>(n);
    sums[1] += static_cast<double>(count_correct(logits, b.y));
    sums[2] += static_cast<double>(n);
  }
  Tensor t = Tensor::empty(Shape{3});
  for (int i = 0; i < 3; ++i) t.f32()[i] = static_cast<float>(sums[i]);  // counts <= 2^24 stay exact
  comm.all_reduce_sum(t);
  return {t.f32()[0] / t.f32()[2], t.f32()[1] / t.f32()[2], static_cast<int64_t>(t.f32()[2])};
}

}  // namespace ember::detail
