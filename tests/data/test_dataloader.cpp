// DataLoader: seeded order, every sample once per epoch, last batch size, shards, normalisation.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <type_traits>

#include "test_util.h"

namespace ember {
namespace {

// Image i is filled with the value i % 256 and labelled i % 10, so a batch reveals its indices.
Dataset indexed_dataset(int64_t n) {
  Tensor images = Tensor::empty(Shape{n, 1, 2, 2}, DType::U8);
  Tensor labels = Tensor::empty(Shape{n}, DType::I32);
  for (int64_t i = 0; i < n; ++i) {
    for (int j = 0; j < 4; ++j) images.data<uint8_t>()[i * 4 + j] = static_cast<uint8_t>(i % 256);
    labels.data<int32_t>()[i] = static_cast<int32_t>(i % 10);
  }
  return Dataset(images, labels, 10);
}

std::vector<int64_t> collect(DataLoader& loader, int64_t epoch, std::vector<int64_t>* sizes = nullptr) {
  std::vector<int64_t> seen;
  loader.start_epoch(epoch);
  Batch b;
  while (loader.next(b)) {
    if (sizes) sizes->push_back(b.x().dim(0));
    for (int64_t i = 0; i < b.x().dim(0); ++i) seen.push_back(std::lround(b.x().f32()[i * 4] * 255.0f));
  }
  return seen;
}

TEST(DataLoader, EverySampleOncePerEpochWithSmallerLastBatch) {
  const Dataset d = indexed_dataset(250);
  DataLoader loader(d, {.batch_size = 64, .shuffle = true, .seed = 9});
  EXPECT_EQ(loader.num_batches(), 4);
  std::vector<int64_t> sizes;
  std::vector<int64_t> seen = collect(loader, 0, &sizes);
  EXPECT_EQ(sizes, (std::vector<int64_t>{64, 64, 64, 58}));
  std::sort(seen.begin(), seen.end());
  for (int64_t i = 0; i < 250; ++i) EXPECT_EQ(seen[static_cast<size_t>(i)], i % 256);
}

TEST(DataLoader, SameSeedSameOrderNewEpochNewOrder) {
  const Dataset d = indexed_dataset(200);
  DataLoader a(d, {.batch_size = 32, .seed = 5}), b(d, {.batch_size = 32, .seed = 5}),
      c(d, {.batch_size = 32, .seed = 6});
  const auto a0 = collect(a, 0);
  EXPECT_EQ(a0, collect(b, 0));
  EXPECT_NE(a0, collect(c, 0));
  EXPECT_NE(a0, collect(a, 1));
  EXPECT_EQ(a.epoch_order(3), b.epoch_order(3));
  DataLoader plain(d, {.batch_size = 32, .shuffle = false});
  const auto in_order = collect(plain, 0);
  EXPECT_TRUE(std::is_sorted(in_order.begin(), in_order.end()));
}

TEST(DataLoader, PrefetchDoesNotChangeTheBatches) {
  const Dataset d = indexed_dataset(150);
  DataLoader with(d, {.batch_size = 16, .seed = 2, .prefetch = true});
  DataLoader without(d, {.batch_size = 16, .seed = 2, .prefetch = false});
  EXPECT_EQ(collect(with, 4), collect(without, 4));
}

TEST(DataLoader, ShardsSplitEachGlobalBatch) {
  const Dataset d = indexed_dataset(100);
  DataLoader whole(d, {.batch_size = 30, .seed = 1});
  DataLoader s0(d, {.batch_size = 30, .seed = 1, .num_shards = 3, .shard = 0});
  DataLoader s1(d, {.batch_size = 30, .seed = 1, .num_shards = 3, .shard = 1});
  DataLoader s2(d, {.batch_size = 30, .seed = 1, .num_shards = 3, .shard = 2});
  std::vector<int64_t> sz0, sz1, sz2;
  const auto all = collect(whole, 0);
  const auto p0 = collect(s0, 0, &sz0), p1 = collect(s1, 0, &sz1), p2 = collect(s2, 0, &sz2);
  EXPECT_EQ(sz0, (std::vector<int64_t>{10, 10, 10, 3}));  // the last global batch of 10 splits 3/3/4
  EXPECT_EQ(sz2, (std::vector<int64_t>{10, 10, 10, 4}));
  std::multiset<int64_t> joined(p0.begin(), p0.end());
  joined.insert(p1.begin(), p1.end());
  joined.insert(p2.begin(), p2.end());
  EXPECT_EQ(joined, std::multiset<int64_t>(all.begin(), all.end()));
  // Shard 1's first batch is the middle third of the first global batch.
  EXPECT_EQ(std::vector<int64_t>(p1.begin(), p1.begin() + 10),
            std::vector<int64_t>(all.begin() + 10, all.begin() + 20));
}

TEST(DataLoader, NormalisesToUnitRangeAndRejectsBadOptions) {
  const Dataset d = indexed_dataset(256);
  DataLoader loader(d, {.batch_size = 256, .shuffle = false});
  loader.start_epoch(0);
  Batch b;
  ASSERT_TRUE(loader.next(b));
  EXPECT_FLOAT_EQ(b.x().f32()[255 * 4], 1.0f);
  EXPECT_FLOAT_EQ(b.x().f32()[0], 0.0f);
  EXPECT_EQ(b.y().data<int32_t>()[13], 3);
  EXPECT_FALSE(loader.next(b));
  EXPECT_THROW(DataLoader(d, {.batch_size = 0}), ArgumentError);
  EXPECT_THROW(DataLoader(d, {.batch_size = 8, .num_shards = 2, .shard = 2}), ArgumentError);
}

TEST(DataLoader, AnEmptyDatasetIsNamedAndATemporaryIsRefusedAtCompileTime) {
  const Dataset empty(Tensor::zeros(Shape{0, 1, 2, 2}, DType::U8), Tensor::zeros(Shape{0}, DType::I32), 10,
                      "fashion-mnist/test");
  try {
    DataLoader loader(empty, {});
    FAIL();
  } catch (const ArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("'fashion-mnist/test' is empty"), std::string::npos) << e.what();
  }
  // The loader keeps a reference: DataLoader(make_dataset(), ...) would dangle, so it does not compile.
  static_assert(!std::is_constructible_v<DataLoader, Dataset&&, DataLoaderOptions>);
  static_assert(std::is_constructible_v<DataLoader, const Dataset&, DataLoaderOptions>);
}

TEST(Dataset, RejectsMismatchedInputs) {
  EXPECT_THROW(Dataset(Tensor::zeros(Shape{3, 1, 2, 2}, DType::U8), Tensor::zeros(Shape{2}, DType::I32), 10),
               ShapeError);
  EXPECT_THROW(Dataset(Tensor::zeros(Shape{3, 1, 2, 2}, DType::F32), Tensor::zeros(Shape{3}, DType::I32), 10),
               ShapeError);
  Tensor labels = Tensor::zeros(Shape{2}, DType::I32);
  labels.data<int32_t>()[1] = 10;
  EXPECT_THROW(Dataset(Tensor::zeros(Shape{2, 1, 2, 2}, DType::U8), labels, 10), ArgumentError);
}

}  // namespace
}  // namespace ember
