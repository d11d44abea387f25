// Embedding and PositionEmbedding: rows copied exactly, bad ids named, the table gradient against
// its definition (each id's values summed per group of 16 positions, the groups as the pairwise
// tree) bit for bit, rows no id reaches exactly zero, halves adding up to the whole batch on 1
// and 2 threads, a model of ids trained, saved and recreated, bad arguments.
#include <gtest/gtest.h>

#include <bit>
#include <filesystem>
#include <string>

#include "core/pairwise_sum.h"
#include "idx_fixtures.h"
#include "layers/embedding_math.h"
#include "test_util.h"

namespace ember {
namespace {

Tensor ids_of(const Shape& shape, std::initializer_list<int32_t> values) {
  Tensor t = Tensor::empty(shape, DType::I32);
  std::copy(values.begin(), values.end(), t.data<int32_t>());
  return t;
}

// n * t ids in [0, v): a fixed pattern that leaves id v - 1 out.
Tensor pattern_ids(int64_t n, int64_t t, int32_t v) {
  Tensor ids = Tensor::empty(Shape{n, t}, DType::I32);
  for (int64_t p = 0; p < n * t; ++p) ids.data<int32_t>()[p] = static_cast<int32_t>((p * 7 + p / 5) % (v - 1));
  return ids;
}

TEST(Embedding, ForwardCopiesTheRows) {
  Embedding emb(5, 3);
  EXPECT_EQ(test::build_standalone(emb, Shape{4}, 1), (Shape{4, 3}));
  const Tensor ids = ids_of(Shape{2, 4}, {0, 4, 4, 2, 1, 3, 0, 2});
  const Tensor& y = emb.forward(ids, false);
  ASSERT_EQ(y.shape(), (Shape{2, 4, 3}));
  const float* table = emb.params()[0].f32();
  for (int64_t p = 0; p < 8; ++p)
    for (int64_t k = 0; k < 3; ++k) EXPECT_EQ(y.f32()[p * 3 + k], table[ids.data<int32_t>()[p] * 3 + k]);
}

TEST(Embedding, AnIdOutsideTheVocabularyIsNamed) {
  Embedding emb(5, 3);
  test::build_standalone(emb, Shape{4}, 1);
  try {
    emb.forward(ids_of(Shape{1, 4}, {0, 1, 2, 5}), false);
    FAIL() << "no error for id 5";
  } catch (const ArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("id 5 at position 3"), std::string::npos) << e.what();
  }
  EXPECT_THROW(emb.forward(ids_of(Shape{1, 4}, {0, -1, 2, 3}), false), ArgumentError);
  EXPECT_THROW(emb.forward(Tensor::zeros(Shape{1, 4}), false), ShapeError);  // f32 is not ids
}

// 6 samples of 11 ids (66 positions: 4 full groups of 16 and a partial one), 9 ids, the last
// never used: each table row equals its definition's bits, computed here independently.
TEST(Embedding, TheTableGradientIsEachIdsSumInTheBatchOrder) {
  const int32_t v = 9;
  Embedding emb(v, 4);
  test::build_standalone(emb, Shape{11}, 2);
  const Tensor ids = pattern_ids(6, 11, v);
  const Tensor dy = test::random_tensor(Shape{6, 11, 4}, 3);
  emb.forward(ids, true);
  emb.backward(dy);
  const std::vector<float> got = emb.grads()[0].to_vector();
  const int32_t* id = ids.data<int32_t>();
  const int64_t groups = batch_groups(66);
  for (int32_t row = 0; row < v; ++row)
    for (int64_t k = 0; k < 4; ++k) {
      const float want = pairwise_sum(0, groups, k, [&](int64_t g, int64_t kk) {
        float s = 0.0f;
        for (int64_t p = g * kBatchGroupRows; p < std::min<int64_t>(66, (g + 1) * kBatchGroupRows); ++p)
          if (id[p] == row) s += dy.f32()[p * 4 + kk];
        return s;
      });
      EXPECT_EQ(got[static_cast<size_t>(row * 4 + k)], want) << row << ", " << k;
    }
  for (int64_t k = 0; k < 4; ++k) EXPECT_EQ(got[static_cast<size_t>((v - 1) * 4 + k)], 0.0f);  // never used
}

// The GPU's form of the sum (a binary counter over every group, no recursion) gives the CPU's
// recursive tree's bits: for 1 to 70 groups, ids present in every group, in a few, in one, in none.
TEST(Embedding, TheCounterFormOfTheSumIsTheTreesBitForBit) {
  const Tensor dy = test::random_tensor(Shape{70 * 16, 3}, 12);
  for (int64_t groups = 1; groups <= 70; ++groups)
    for (const int64_t every : {1, 3, 7, 16, 50, 2000}) {  // a position every `every` rows
      std::vector<int32_t> pos;
      for (int64_t p = every / 2; p < groups * 16; p += every) pos.push_back(static_cast<int32_t>(p));
      for (int64_t col = 0; col < 3; ++col) {
        float tree = 0.0f;
        detail::embedding_grad_tree(pos.data(), static_cast<int64_t>(pos.size()), dy.f32(), 3, col, 0, groups, &tree);
        const float counter =
            detail::embedding_grad_counter(pos.data(), static_cast<int64_t>(pos.size()), dy.f32(), 3, col, groups);
        EXPECT_EQ(std::bit_cast<uint32_t>(counter), std::bit_cast<uint32_t>(tree))
            << groups << " groups, every " << every << ", column " << col;
      }
    }
}

TEST(Embedding, HalvesAddUpToTheWholeBatchAtAnyThreadCount) {
  Embedding emb(7, 5);
  test::build_standalone(emb, Shape{8}, 4);
  const Tensor ids = pattern_ids(8, 8, 7), dy = test::random_tensor(Shape{8, 8, 5}, 5);
  const auto grad = [&](const Tensor& i, const Tensor& d) {
    emb.forward(i, true);
    emb.backward(d);
    return emb.grads()[0].to_vector();
  };
  const std::vector<float> whole = grad(ids, dy);
  const std::vector<float> a = grad(ids.rows(0, 4).clone(), dy.rows(0, 4).clone());
  const std::vector<float> b = grad(ids.rows(4, 4).clone(), dy.rows(4, 4).clone());
  for (size_t i = 0; i < whole.size(); ++i) EXPECT_EQ(whole[i], a[i] + b[i]) << i;
  const int threads = num_threads();
  set_num_threads(threads == 1 ? 2 : 1);
  const std::vector<float> other = grad(ids, dy);
  set_num_threads(threads);
  EXPECT_EQ(other, whole);
}

// x + P[t]; dP[t] = the sum over samples of dy at step t (rows past T zero); dx = dy.
TEST(PositionEmbedding, AddsItsRowsAndPassesTheGradientOn) {
  PositionEmbedding pe(6);
  EXPECT_EQ(test::build_standalone(pe, Shape{4, 3}, 6), (Shape{4, 3}));
  const Tensor x = test::random_tensor(Shape{2, 4, 3}, 7), dy = test::random_tensor(Shape{2, 4, 3}, 8);
  const std::vector<float> y = pe.forward(x, true).to_vector();
  const float* p = pe.params()[0].f32();
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t t = 0; t < 4; ++t)
      for (int64_t k = 0; k < 3; ++k)
        EXPECT_EQ(y[static_cast<size_t>((n * 4 + t) * 3 + k)], x.f32()[(n * 4 + t) * 3 + k] + p[t * 3 + k]);
  EXPECT_EQ(pe.backward(dy).to_vector(), dy.to_vector());
  const std::vector<float> dp = pe.grads()[0].to_vector();
  for (int64_t t = 0; t < 6; ++t)
    for (int64_t k = 0; k < 3; ++k)
      EXPECT_EQ(dp[static_cast<size_t>(t * 3 + k)],
                t < 4 ? dy.f32()[t * 3 + k] + dy.f32()[(4 + t) * 3 + k] : 0.0f);  // 8 positions: one group
}

// Embedding, positions, LayerNormalization, a classifier over the flattened sequence: trained on
// i32 ids (the loss falls), saved and recreated from the file alone, the same predictions' bits.
TEST(Embedding, AModelOfIdsTrainsAndComesBack) {
  SymbolicTensor in = Input(Shape{6}, "ids");
  SymbolicTensor h = layer<PositionEmbedding>(8)(layer<Embedding>(10, 4, 0.02f)(in));
  h = layer<LayerNormalization>(1e-5f)(h);
  Model m(in, layer<Dense>(3)(layer<Flatten>()(h)), "ids_model");
  m.build(16);
  m.compile(std::make_unique<Adam>());
  const Tensor x = pattern_ids(16, 6, 10);
  const Tensor labels = test::cycling_labels(16, 3);
  const float first = m.train_step(x, labels);
  float last = first;
  for (int i = 0; i < 30; ++i) last = m.train_step(x, labels);
  EXPECT_LT(last, first);
  const std::string dir = test::temp_dir("embedding");
  m.save(dir + "/m.st");
  EXPECT_EQ(load_model(dir + "/m.st")->predict(x).to_vector(), m.predict(x).to_vector());
  std::filesystem::remove_all(dir);
}

TEST(Embedding, RejectsBadArguments) {
  EXPECT_THROW(Embedding(0, 4), ArgumentError);
  EXPECT_THROW(Embedding(4, 0), ArgumentError);
  EXPECT_THROW(Embedding(4, 4, -0.1f), ArgumentError);
  EXPECT_THROW(PositionEmbedding(0), ArgumentError);
  Embedding emb(4, 2);
  EXPECT_THROW(emb.build(Shape{}), ShapeError);
  PositionEmbedding pe(4);
  EXPECT_THROW(pe.build(Shape{5, 3}), ShapeError);  // longer than the table
  EXPECT_THROW(pe.build(Shape{5}), ShapeError);
}

// i32 ids reach only an Embedding: any other layer fed them (directly, or ids flattened before the
// Embedding) says so by name, on every backend, instead of reading ints as floats.
TEST(Embedding, IdsGoToAnEmbeddingFirst) {
  Tensor ids = Tensor::zeros(Shape{2, 4}, DType::I32);
  {
    SymbolicTensor in = Input(Shape{4}, "ids");
    Model m(in, layer<Dense>(3)(in));
    m.build(1);
    try {
      (void)m.predict(ids);
      ADD_FAILURE() << "no error";
    } catch (const ShapeError& e) {
      EXPECT_NE(std::string(e.what()).find("Dense 'dense': expects f32 input"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("Embedding first"), std::string::npos) << e.what();
    }
  }
  SymbolicTensor in = Input(Shape{2, 2}, "ids");
  Model m(in, layer<Dense>(3)(layer<Embedding>(5, 4)(layer<Flatten>()(in))));
  m.build(1);
  EXPECT_THROW((void)m.predict(Tensor::zeros(Shape{2, 2, 2}, DType::I32)), ShapeError);
}

}  // namespace
}  // namespace ember
