// Default and Mirrored (CPU replicas on threads) strategies.
#include "strategy.h"

#include <omp.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "../core/runtime.h"
#include "local_communicator.h"
#include "replica_step.h"

namespace ember {

namespace {

void require_cpu_replicas(const ModelRecipe& recipe, const std::string& strategy) {
  EMBER_CHECK(recipe.device.is_cpu(), DeviceError,
              strategy + ": these are CPU replicas on threads, but the recipe asks for " + recipe.device.str() +
                  " (GPU replicas: make_mirrored_gpu_strategy, train_mnist --gpus)");
}

class DefaultStrategy : public Strategy {
 public:
  std::string name() const override { return "default"; }
  int num_replicas() const override { return 1; }
  void build(const ModelRecipe& recipe) override { model_ = detail::build_replica(recipe, recipe.device); }
  History fit(const Dataset& train, const FitOptions& options, const Dataset* validation) override {
    return model().fit(train, options, validation);
  }
  EvalResult evaluate(const Dataset& data, int64_t batch_size) override { return model().evaluate(data, batch_size); }
  Sequential& model() override {
    EMBER_CHECK(model_ != nullptr, Error, "strategy: build() first");
    return *model_;
  }

 private:
  std::unique_ptr<Sequential> model_;
};

// N persistent worker threads; run(fn) calls fn(r) on worker r for every r and waits.
class ReplicaPool {
 public:
  ReplicaPool(int n, int omp_threads_each) : errors_(static_cast<size_t>(n)) {
    for (int r = 0; r < n; ++r)
      threads_.emplace_back([this, r, omp_threads_each] {
        omp_set_num_threads(omp_threads_each);  // this thread's parallel regions (oneDNN's too)
        enable_flush_to_zero();
        loop(r);
      });
  }
  ~ReplicaPool() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  ReplicaPool(const ReplicaPool&) = delete;
  ReplicaPool& operator=(const ReplicaPool&) = delete;

  void run(const std::function<void(int)>& fn) {
    std::unique_lock lock(mu_);
    task_ = &fn;
    pending_ = static_cast<int>(threads_.size());
    std::fill(errors_.begin(), errors_.end(), nullptr);
    ++generation_;
    cv_.notify_all();
    done_.wait(lock, [&] { return pending_ == 0; });
    task_ = nullptr;
    // The root cause first: a replica that failed by itself, not one told to stop by a collective.
    std::exception_ptr first, root;
    for (auto& e : errors_) {
      if (!e) continue;
      if (!first) first = e;
      try {
        std::rethrow_exception(e);
      } catch (const CollectiveError&) {
      } catch (...) {
        if (!root) root = e;
      }
    }
    if (root) std::rethrow_exception(root);
    if (first) std::rethrow_exception(first);
  }

 private:
  void loop(int r) {
    int64_t seen = 0;
    for (;;) {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      const auto* task = task_;
      lock.unlock();
      try {
        (*task)(r);
      } catch (...) {
        errors_[static_cast<size_t>(r)] = std::current_exception();
      }
      lock.lock();
      if (--pending_ == 0) done_.notify_all();
    }
  }

  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_, done_;
  const std::function<void(int)>* task_ = nullptr;
  int64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  std::vector<std::exception_ptr> errors_;
};

class MirroredCpuStrategy : public detail::LocalReplicas {
 public:
  MirroredCpuStrategy(int n, std::chrono::milliseconds timeout)
      : n_(n), comms_(make_local_communicators(n)), pool_(n, std::max(1, num_threads() / n)) {
    for (auto& c : comms_) c->set_timeout(timeout);
  }
  std::string name() const override { return "mirrored (" + std::to_string(n_) + " cpu replicas)"; }
  int num_replicas() const override { return n_; }

  void build(const ModelRecipe& recipe) override {
    require_cpu_replicas(recipe, "mirrored");
    replicas_.resize(static_cast<size_t>(n_));
    pool_.run([&](int r) {
      replicas_[static_cast<size_t>(r)] = detail::build_replica(recipe, recipe.device);
      comms_[static_cast<size_t>(r)]->broadcast(replicas_[static_cast<size_t>(r)]->params(), 0);
    });
  }

  History fit(const Dataset& train, const FitOptions& options, const Dataset* validation) override {
    EMBER_CHECK(!replicas_.empty(), Error, "strategy: build() first");
    EMBER_CHECK(options.batch_size % n_ == 0, ArgumentError,
                "mirrored: the global batch size " + std::to_string(options.batch_size) +
                    " does not split evenly over " + std::to_string(n_) + " replicas");
    stats_ = {};
    DataLoader loader(train, {.batch_size = options.batch_size, .shuffle = options.shuffle, .seed = options.seed});
    FitLoopHooks hooks;
    int64_t step = 0;
    hooks.step = [&](const Batch& b) {
      const auto t0 = std::chrono::steady_clock::now();
      const int64_t global = b.x.dim(0), per = b.x.numel() / std::max<int64_t>(global, 1);
      std::vector<StepResult> results(static_cast<size_t>(n_));
      double allreduce0 = 0;
      pool_.run([&](int r) {
        Communicator& comm = *comms_[static_cast<size_t>(r)];
        comm.set_step(step);
        try {
          // The same contiguous split as DataLoader sharding: shard r = [B*r/N, B*(r+1)/N).
          const int64_t lo = global * r / n_, hi = global * (r + 1) / n_;
          const Tensor x = b.x.view(lo * per, b.x.shape().without_batch().with_batch(hi - lo));
          const Tensor y = b.y.view(lo, Shape{hi - lo});
          maybe_fail(r, step);
          results[static_cast<size_t>(r)] = detail::replica_step(*replicas_[static_cast<size_t>(r)], comm, x, y, global,
                                                                 r == 0 ? &allreduce0 : nullptr);
        } catch (const CollectiveError&) {
          throw;
        } catch (const std::exception& e) {
          comm.abort(e.what());
          throw Error("replica " + std::to_string(r) + " failed at step " + std::to_string(step) + ": " + e.what());
        }
      });
      ++step;
      StepResult sum;
      for (const auto& r : results) {
        sum.loss_sum += r.loss_sum;
        sum.correct += r.correct;
        sum.samples += r.samples;
      }
      stats_.allreduce_seconds += allreduce0;
      stats_.step_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      return sum;
    };
    hooks.evaluate = [&](const Dataset& d, int64_t bs) { return model().evaluate(d, bs); };
    hooks.print = options.verbose > 0;
    return fit_loop(loader, options, validation, hooks);
  }

 private:
  int n_;
  std::vector<std::unique_ptr<Communicator>> comms_;
  ReplicaPool pool_;
};

}  // namespace

std::unique_ptr<Strategy> make_default_strategy() { return std::make_unique<DefaultStrategy>(); }

std::unique_ptr<Strategy> make_mirrored_cpu_strategy(int replicas, std::chrono::milliseconds timeout) {
  EMBER_CHECK(replicas >= 1 && replicas <= 256, ArgumentError,
              "mirrored: replicas must be in 1..256, got " + std::to_string(replicas));
  return std::make_unique<MirroredCpuStrategy>(replicas, timeout);
}

}  // namespace ember
