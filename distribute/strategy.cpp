// The strategies: Default (Model::fit on one replica) and Mirrored (N replicas of this
// process, one DataParallelStrategy); MultiWorker is in multiworker.cpp.
#include "strategy.h"

#include <algorithm>
#include <set>

#include "../core/runtime.h"
#include "data_parallel.h"
#include "local_communicator.h"
#include "nccl_communicator.h"

namespace ember {

namespace {

class DefaultStrategy : public Strategy {
 public:
  std::string name() const override { return "default"; }
  int num_replicas() const override { return 1; }
  void build(const ModelRecipe& recipe) override { model_ = detail::build_replica(recipe, recipe.device); }
  History fit(const Dataset& train, const FitOptions& options, const Dataset* validation) override {
    return model().fit(train, options, validation);
  }
  EvalResult evaluate(const Dataset& data, int64_t batch_size) override { return model().evaluate(data, batch_size); }
  Model& model() override {
    EMBER_CHECK(model_ != nullptr, Error, "strategy: build() first");
    return *model_;
  }

 private:
  std::unique_ptr<Model> model_;
};

}  // namespace

float Strategy::compute_gradients(const std::vector<Tensor>& xs, const std::vector<Tensor>& ys) {
  Model& m = model();
  const auto on_device = [&m](const std::vector<Tensor>& ts) {
    std::vector<Tensor> out;
    for (const Tensor& t : ts) out.push_back(t.device() == m.device() ? t : t.to(m.device()));
    return out;
  };
  MetricSums sums = m.make_sums();
  m.compute_gradients(on_device(xs), on_device(ys), sums);
  const int64_t rows = xs.empty() || xs[0].rank() == 0 ? 0 : xs[0].dim(0);
  return static_cast<float>(sums.read().loss_sum / static_cast<double>(std::max<int64_t>(rows, 1)));
}

std::unique_ptr<Strategy> make_default_strategy() { return std::make_unique<DefaultStrategy>(); }

std::unique_ptr<Strategy> make_mirrored_cpu_strategy(int replicas, std::chrono::milliseconds timeout) {
  EMBER_CHECK(replicas >= 1 && replicas <= 256, ArgumentError,
              "mirrored: replicas must be in 1..256, got " + std::to_string(replicas));
  detail::DataParallelConfig c;
  c.kind = "mirrored";
  c.unit = "replicas";
  c.devices.assign(static_cast<size_t>(replicas), Device::cpu());
  c.replica_timeout = timeout;
  c.connect = [replicas](const ModelRecipe& recipe, std::vector<Device>&) -> std::shared_ptr<Communicator> {
    EMBER_CHECK(recipe.device.is_cpu(), DeviceError,
                "mirrored: these are CPU replicas, but the recipe asks for " + recipe.device.str() +
                    " (GPU replicas: make_mirrored_gpu_strategy, train_mnist --gpus)");
    return make_host_group(replicas);
  };
  return std::make_unique<detail::DataParallelStrategy>(std::move(c));
}

std::unique_ptr<Strategy> make_mirrored_gpu_strategy(const std::vector<int>& gpus, std::chrono::milliseconds timeout) {
  EMBER_CHECK(!gpus.empty(), ArgumentError, "mirrored: no GPUs given");
  EMBER_CHECK(gpus.size() <= 256, ArgumentError, "mirrored: at most 256 replicas, got " + std::to_string(gpus.size()));
  // A GPU listed more than once holds that many replicas. NCCL cannot have two ranks on one GPU,
  // so then the gradients are summed on the host (slow; for checking the replica logic on a
  // one-GPU machine: the batch split, per-replica devices, the reduction and Adam).
  const bool shared_gpu = std::set<int>(gpus.begin(), gpus.end()).size() != gpus.size();
  const CudaStatus& st = cuda_status();
  EMBER_CHECK(st.usable, DeviceError, "mirrored on GPUs: no usable GPU (" + st.reason + ")");
  for (int g : gpus)
    EMBER_CHECK(std::any_of(st.gpus.begin(), st.gpus.end(), [&](const GpuInfo& i) { return i.index == g; }),
                DeviceError,
                "mirrored: there is no usable cuda:" + std::to_string(g) + " (" + std::to_string(st.gpus.size()) +
                    " usable GPU" + (st.gpus.size() == 1 ? "" : "s") + ")");
  detail::DataParallelConfig c;
  c.kind = "mirrored";
  c.unit = "replicas";
  for (int g : gpus) c.devices.push_back(Device::cuda(g));
  c.connect = [gpus, timeout, shared_gpu](const ModelRecipe&, std::vector<Device>&) -> std::shared_ptr<Communicator> {
    if (shared_gpu) return make_host_group(static_cast<int>(gpus.size()));
    return detail::NcclCommunicator::create_local(gpus, timeout);
  };
  return std::make_unique<detail::DataParallelStrategy>(std::move(c));
}

}  // namespace ember
