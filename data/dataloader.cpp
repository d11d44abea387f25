// DataLoader: Fisher-Yates shuffle from the seeded Rng; double-buffered prefetch on one worker
// thread (gathering a batch is memory-bound and small next to a training step).
#include "dataloader.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <utility>

#include "../core/error.h"
#include "../core/rng.h"
#include "cuda_ops.h"

namespace ember {

DataLoader::DataLoader(const Dataset& dataset, DataLoaderOptions options) : dataset_(dataset), opt_(options) {
  EMBER_CHECK(opt_.batch_size > 0, ArgumentError,
              "DataLoader: batch size must be > 0, got " + std::to_string(opt_.batch_size));
  EMBER_CHECK(
      opt_.num_shards >= 1 && opt_.shard >= 0 && opt_.shard < opt_.num_shards, ArgumentError,
      "DataLoader: shard " + std::to_string(opt_.shard) + " of " + std::to_string(opt_.num_shards) + " is invalid");
  EMBER_CHECK(opt_.batch_size >= opt_.num_shards, ArgumentError,
              "DataLoader: a global batch of " + std::to_string(opt_.batch_size) + " cannot feed " +
                  std::to_string(opt_.num_shards) + " shards");
  EMBER_CHECK(
      dataset.size() > 0, ArgumentError,
      "DataLoader: the dataset " + (dataset.name().empty() ? std::string() : "'" + dataset.name() + "' ") + "is empty");
  if (opt_.device.is_cuda()) {
    EMBER_CHECK(dataset.size() <= std::numeric_limits<int32_t>::max(), ArgumentError,
                "DataLoader: a dataset on the GPU holds at most 2^31-1 samples");
    for (const DataInput& in : dataset.inputs())
      device_inputs_.push_back(in.values.to(opt_.device));  // once: 47 MB for MNIST's training set
    for (const DataTarget& t : dataset.all_targets()) device_targets_.push_back(t.values.to(opt_.device));
    opt_.prefetch = false;  // the gather is a kernel queued behind the running step
  }
  if (opt_.prefetch) worker_ = std::thread([this] { prefetch_loop(); });
}

DataLoader::~DataLoader() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void DataLoader::prefetch_loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || requested_ >= 0; });
    if (stop_) return;
    const int64_t b = requested_;
    Batch& spare = buffers_[1 - current_];
    lock.unlock();
    std::exception_ptr err;
    try {
      gather_into(b, spare);
    } catch (...) {
      err = std::current_exception();
    }
    lock.lock();
    requested_ = -1;
    ready_ = !err;
    error_ = err;
    cv_.notify_all();
  }
}

void DataLoader::wait_idle() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return requested_ < 0; });
}

int64_t DataLoader::num_batches() const { return (dataset_.size() + opt_.batch_size - 1) / opt_.batch_size; }

std::vector<int64_t> DataLoader::epoch_order(int64_t epoch) const {
  std::vector<int64_t> order(static_cast<size_t>(dataset_.size()));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (opt_.shuffle) {
    Rng rng = Rng(opt_.seed).fork(0x5348554646ull /* "SHUFF" */ + static_cast<uint64_t>(epoch));
    for (size_t i = order.size() - 1; i > 0; --i) std::swap(order[i], order[rng.below(i + 1)]);
  }
  return order;
}

void DataLoader::start_epoch(int64_t epoch, int64_t first_batch) {
  EMBER_CHECK(
      first_batch >= 0 && first_batch <= num_batches(), ArgumentError,
      "DataLoader: first batch " + std::to_string(first_batch) + " is outside 0.." + std::to_string(num_batches()));
  wait_idle();
  {
    std::lock_guard lock(mu_);
    ready_ = false;
    error_ = nullptr;
  }
  order_ = epoch_order(epoch);
  next_batch_ = first_batch;
  if (opt_.device.is_cuda()) {  // the order and cursor go to the device once per epoch (checked here)
    const int64_t n = static_cast<int64_t>(order_.size());
    Tensor order = Tensor::empty(Shape{n + 1}, DType::I32, Device::cpu());
    int32_t* o = order.data<int32_t>();
    for (size_t i = 0; i < order_.size(); ++i) {
      EMBER_CHECK(order_[i] >= 0 && order_[i] < dataset_.size(), Error, "DataLoader: bad sample index");
      o[i] = static_cast<int32_t>(order_[i]);
    }
    o[n] = static_cast<int32_t>(std::min(first_batch * opt_.batch_size, n));  // the cursor
    ensure(device_order_, order.shape(), DType::I32, opt_.device);
    device_order_.copy_from(order);  // on the device's stream, after the last epoch's gathers
  }
}

void DataLoader::gather_into(int64_t b, Batch& out) const {
  const int64_t begin = b * opt_.batch_size;
  const int64_t global = std::min(opt_.batch_size, dataset_.size() - begin);
  // Shard s gets [global*s/S, global*(s+1)/S): near-equal, contiguous, covering the batch.
  const int64_t lo = begin + global * opt_.shard / opt_.num_shards;
  const int64_t hi = begin + global * (opt_.shard + 1) / opt_.num_shards;
  out.global_size = global;
  if (opt_.device.is_cuda()) {
    out.inputs.resize(dataset_.num_inputs());
    for (size_t k = 0; k < out.inputs.size(); ++k)
      ensure(out.inputs[k], dataset_.input(k).values.shape().without_batch().with_batch(hi - lo),
             dataset_.input(k).batch_dtype(), opt_.device);
    out.targets.resize(dataset_.num_targets());
    for (size_t k = 0; k < out.targets.size(); ++k)
      ensure(out.targets[k], dataset_.target(k).values.shape().without_batch().with_batch(hi - lo),
             dataset_.target(k).values.dtype(), opt_.device);
    // The device cursor is at `begin` here: the last gather advances it by this global batch's
    // size (a full batch, or the short last one: never past the order's end).
    // Input k's gather brings target k along while both exist, the further targets come alone.
    // `out` is one of the loader's two buffers: it outlives the batch handed out (a shallow copy).
    out.gather = [this, shard_offset = lo - begin, count = hi - lo, global, &out] {
      static const Tensor none;
      static Tensor unused;
      std::vector<Tensor>&xs = out.inputs, &ys = out.targets;
      const size_t calls = std::max(xs.size(), ys.size());
      for (size_t k = 0; k < calls; ++k)
        detail::data_cuda_ops().gather_batch(
            k < xs.size() ? device_inputs_[k] : none, k < ys.size() ? device_targets_[k] : none,
            k < xs.size() ? dataset_.input(k).scale : 1.0f, device_order_, shard_offset, count,
            k + 1 == calls ? global : 0, k < xs.size() ? xs[k] : unused, k < ys.size() ? ys[k] : unused);
    };
    if (!opt_.defer_device_gather) {
      out.gather();
      out.gather = nullptr;
    }
    return;
  }
  dataset_.gather(std::span<const int64_t>(order_.data() + lo, static_cast<size_t>(hi - lo)), out.inputs, out.targets);
}

bool DataLoader::next(Batch& batch) {
  EMBER_CHECK(!order_.empty(), Error, "DataLoader: next() before start_epoch()");
  if (next_batch_ >= num_batches()) return false;
  bool prefetched = false;
  if (opt_.prefetch) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return requested_ < 0; });
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));  // on the caller's thread
    prefetched = std::exchange(ready_, false);
    if (prefetched) current_ = 1 - current_;
  }
  // On a GPU, full batches always use buffer 0 and the short last one buffer 1: a captured
  // step keeps reading the same addresses.
  if (opt_.device.is_cuda()) current_ = next_batch_ + 1 == num_batches() && dataset_.size() % opt_.batch_size ? 1 : 0;
  if (!prefetched) gather_into(next_batch_, buffers_[current_]);
  batch = buffers_[current_];  // shallow: shares storage with the buffer
  ++next_batch_;
  if (opt_.prefetch && next_batch_ < num_batches()) {
    {
      std::lock_guard lock(mu_);
      requested_ = next_batch_;  // into buffers_[1 - current_]
    }
    cv_.notify_all();
  }
  return true;
}

}  // namespace ember
