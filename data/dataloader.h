/// @file
/// DataLoader: batches over a Dataset, one epoch at a time.
///  - Seeded shuffle each epoch (seed and epoch number decide the order, so a resumed run sees
///    the same batches).
///  - Batches of batch_size and a smaller last one (60000 / 64 -> 938 steps, as Keras).
///  - Sharding for data-parallel workers: with `num_shards` > 1 every global batch is split into
///    contiguous, near-equal slices and shard `shard` receives its slice.
///  - Prefetch: the next batch is gathered on a background thread (one, for the loader's life)
///    while the caller trains on the current one; batch buffers are reused, so the steady state
///    allocates nothing.
///  - On a GPU (`device` cuda:N): the dataset is copied to the device once, as it is (u8 images
///    stay u8), and each epoch's sample order once per epoch; every batch is then gathered and
///    scaled there by
///    a kernel queued on the device's stream (no host copy per step, no prefetch thread needed).
///    The epoch's position (the cursor) lives on the device too and each gather advances it, so
///    a CUDA graph of a step that includes the gather replays the next batch every time; full
///    batches always land in the same buffers, the short last one in its own.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "dataset.h"

namespace ember {

/// One batch from a DataLoader: a tensor per dataset input and per target.
struct Batch {
  /// per dataset input: f32 (B, ...), the features scaled (DataInput::scale), or i32 (B, ...) ids as they are
  std::vector<Tensor> inputs;
  std::vector<Tensor> targets;  ///< per dataset target: i32 (B, ...) labels or f32 (B, ...)
  /// The first (usually the only) input and target.
  ///@{
  const Tensor& x() const { return inputs.at(0); }
  Tensor& x() { return inputs.at(0); }
  const Tensor& y() const { return targets.at(0); }
  Tensor& y() { return targets.at(0); }
  ///@}
  int64_t rows() const { return inputs.empty() ? 0 : inputs[0].dim(0); }  ///< B: this shard's rows (0 when empty)
  int64_t global_size = 0;  ///< samples in the whole global batch (all shards together)
  /// Set only by a loader with `defer_device_gather`: queues the gather of x and y on their GPU
  /// (until then they are allocated but not filled) and advances the loader's device cursor.
  /// Call it exactly once per batch, before x or y is read: a captured training step captures it.
  std::function<void()> gather;
};

/// How a DataLoader batches, shuffles, shards and places its batches.
struct DataLoaderOptions {
  int64_t batch_size = 64;        ///< samples per global batch (the last one may be smaller)
  bool shuffle = true;            ///< a seeded shuffle each epoch (else the dataset's order)
  uint64_t seed = 0;              ///< with the epoch number, decides the shuffle
  int num_shards = 1;             ///< data-parallel workers the global batches are split among
  int shard = 0;                  ///< this worker's slice, in [0, num_shards)
  bool prefetch = true;           ///< CPU batches only
  Device device = Device::cpu();  ///< where the batches are built (see dataloader.h)
  /// On a GPU: next() leaves the gather to the caller, as Batch::gather (see there).
  bool defer_device_gather = false;
};

/// Batches over a Dataset, one epoch at a time (see dataloader.h).
class DataLoader {
 public:
  /// The loader keeps a reference to `dataset`, which must outlive it: a temporary is refused at
  /// compile time (the overload below), since it would dangle from the first next().
  DataLoader(const Dataset& dataset, DataLoaderOptions options);
  DataLoader(Dataset&& dataset, DataLoaderOptions options) = delete;
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  /// Batches per epoch, counting the smaller last one.
  int64_t num_batches() const;
  /// Starts `epoch` (0-based) at batch `first_batch` (a resume from a mid-epoch checkpoint: the
  /// batches before it were trained on already, in the same order).
  void start_epoch(int64_t epoch, int64_t first_batch = 0);
  /// Fills `batch` with the next batch of the epoch; false when the epoch is done. The tensors
  /// in `batch` stay valid until the next call.
  bool next(Batch& batch);
  /// The sample order of `epoch` (for tests and sharding checks).
  std::vector<int64_t> epoch_order(int64_t epoch) const;
  const Dataset& dataset() const { return dataset_; }  ///< The dataset it batches.
  Device device() const { return opt_.device; }        ///< Where its batches are built.

 private:
  void gather_into(int64_t b, Batch& out) const;  // this shard's part of global batch b
  void prefetch_loop();
  void wait_idle();  // waits until the worker holds no request (caller holds no lock)

  const Dataset& dataset_;
  DataLoaderOptions opt_;
  std::vector<int64_t> order_;
  int64_t next_batch_ = 0;
  Batch buffers_[2];
  int current_ = 0;
  // Prefetch state, guarded by mu_: the worker gathers batch `requested_` into
  // buffers_[1 - current_] and sets `ready_` (or `error_`).
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t requested_ = -1;
  bool ready_ = false, stop_ = false;
  std::exception_ptr error_;
  std::thread worker_;
  // GPU batches: the dataset, and this epoch's order (i32, the sample indices then the cursor)
  // on opt_.device.
  std::vector<Tensor> device_inputs_, device_targets_;
  Tensor device_order_;
};

}  // namespace ember
