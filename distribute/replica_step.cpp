// The replica step shared by the Mirrored and MultiWorker strategies.
#include "replica_step.h"

#include <chrono>

#include "../core/cuda_module.h"

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
  }
  weight_gradients(grads, n, global);
  const auto t0 = std::chrono::steady_clock::now();
  comm.all_reduce_sum(grads);
  if (allreduce_s) *allreduce_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  model.apply_gradients();
  return r;
}

std::unique_ptr<Sequential> build_replica(const ModelRecipe& recipe, Device device) {
  auto m = std::make_unique<Sequential>();
  recipe.add_layers(*m);
  m->build(recipe.input_shape, recipe.seed);
  m->compile(recipe.make_optimizer());
  m->to(device);
  return m;
}

void weight_gradients(Tensor& grads, int64_t shard, int64_t global) {
  if (shard == 0) {
    grads.fill(0.0f);
    return;
  }
  const float w = static_cast<float>(shard) / static_cast<float>(global);
  if (grads.device().is_cuda()) {
    require_cuda_module("GPU gradients").scale(grads, w);
    return;
  }
  float* g = grads.f32();
  for (int64_t i = 0; i < grads.numel(); ++i) g[i] *= w;
}

EvalResult sharded_evaluate(Sequential& model, Communicator& comm, const Dataset& data, int64_t batch_size) {
  DataLoader loader(data, {.batch_size = std::max<int64_t>(batch_size, comm.size()),
                           .shuffle = false,
                           .seed = 0,
                           .num_shards = comm.size(),
                           .shard = comm.rank(),
                           .device = model.device()});
  loader.start_epoch(0);
  Batch b;
  SoftmaxCrossEntropy loss;
  MetricSums sums(model.device());
  int64_t seen = 0;
  while (loader.next(b)) {
    const int64_t n = b.x.dim(0);
    if (n == 0) continue;
    loss.forward(model.forward(b.x, false), b.y, sums);
    seen += n;
  }
  const MetricSums::Values v = sums.read();
  Tensor t = Tensor::empty(Shape{3}, DType::F32, Device::cpu());
  t.f32()[0] = static_cast<float>(v.loss_sum);
  t.f32()[1] = static_cast<float>(v.correct);  // counts <= 2^24 stay exact
  t.f32()[2] = static_cast<float>(seen);
  comm.all_reduce_sum(t);
  return {t.f32()[0] / t.f32()[2], t.f32()[1] / t.f32()[2], static_cast<int64_t>(t.f32()[2])};
}

}  // namespace ember::detail
