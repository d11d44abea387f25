// Distribution: the thread communicator's collectives, timeouts and aborts; Mirrored with 2
// and 4 CPU replicas equals Default on the same global batch; a failing replica ends the
// whole step with an error naming it instead of hanging. The NCCL paths (GPU replicas) have
// the same equivalence tests; they skip, saying why, without enough usable GPUs (CI here);
// scripts/gpu_check.sh runs them on a machine with a GPU (world size 1 runs on any single GPU).
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <limits>
#include <mutex>
#include <thread>

#include "core/cuda_module.h"
#include "core/runtime.h"
#include "distribute/data_parallel.h"
#include "distribute/fault_injection.h"
#include "distribute/local_communicator.h"
#include "distribute/nccl_communicator.h"
#include "distribute/nccl_ops.h"
#include "idx_fixtures.h"
#include "test_util.h"

namespace ember {
namespace {

template <typename F>
void on_threads(int n, F&& f) {
  std::vector<std::thread> ts;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r)
    ts.emplace_back([&, r] {
      try {
        f(r);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : ts) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// The sum over members is the pairwise tree by doubling strides (((b0 + b1) + (b2 + b3)) + b4 for
// 5), the order Sequential sums its slices in: what makes replicas bit for bit under Exact. Written
// here as the strides' passes over a copy; a sum in rank order differs for n = 4 and 5 on these data.
TEST(LocalCommunicator, AllReduceSumsAsAPairwiseTreeAndBroadcasts) {
  for (int n : {1, 2, 3, 4, 5, 8}) {
    auto comms = make_local_communicators(n);
    std::vector<Tensor> bufs;
    for (int r = 0; r < n; ++r) bufs.push_back(test::random_tensor(Shape{1001}, static_cast<uint64_t>(r + 1)));
    std::vector<float> want(1001, 0.0f);
    int differs_from_rank_order = 0;
    for (int i = 0; i < 1001; ++i) {
      std::vector<float> v;
      float in_order = 0.0f;
      for (int r = 0; r < n; ++r) v.push_back(bufs[static_cast<size_t>(r)].f32()[i]), in_order += v.back();
      for (int stride = 1; stride < n; stride *= 2)
        for (int r = 0; r + stride < n; r += 2 * stride) v[size_t(r)] += v[size_t(r + stride)];
      want[static_cast<size_t>(i)] = v[0];
      differs_from_rank_order += v[0] != in_order;
    }
    if (n >= 4) {
      EXPECT_GT(differs_from_rank_order, 0) << "n=" << n << ": the order is not tested";
    }
    on_threads(n, [&](int r) {
      comms[static_cast<size_t>(r)]->all_reduce_sum(bufs[static_cast<size_t>(r)]);
      comms[static_cast<size_t>(r)]->all_reduce_sum(bufs[static_cast<size_t>(r)]);  // reusable: a second round
    });
    for (int r = 0; r < n; ++r) {
      std::vector<float> twice = want;
      for (float& v : twice) v *= static_cast<float>(n);
      if (n == 1) twice = want;
      EXPECT_EQ(bufs[static_cast<size_t>(r)].to_vector(), twice) << "n=" << n << " rank " << r;
    }
    on_threads(n, [&](int r) {
      bufs[static_cast<size_t>(r)].fill(static_cast<float>(r));
      comms[static_cast<size_t>(r)]->broadcast(bufs[static_cast<size_t>(r)], n - 1);
    });
    for (int r = 0; r < n; ++r) EXPECT_EQ(bufs[static_cast<size_t>(r)].f32()[500], static_cast<float>(n - 1));
  }
}

TEST(LocalCommunicator, MissingMemberTimesOutNamingIt) {
  auto comms = make_local_communicators(3);
  for (auto& c : comms) c->set_timeout(std::chrono::milliseconds(200));
  const auto t0 = std::chrono::steady_clock::now();
  std::atomic<int> errors{0};
  std::string message;
  std::mutex mu;
  on_threads(3, [&](int r) {
    if (r == 2) return;  // never arrives
    Tensor t = Tensor::zeros(Shape{4});
    comms[static_cast<size_t>(r)]->set_step(17);
    try {
      comms[static_cast<size_t>(r)]->all_reduce_sum(t);
    } catch (const CollectiveError& e) {
      ++errors;
      std::lock_guard lock(mu);
      message = e.what();
    }
  });
  EXPECT_EQ(errors.load(), 2);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_NE(message.find("step 17"), std::string::npos) << message;
  EXPECT_NE(message.find("2"), std::string::npos) << message;
}

TEST(LocalCommunicator, AbortWakesTheOthersAtOnce) {
  auto comms = make_local_communicators(2);
  for (auto& c : comms) c->set_timeout(std::chrono::seconds(30));
  const auto t0 = std::chrono::steady_clock::now();
  std::string message;
  on_threads(2, [&](int r) {
    if (r == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      comms[1]->abort("disk on fire");
      return;
    }
    Tensor t = Tensor::zeros(Shape{4});
    try {
      comms[0]->all_reduce_sum(t);
    } catch (const CollectiveError& e) {
      message = e.what();
    }
  });
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_NE(message.find("replica 1 failed: disk on fire"), std::string::npos) << message;
}

Dataset classes_dataset(int n, uint64_t seed) {
  Tensor images = Tensor::empty(Shape{n, 1, 10, 10}, DType::U8), labels = Tensor::empty(Shape{n}, DType::I32);
  Rng rng(seed);
  for (int i = 0; i < n; ++i) {
    const int k = static_cast<int>(rng.below(4));
    labels.data<int32_t>()[i] = k;
    for (int j = 0; j < 100; ++j)
      images.data<uint8_t>()[i * 100 + j] = static_cast<uint8_t>(rng.below(60) + ((j / 10) / 3 == k ? 150 : 0));
  }
  return Dataset(images, labels, 4);
}

ModelRecipe small_recipe(uint64_t seed, Device device = Device::cpu()) {
  ModelRecipe r;
  r.add_layers = [](Sequential& m) {
    m.add<Conv2D>(6, Size2{3, 3}, Activation::ReLU);
    m.add<MaxPool2D>(Size2{2, 2});
    m.add<Flatten>();
    m.add<Dense>(16, Activation::ReLU);
    m.add<Dense>(4);
  };
  r.input_shape = Shape{1, 10, 10};
  r.seed = seed;
  r.make_optimizer = [] { return std::make_unique<Adam>(); };
  r.device = device;
  return r;
}

std::vector<float> train_with(std::unique_ptr<Strategy> s, const Dataset& d, int64_t batch, int64_t steps,
                              Device device = Device::cpu()) {
  s->build(small_recipe(3, device));
  FitOptions o;
  o.epochs = 100;
  o.batch_size = batch;
  o.max_steps = steps;
  o.seed = 9;
  o.verbose = 0;
  s->fit(d, o);
  return s->model().params().to_vector();
}

// N replicas on a global batch B == one replica on B, after 50 Adam steps. Not bit-exact: with
// batch 32 over 4 replicas (and the epoch's last batch, 16, over 2 or 4) a share is less than a
// group of the batch's sum order (core/pairwise_sum.h), so float sums are grouped differently
// (~1e-7 relative per step). Measured: 6e-8 max absolute difference for 2 and 4 replicas.
// 1e-5 leaves room for other CPUs' kernels while anything a wrong shard, weighting or
// reduction would produce moves parameters by >= 1e-3 (checked below with another batch).
constexpr double kReplicaTolerance = 1e-5;

TEST(Mirrored, TwoAndFourReplicasEqualOneOnTheSameGlobalBatch) {
  const Dataset d = classes_dataset(400, 1);  // 400 / 32: the last batch (16) checks uneven epochs too
  const std::vector<float> single = train_with(make_default_strategy(), d, 32, 50);
  for (int n : {2, 4}) {
    const std::vector<float> mirrored = train_with(make_mirrored_cpu_strategy(n), d, 32, 50);
    ASSERT_EQ(mirrored.size(), single.size());
    double worst = 0;
    for (size_t i = 0; i < single.size(); ++i) worst = std::max(worst, std::abs(double(mirrored[i]) - single[i]));
    EXPECT_LE(worst, kReplicaTolerance) << n << " replicas";
    std::printf("%d replicas: max |parameter difference| after 50 steps = %.3g\n", n, worst);
  }
  // And the comparison can fail: a different global batch moves the parameters by far more.
  const std::vector<float> other = train_with(make_default_strategy(), d, 16, 50);
  double moved = 0;
  for (size_t i = 0; i < single.size(); ++i) moved = std::max(moved, std::abs(double(other[i]) - single[i]));
  EXPECT_GT(moved, 100 * kReplicaTolerance);
}

// Every CPU weight gradient sums the batch in groups of 16 rows added as a pairwise tree, and the
// all-reduce sums replicas in the same tree (core/pairwise_sum.h): batch 64 over 2 and 4 replicas
// (aligned power-of-two shares, every batch whole) gives one replica's parameters bit for bit
// after 20 Adam steps, under both policies (Exact also runs 16-row slices; Fast 64-row ones).
// Batch 48 over 2 replicas (shares of 24 rows: a group and a half) is not aligned and differs by
// rounding: checked too, so that the equality is the sum order's doing and not the data's.
TEST(Mirrored, TwoAndFourReplicasEqualOneBitForBitUnderBothPolicies) {
  const Dataset d = classes_dataset(640, 2);
  for (const ConvAlgorithms policy : {ConvAlgorithms::Exact, ConvAlgorithms::Fast}) {
    const test::ConvAlgorithmsScope scope(policy);
    SCOPED_TRACE(policy == ConvAlgorithms::Exact ? "exact" : "fast");
    const std::vector<float> single = train_with(make_default_strategy(), d, 64, 20);
    for (int n : {2, 4}) EXPECT_EQ(train_with(make_mirrored_cpu_strategy(n), d, 64, 20), single) << n << " replicas";
  }
  const test::ConvAlgorithmsScope fast(ConvAlgorithms::Fast);
  const bool unaligned_equal =
      train_with(make_default_strategy(), d, 48, 20) == train_with(make_mirrored_cpu_strategy(2), d, 48, 20);
  EXPECT_FALSE(unaligned_equal) << "shares of 24 rows sum the batch in another order than one model";
}

// Freezing under a strategy: the recipe freezes the convolution in every replica; two replicas,
// all-reducing only the trainable layers' gradients, equal one model bit for bit (batch 64, aligned
// shares), and the convolution's weights are the initial ones.
TEST(Mirrored, AFrozenLayerInTheRecipeTrainsAsOneModel) {
  const Dataset d = classes_dataset(640, 4);
  const auto train = [&](std::unique_ptr<Strategy> s, std::vector<float>* conv) {
    ModelRecipe r = small_recipe(3);
    r.add_layers = [](Sequential& m) {
      m.add<Conv2D>(6, Size2{3, 3}, Activation::ReLU).set_trainable(false);
      m.add<MaxPool2D>(Size2{2, 2});
      m.add<Flatten>();
      m.add<Dense>(16, Activation::ReLU);
      m.add<Dense>(4);
    };
    s->build(r);
    *conv = s->model().layers()[0]->params()[0].to_vector();
    FitOptions o;
    o.epochs = 100;
    o.batch_size = 64;
    o.max_steps = 10;
    o.seed = 9;
    o.verbose = 0;
    s->fit(d, o);
    EXPECT_EQ(s->model().layers()[0]->params()[0].to_vector(), *conv);  // frozen: the initial weights
    return s->model().params().to_vector();
  };
  std::vector<float> conv_one, conv_two;
  const std::vector<float> one = train(make_default_strategy(), &conv_one);
  EXPECT_EQ(train(make_mirrored_cpu_strategy(2), &conv_two), one);
  EXPECT_EQ(conv_two, conv_one);
}

// A custom loop through the strategies' three-part step (compute, all-reduce, apply): two
// replicas equal the one model bit for bit under Exact, as fit's steps do, and the loss returned
// is the batch's mean.
TEST(Mirrored, ACustomLoopsThreePartStepEqualsOneModel) {
  const Dataset d = classes_dataset(640, 4);
  const auto run = [&](std::unique_ptr<Strategy> s) {
    s->build(small_recipe(3));
    DataLoader loader(d, {.batch_size = 64, .shuffle = false});
    loader.start_epoch(0);
    Batch b;
    std::vector<float> losses;
    for (int step = 0; step < 5 && loader.next(b); ++step) {
      losses.push_back(s->compute_gradients(b.x(), b.y()));
      s->all_reduce_gradients();
      s->apply_gradients();
    }
    return std::make_pair(s->model().params().to_vector(), losses);
  };
  const test::ConvAlgorithmsScope exact(ConvAlgorithms::Exact);
  const auto one = run(make_default_strategy());
  const auto two = run(make_mirrored_cpu_strategy(2));
  EXPECT_EQ(two.first, one.first);
  ASSERT_EQ(two.second.size(), 5u);
  // The same row losses (Exact: the same logits bit for bit), their double sum regrouped
  // ((s1 + s2) + (s3 + s4) against a running sum), then the mean rounded to float: at most one
  // float ulp apart.
  for (size_t i = 0; i < 5; ++i)
    EXPECT_NEAR(two.second[i], one.second[i], std::numeric_limits<float>::epsilon() * one.second[i]) << i;
  auto fresh = make_default_strategy();
  fresh->build(small_recipe(3));
  EXPECT_NE(one.first, fresh->model().params().to_vector()) << "the parameters must have moved";
}

// A graph model (a residual block) through the strategies (ModelRecipe::make_model): the same
// bit-for-bit claim as the stack above, so replicas of a graph are one model too.
TEST(Mirrored, GraphModelReplicasUnderExactEqualOneBitForBit) {
  const Dataset d = classes_dataset(640, 3);
  const auto train = [&](std::unique_ptr<Strategy> s) {
    ModelRecipe r = small_recipe(5);
    r.add_layers = nullptr;
    r.make_model = [] {
      SymbolicTensor x = Input(Shape{1, 10, 10});
      SymbolicTensor h = layer<Conv2D>(6, Size2{3, 3}, Activation::ReLU, Padding::Same)(x);
      SymbolicTensor f = layer<Conv2D>(6, Size2{3, 3}, Activation::None, Padding::Same, Size2{1, 1}, false)(h);
      SymbolicTensor y = layer<MaxPool2D>(Size2{2, 2})(layer<ReLU>()(add({h, f})));
      return std::make_unique<Model>(x, layer<Dense>(4)(layer<Flatten>()(y)));
    };
    s->build(r);
    EXPECT_FALSE(s->model().is_linear());
    FitOptions o;
    o.batch_size = 64;
    o.max_steps = 10;
    o.seed = 9;
    o.verbose = 0;
    s->fit(d, o);
    return s->model().params().to_vector();
  };
  {
    const test::ConvAlgorithmsScope exact(ConvAlgorithms::Exact);
    const std::vector<float> single = train(make_default_strategy());
    for (int n : {2, 4}) EXPECT_EQ(train(make_mirrored_cpu_strategy(n)), single) << n << " replicas";
  }
  ModelRecipe both = small_recipe(1);
  both.make_model = [] { return std::unique_ptr<Model>(); };
  EXPECT_THROW(make_default_strategy()->build(both), ArgumentError);  // make_model and add_layers
}

TEST(Mirrored, EveryReplicaHoldsTheSameParameters) {
  auto s = make_mirrored_cpu_strategy(3);
  s->build(small_recipe(1));
  FitOptions o;
  o.batch_size = 30;
  o.max_steps = 5;
  o.verbose = 0;
  const Dataset d = classes_dataset(90, 2);
  const History h = s->fit(d, o);
  EXPECT_EQ(h.epochs.size(), 1u);
  EXPECT_EQ(s->num_replicas(), 3);
  const EvalResult e = s->evaluate(d);
  EXPECT_EQ(e.samples, 90);
  EXPECT_GT(s->stats().step_seconds, 0.0);
}

TEST(Mirrored, UnevenBatchAndBadReplicaCountsAreErrors) {
  auto s = make_mirrored_cpu_strategy(3);
  s->build(small_recipe(1));
  FitOptions o;
  o.batch_size = 32;
  o.verbose = 0;
  EXPECT_THROW(s->fit(classes_dataset(64, 1), o), ArgumentError);
  EXPECT_THROW(make_mirrored_cpu_strategy(0), ArgumentError);
}

TEST(Mirrored, AFailingReplicaEndsTheStepNamingIt) {
  auto s = make_mirrored_cpu_strategy(2, std::chrono::seconds(30));
  s->build(small_recipe(1));
  detail::inject_fault(*s, /*member=*/1, /*step=*/3);
  FitOptions o;
  o.batch_size = 16;
  o.verbose = 0;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    s->fit(classes_dataset(160, 1), o);
    FAIL() << "expected the injected fault";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("replica 1"), std::string::npos) << m;
    EXPECT_NE(m.find("step 3"), std::string::npos) << m;
  }
  // One thread drives both replicas: the fault ends the step at once, nothing waits for it.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) worst = std::max(worst, std::abs(double(a[i]) - b[i]));
  return worst;
}

// --- One data-parallel step: Mirrored (N replicas, one thread) and MultiWorker (one replica per
// process; here one per thread over the thread communicator) are configurations of it ---------

// Mirrored on N CPU replicas driven by one thread, and MultiWorker with N members on threads
// (LocalCommunicator standing in for MPI): the same shards, weights and reduction order, so
// with one OpenMP thread per replica on both sides (the same kernels), the same bits.
TEST(DataParallel, MirroredEqualsMultiWorkerOnThreadsBitForBit) {
  set_num_threads(1);
  const Dataset d = classes_dataset(400, 1);  // 400 / 32: an uneven last batch too
  for (int n : {2, 4}) {
    const std::vector<float> one = train_with(make_mirrored_cpu_strategy(n), d, 32, 50);
    auto comms = make_local_communicators(n);
    std::vector<std::vector<float>> threaded(static_cast<size_t>(n));
    on_threads(n, [&](int r) {
      set_num_threads(1);  // OpenMP's thread count is per thread
      std::shared_ptr<Communicator> world = std::move(comms[static_cast<size_t>(r)]);
      threaded[static_cast<size_t>(r)] = train_with(detail::make_multiworker_strategy(world), d, 32, 50);
    });
    for (int r = 0; r < n; ++r)
      EXPECT_EQ(max_diff(one, threaded[static_cast<size_t>(r)]), 0.0) << n << " replicas, member " << r;
  }
  set_num_threads(0);
}

// BatchNormalization under data parallelism: each replica normalises with its own shard's
// statistics (Keras' default), and the moving statistics are averaged after every step, so every
// rank holds the same values: after one step from (0, 1) the moving mean is 0.01 x the mean of
// the shard means (= the global batch's mean, equal shards) and the variance the mean of the
// shards' unbiased variances moved 1% of the way.
ModelRecipe bn_recipe() {
  ModelRecipe r;
  r.add_layers = [](Sequential& m) {
    m.add<BatchNormalization>();  // first: its input is the batch itself
    m.add<Conv2D>(3, Size2{3, 3}, Activation::ReLU);
    m.add<Flatten>();
    m.add<Dropout>(0.25f);
    m.add<Dense>(4);
  };
  r.input_shape = Shape{1, 10, 10};
  r.seed = 5;
  r.make_optimizer = [] { return std::make_unique<Adam>(); };
  return r;
}

TEST(DataParallel, MovingStatisticsAreAveragedAndEqualOnEveryRank) {
  set_num_threads(1);
  const Dataset d = classes_dataset(64, 1);
  const int n = 2;
  for (int64_t steps : {1, 6}) {
    auto comms = make_local_communicators(n);
    std::vector<std::vector<float>> state(n), params(n);
    on_threads(n, [&](int r) {
      set_num_threads(1);
      auto s =
          detail::make_multiworker_strategy(std::shared_ptr<Communicator>(std::move(comms[static_cast<size_t>(r)])));
      s->build(bn_recipe());
      FitOptions o{.epochs = 1, .batch_size = 32, .seed = 9, .shuffle = false, .max_steps = steps, .verbose = 0};
      s->fit(d, o);
      state[r] = s->model().state().to_vector();
      params[r] = s->model().params().to_vector();
    });
    EXPECT_EQ(state[0], state[1]) << steps << " steps";
    EXPECT_EQ(params[0], params[1]) << steps << " steps";
    if (steps != 1) continue;
    // The first batch (no shuffle): rows 0-15 on rank 0, 16-31 on rank 1, pixels / 255.
    double mean = 0, var_sum = 0;
    for (int shard = 0; shard < 2; ++shard) {
      double s1 = 0, s2 = 0;
      const int64_t m = 16 * 100;
      for (int64_t i = shard * m; i < (shard + 1) * m; ++i) s1 += d.images().data<uint8_t>()[i] / 255.0;
      const double mu = s1 / m;
      for (int64_t i = shard * m; i < (shard + 1) * m; ++i) {
        const double v = d.images().data<uint8_t>()[i] / 255.0 - mu;
        s2 += v * v;
      }
      mean += 0.5 * mu;
      var_sum += 0.5 * s2 / (m - 1);
    }
    // state: [moving_mean, moving_variance] of the BN (averaged region), then Dropout's counter,
    // each view on a 256-byte boundary of the buffer (a view of 1 or 2 values takes 64 floats).
    const size_t view = static_cast<size_t>(Model::aligned_view(1));
    ASSERT_EQ(state[0].size(), 3 * view);
    EXPECT_NEAR(state[0][0], 0.01 * mean, 1e-6);
    EXPECT_NEAR(state[0][view], 0.99 + 0.01 * var_sum, 1e-6);
    EXPECT_EQ(state[0][2 * view], 1.0f);  // Dropout's step counter: one step, not averaged
  }
  set_num_threads(0);
}

// A stop request seen by one rank only stops every rank after the same step (the ranks agree
// on it per step), so no rank is left waiting in the next all-reduce; all report the position.
TEST(DataParallel, AStopRequestOnOneRankStopsEveryRankAtTheSameStep) {
  const Dataset d = classes_dataset(400, 1);  // 13 global batches of 32 per epoch
  auto comms = make_local_communicators(2);
  std::vector<History> h(2);
  std::vector<std::vector<float>> params(2);
  on_threads(2, [&](int r) {
    std::shared_ptr<Communicator> world = std::move(comms[static_cast<size_t>(r)]);
    auto s = detail::make_multiworker_strategy(world);
    s->build(small_recipe(3));
    FitOptions o;
    o.epochs = 3;
    o.batch_size = 32;
    o.verbose = 0;
    int polls = 0;
    o.stop_requested = [&polls, r] { return r == 1 && ++polls == 17; };  // rank 1 only, after step 17
    h[static_cast<size_t>(r)] = s->fit(d, o);
    params[static_cast<size_t>(r)] = s->model().params().to_vector();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(h[static_cast<size_t>(r)].stopped) << r;
    EXPECT_EQ(h[static_cast<size_t>(r)].stop_epoch, 1) << r;
    EXPECT_EQ(h[static_cast<size_t>(r)].stop_batch, 4) << r;  // 17 = 13 + 4
  }
  EXPECT_EQ(params[0], params[1]);
}

// Mirrored replicas resume mid-epoch like one model: stopped at a step, saved, loaded into a
// fresh strategy and continued, they end where an uninterrupted run does, bit for bit.
TEST(Mirrored, AStopMidEpochResumesBitForBit) {
  const Dataset d = classes_dataset(400, 1);
  FitOptions o;
  o.epochs = 2;
  o.batch_size = 32;
  o.seed = 4;
  o.verbose = 0;
  auto straight = make_mirrored_cpu_strategy(2);
  straight->build(small_recipe(3));
  straight->fit(d, o);
  auto first = make_mirrored_cpu_strategy(2);
  first->build(small_recipe(3));
  int polls = 0;
  o.stop_requested = [&polls] { return ++polls == 5; };
  const History h = first->fit(d, o);
  ASSERT_TRUE(h.stopped);
  EXPECT_EQ(h.stop_epoch, 0);
  EXPECT_EQ(h.stop_batch, 5);
  const std::string path = test::temp_dir("mirstop") + "/mid.safetensors";
  first->model().save(path, {.epochs_done = h.stop_epoch, .batches_done = h.stop_batch, .seed = 4, .batch_size = 32});
  auto resumed = make_mirrored_cpu_strategy(2);
  resumed->build(small_recipe(77));
  const TrainingState st = resumed->load(path);
  o.stop_requested = nullptr;
  o.initial_epoch = st.epochs_done;
  o.initial_batch = st.batches_done;
  resumed->fit(d, o);
  EXPECT_EQ(resumed->model().params().to_vector(), straight->model().params().to_vector());
  std::filesystem::remove_all(std::filesystem::path(path).parent_path());
}

// The replica deadline: armed past its timeout it reports the replica and step (here to a
// callback; in the job it ends the process), and disarmed in time it stays silent.
TEST(ReplicaWatchdog, NamesTheReplicaThatOverranItsDeadline) {
  std::mutex mu;
  std::vector<std::string> fired;
  {
    detail::ReplicaWatchdog dog("mirrored", std::chrono::milliseconds(50), [&](const std::string& m) {
      std::lock_guard lock(mu);
      fired.push_back(m);
    });
    dog.arm(0, Device::cpu(), 7);
    dog.disarm();  // in time
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    {
      std::lock_guard lock(mu);
      EXPECT_TRUE(fired.empty());
    }
    dog.arm(1, Device::cpu(), 8);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // 6x the deadline
    dog.disarm();
  }
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_NE(fired[0].find("mirrored: replica 1 (cpu) has not finished its part of step 8 within 0.05 s"),
            std::string::npos)
      << fired[0];
}

TEST(DataParallel, ReportsMetricsStatsAndFaults) {
  auto s = make_mirrored_cpu_strategy(3);
  EXPECT_NE(s->name().find("3 cpu replicas"), std::string::npos) << s->name();
  s->build(small_recipe(1));
  auto ref = make_default_strategy();
  ref->build(small_recipe(1));
  const Dataset d = classes_dataset(90, 2);
  FitOptions o;
  o.epochs = 2;
  o.batch_size = 30;
  o.verbose = 0;
  const History h = s->fit(d, o, &d), hr = ref->fit(d, o, &d);
  ASSERT_EQ(h.epochs.size(), 2u);
  for (size_t e = 0; e < 2; ++e) {  // the epoch metrics are the global batch's, as one replica's
    EXPECT_NEAR(h.epochs[e].loss, hr.epochs[e].loss, 1e-5) << e;
    EXPECT_NEAR(h.epochs[e].accuracy, hr.epochs[e].accuracy, 1e-9) << e;
    EXPECT_NEAR(*h.epochs[e].val_accuracy, *hr.epochs[e].val_accuracy, 1e-9) << e;
  }
  EXPECT_GT(s->stats().step_seconds, 0.0);
  EXPECT_GE(s->stats().allreduce_seconds, 0.0);
  EXPECT_LE(s->stats().allreduce_seconds, s->stats().step_seconds);
  o.batch_size = 32;
  EXPECT_THROW(s->fit(d, o), ArgumentError);  // 32 does not split over 3
  o.batch_size = 30;
  detail::inject_fault(*s, /*member=*/2, /*step=*/1);
  EXPECT_THROW(detail::inject_fault(*make_default_strategy(), 0, 0), ArgumentError);
  try {
    s->fit(d, o);
    FAIL() << "expected the injected fault";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("replica 2 (cpu) failed at step 1"), std::string::npos) << m;
  }
}

// --- GPU replicas (NCCL) ---------------------------------------------------------------------

// The usable GPUs; GPU math set to FP32 (TF32 is on by default), so that replicas compare
// within the CPU tolerances.
int usable_gpus() {
  set_allow_tf32(false);
  return cuda_available() ? static_cast<int>(cuda_status().gpus.size()) : 0;
}

TEST(Nccl, WithoutAGpuGpuReplicasSayWhy) {
  if (cuda_available()) GTEST_SKIP() << "a GPU is usable here: the no-GPU messages cannot be produced";
  EXPECT_THROW(detail::NcclCommunicator::create_local({0}, std::chrono::seconds(5)), DeviceError);
  try {
    make_mirrored_gpu_strategy({0});
    FAIL() << "expected DeviceError";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("no usable GPU"), std::string::npos) << e.what();
  }
  EXPECT_THROW(make_mirrored_gpu_strategy({}), ArgumentError);
  EXPECT_THROW(make_mirrored_gpu_strategy({0, 0}), DeviceError);  // two replicas on one GPU: still needs it
}

TEST(Nccl, AllReduceAndBroadcastOverEveryLocalGpu) {
  const int n = usable_gpus();
  if (n == 0) GTEST_SKIP() << "no usable GPU: " << cuda_status().reason;
  std::vector<int> devices;
  for (const GpuInfo& g : cuda_status().gpus) devices.push_back(g.index);
  auto comm = detail::NcclCommunicator::create_local(devices, std::chrono::seconds(30));
  EXPECT_EQ(comm->local_size(), n);
  std::vector<Tensor> bufs;
  std::vector<Tensor*> ptrs;
  const int64_t len = 1000;  // values r+1 and i: sums are small integers, exact in float
  for (int r = 0; r < n; ++r) {
    Tensor h = Tensor::empty(Shape{len});
    for (int64_t i = 0; i < len; ++i) h.f32()[i] = static_cast<float>((r + 1) * (i % 7));
    bufs.push_back(h.to(Device::cuda(devices[static_cast<size_t>(r)])));
  }
  for (auto& b : bufs) ptrs.push_back(&b);
  comm->all_reduce_sum(ptrs);
  comm->wait();
  const float total = static_cast<float>(n * (n + 1) / 2);
  for (int r = 0; r < n; ++r) {
    const std::vector<float> v = bufs[static_cast<size_t>(r)].to_vector();
    for (int64_t i = 0; i < len; ++i) ASSERT_EQ(v[static_cast<size_t>(i)], total * static_cast<float>(i % 7)) << r;
  }
  // Broadcast from the last member: everyone gets its values.
  Tensor root = Tensor::empty(Shape{len});
  for (int64_t i = 0; i < len; ++i) root.f32()[i] = static_cast<float>(i) * 0.5f;
  bufs.back() = root.to(Device::cuda(devices.back()));
  ptrs.back() = &bufs.back();
  comm->broadcast(ptrs, n - 1);
  comm->wait();
  for (int r = 0; r < n; ++r) EXPECT_EQ(bufs[static_cast<size_t>(r)].to_vector(), root.to_vector()) << r;
  EXPECT_GE(comm->busy_seconds(), 0.0);
}

// One member of a two-GPU clique waits for a collective the other never joins: the wait gives up
// within its timeout and aborts the whole clique, so destroying both returns (destroying the
// other one of a half-aborted clique would wait for ever). Needs two GPUs.
TEST(Nccl, ATimeoutAbortsTheWholeCliqueAndDestroyReturns) {
  if (usable_gpus() < 2) GTEST_SKIP() << "needs 2 GPUs, " << usable_gpus() << " usable";
  const auto* ops =
      static_cast<const detail::NcclOps*>(detail::require_cuda_module("NCCL test").ops(detail::NcclOps::kOwner));
  ASSERT_NE(ops, nullptr);
  const int d0 = cuda_status().gpus[0].index, d1 = cuda_status().gpus[1].index;
  std::vector<void*> comms;
  ops->init_all({d0, d1}, &comms);
  Tensor b = Tensor::zeros(Shape{1024}, DType::F32, Device::cuda(d0));
  Tensor b1 = Tensor::zeros(Shape{1024}, DType::F32, Device::cuda(d1));
  // One collective with both members first: NCCL connects peers at the first collective, which
  // a one-sided call could wait for inside ncclGroupEnd, before any timeout runs.
  ops->all_reduce_sum(comms, {&b, &b1}, 10000);
  ops->wait(comms, 10000);
  std::vector<Tensor*> bufs{&b};
  ops->all_reduce_sum({comms[0]}, bufs, 1000);  // member 1 never joins
  EXPECT_THROW(ops->wait({comms[0]}, 1000), CollectiveError);
  std::atomic<bool> done{false};
  std::thread([&] {
    ops->destroy(comms[0]);
    ops->destroy(comms[1]);
    done = true;
  }).detach();
  for (int i = 0; i < 300 && !done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  if (!done) {
    ADD_FAILURE() << "destroying the clique hangs after a timeout";
    std::_Exit(1);  // the hung thread cannot be joined
  }
}

// The multi-process path (non-blocking communicators from a unique id, as MultiWorker builds
// them over MPI) with threads standing in for processes: the bootstrap is the in-process
// communicator, one thread per GPU (world size 1 on a single GPU).
TEST(Nccl, CommunicatorsFromAUniqueIdSumAcrossMembers) {
  const int n = usable_gpus();
  if (n == 0) GTEST_SKIP() << "no usable GPU: " << cuda_status().reason;
  auto boot = make_local_communicators(n);
  std::vector<std::vector<float>> results(static_cast<size_t>(n));
  on_threads(n, [&](int r) {
    const int device = cuda_status().gpus[static_cast<size_t>(r)].index;
    auto comm =
        detail::NcclCommunicator::create_across(*boot[static_cast<size_t>(r)], device, std::chrono::seconds(60));
    EXPECT_EQ(comm->rank(), r);
    EXPECT_EQ(comm->size(), n);
    Tensor h = Tensor::empty(Shape{513});
    h.fill(static_cast<float>(r + 1));
    Tensor g = h.to(Device::cuda(device));
    comm->set_step(7);
    comm->all_reduce_sum(g);
    comm->wait();
    results[static_cast<size_t>(r)] = g.to_vector();
  });
  for (const auto& v : results) EXPECT_EQ(v, std::vector<float>(513, static_cast<float>(n * (n + 1) / 2)));
}

// World size 1 on any single GPU: the same ops in the same order as Default on that GPU (the
// all-reduce of one member copies, the weight is 1), deterministic cuDNN algorithms: the same bits.
TEST(MirroredGpu, OneGpuEqualsDefaultOnThatGpuBitForBit) {
  if (usable_gpus() < 1) GTEST_SKIP() << "no usable GPU: " << cuda_status().reason;
  const test::GpuSettingsScope settings;  // restored however the test ends
  set_gpu_deterministic(true);
  const Dataset d = classes_dataset(400, 1);
  const Device gpu = Device::cuda(cuda_status().gpus.front().index);
  const std::vector<float> single = train_with(make_default_strategy(), d, 32, 50, gpu);
  const std::vector<float> mirrored = train_with(make_mirrored_gpu_strategy({gpu.index}), d, 32, 50, gpu);
  EXPECT_EQ(max_diff(mirrored, single), 0.0);
}

// N GPUs on a global batch B == one GPU on B: each replica's cuDNN/cuBLAS sums run over its
// shard, so, as with CPU replicas, equal within kReplicaTolerance rather than bit for bit.
TEST(MirroredGpu, TwoGpusEqualOneOnTheSameGlobalBatch) {
  if (usable_gpus() < 2) GTEST_SKIP() << "needs 2 usable GPUs, this machine has " << usable_gpus();
  const Dataset d = classes_dataset(400, 1);
  const int g0 = cuda_status().gpus[0].index, g1 = cuda_status().gpus[1].index;
  const std::vector<float> single = train_with(make_default_strategy(), d, 32, 50, Device::cuda(g0));
  const std::vector<float> mirrored = train_with(make_mirrored_gpu_strategy({g0, g1}), d, 32, 50, Device::cuda(g0));
  const double worst = max_diff(mirrored, single);
  std::printf("2 GPUs: max |parameter difference| after 50 steps = %.3g\n", worst);
  EXPECT_LE(worst, kReplicaTolerance);
}

// The multi-replica logic on a one-GPU machine: three replicas on one GPU (the batch split, a
// device per replica, the host-staged sum, Adam on each) equal one replica on the same global
// batch within the replica tolerance (each replica's cuDNN/cuBLAS sums cover its shard, so the
// sum's order differs from one replica's: not bit for bit), equal three CPU replicas within the
// CPU-vs-GPU tolerance, and in deterministic mode give the same bits on a second run.
TEST(MirroredGpu, ReplicasSharingOneGpuEqualOneReplica) {
  if (usable_gpus() < 1) GTEST_SKIP() << "no usable GPU: " << cuda_status().reason;
  const Dataset d = classes_dataset(400, 1);
  const int g = cuda_status().gpus[0].index;
  const Device gpu = Device::cuda(g);
  std::vector<float> single, shared, again;
  {
    const test::GpuSettingsScope settings;  // deterministic for these three, however they end
    set_gpu_deterministic(true);
    single = train_with(make_default_strategy(), d, 48, 50, gpu);
    shared = train_with(make_mirrored_gpu_strategy({g, g, g}), d, 48, 50, gpu);
    again = train_with(make_mirrored_gpu_strategy({g, g, g}), d, 48, 50, gpu);
  }
  const std::vector<float> cpu = train_with(make_mirrored_cpu_strategy(3), d, 48, 50);
  const double worst = max_diff(shared, single);
  std::printf("3 replicas on one GPU: max |parameter difference| to one replica after 50 steps = %.3g\n", worst);
  EXPECT_LE(worst, kReplicaTolerance);
  EXPECT_EQ(max_diff(again, shared), 0.0);
  EXPECT_LE(max_diff(shared, cpu), 1e-4);  // as MatchesMirroredOnTheCpu, over more steps
}

// GPU replicas against CPU replicas: the same training within the CPU-vs-GPU tolerance of
// test_cuda_training (different kernels, same mathematics).
TEST(MirroredGpu, MatchesMirroredOnTheCpu) {
  if (usable_gpus() < 1) GTEST_SKIP() << "no usable GPU: " << cuda_status().reason;
  const Dataset d = classes_dataset(200, 3);
  const int g0 = cuda_status().gpus[0].index;
  const std::vector<float> cpu = train_with(make_mirrored_cpu_strategy(1), d, 32, 10);
  const std::vector<float> gpu = train_with(make_mirrored_gpu_strategy({g0}), d, 32, 10, Device::cuda(g0));
  EXPECT_LE(max_diff(gpu, cpu), 1e-4);  // ten Adam steps of 1e-3; rounding differences ~1e-6
}

}  // namespace
}  // namespace ember
