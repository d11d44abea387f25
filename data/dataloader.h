// DataLoader: batches over a Dataset, one epoch at a time.
//  - Seeded shuffle each epoch (seed and epoch number decide the order, so a resumed run sees
//    the same batches).
//  - Batches of batch_size and a smaller last one (60000 / 64 -> 938 steps, as Keras).
//  - Sharding for data-parallel workers: with `num_shards` > 1 every global batch is split into
//    contiguous, near-equal slices and shard `shard` receives its slice.
//  - Prefetch: the next batch is gathered on a background thread while the caller trains on
//    the current one.
#pragma once

#include <cstdint>
#include <future>
#include <vector>

#include "data/dataset.h"

namespace ember {

struct Batch {
  Tensor x;  // f32 (B, C, H, W), normalised
  Tensor y;  // i32 (B)
  int64_t index = 0;        // batch number within the epoch
  int64_t global_size = 0;  // samples in the whole global batch (all shards together)
};

struct DataLoaderOptions {
  int64_t batch_size = 64;
  bool shuffle = true;
  uint64_t seed = 0;
  int num_shards = 1;
  int shard = 0;
  bool prefetch = true;
};

class DataLoader {
 public:
  DataLoader(const Dataset& dataset, DataLoaderOptions options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Batches per epoch, counting the smaller last one.
  int64_t num_batches() const;
  // Starts `epoch` (0-based) at batch `first_batch` (for resuming mid-epoch).
  void start_epoch(int64_t epoch, int64_t first_batch = 0);
  // Fills `batch` with the next batch of the epoch; false when the epoch is done. The tensors
  // in `batch` stay valid until the next call.
  bool next(Batch& batch);
  // The sample order of `epoch` (for tests and sharding checks).
  std::vector<int64_t> epoch_order(int64_t epoch) const;
  const Dataset& dataset() const { return dataset_; }

 private:
  void gather_into(int64_t b, Batch& out) const;  // this shard's part of global batch b

  const Dataset& dataset_;
  DataLoaderOptions opt_;
  std::vector<int64_t> order_;
  int64_t next_batch_ = 0;
  Batch buffers_[2];
  int current_ = 0;
  std::future<void> pending_;  // gathering buffers_[1 - current_] for batch next_batch_
};

}  // namespace ember
