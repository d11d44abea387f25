// Text data: the byte vocabulary, the file reader, the windows of a token sequence, and i32 ids
// through a Dataset and a DataLoader unchanged.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <utility>

#include "test_util.h"

namespace ember {
namespace {

// The ArgumentError's message of `f`, or "" when it did not throw.
template <typename F>
std::string argument_error_of(F&& f) {
  try {
    f();
  } catch (const ArgumentError& e) {
    return e.what();
  }
  return "";
}

// Tokens 0, 1, ..., n - 1: every window shows where it starts.
std::vector<int32_t> positions(int32_t n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), 0);
  return t;
}

std::vector<int32_t> ints(const Tensor& t) { return {t.data<int32_t>(), t.data<int32_t>() + t.numel()}; }

TEST(ByteVocabulary, IsTheTextsDistinctBytesSortedAscending) {
  const std::string text = "hello, w\xC3\xA9rld\n";  // "é" in UTF-8 is two bytes
  const ByteVocabulary v(text);
  const std::vector<uint8_t> want{'\n', ' ', ',', 'd', 'e', 'h', 'l', 'o', 'r', 'w', 0xA9, 0xC3};
  EXPECT_EQ(v.bytes(), want);
  EXPECT_EQ(v.size(), 12);
  EXPECT_TRUE(v.contains('l'));
  EXPECT_FALSE(v.contains('z'));
  // The same list gives the same ids.
  const ByteVocabulary w = ByteVocabulary::from_bytes(v.bytes());
  EXPECT_EQ(w.bytes(), v.bytes());
  EXPECT_EQ(w.encode(text), v.encode(text));
}

TEST(ByteVocabulary, EncodeAndDecodeRoundTrip) {
  const std::string text = "abracadabra\t\x01\xFF";
  const ByteVocabulary v(text);
  const std::vector<int32_t> ids = v.encode(text);
  ASSERT_EQ(ids.size(), text.size());
  for (size_t i = 0; i < text.size(); ++i) EXPECT_EQ(v.bytes()[static_cast<size_t>(ids[i])], uint8_t(text[i]));
  EXPECT_EQ(v.encode("ab"), (std::vector<int32_t>{2, 3}));  // \x01, \t, then a, b, ...
  EXPECT_EQ(v.decode(ids), text);
  EXPECT_EQ(v.decode(v.encode("")), "");
}

TEST(ByteVocabulary, EachBadByteOrIdIsNamedWithItsPosition) {
  const ByteVocabulary v("abc");
  std::string m = argument_error_of([&] { v.encode("abcz"); });
  EXPECT_NE(m.find("byte \\x7A ('z') at position 3"), std::string::npos) << m;
  m = argument_error_of([&] { v.encode("a\n"); });
  EXPECT_NE(m.find("byte \\x0A at position 1 is not in the vocabulary of 3 bytes"), std::string::npos) << m;
  const std::vector<int32_t> too_big{0, 3}, negative{-1};
  m = argument_error_of([&] { v.decode(too_big); });
  EXPECT_NE(m.find("id 3 at position 1 is outside [0, 3)"), std::string::npos) << m;
  m = argument_error_of([&] { v.decode(negative); });
  EXPECT_NE(m.find("id -1 at position 0"), std::string::npos) << m;
  const std::vector<uint8_t> unsorted{'a', 'c', 'b'}, repeated{'a', 'a'};
  m = argument_error_of([&] { ByteVocabulary::from_bytes(unsorted); });
  EXPECT_NE(m.find("byte 2 (\\x62 ('b')) does not come after byte 1 (\\x63 ('c'))"), std::string::npos) << m;
  EXPECT_NE(argument_error_of([&] { ByteVocabulary::from_bytes(repeated); }), "");
  EXPECT_NE(argument_error_of([&] { ByteVocabulary::from_bytes({}); }).find("no bytes"), std::string::npos);
  EXPECT_NE(argument_error_of([] { ByteVocabulary(""); }).find("the text is empty"), std::string::npos);
}

TEST(ReadTextFile, ReadsEveryByteAndNamesAMissingPath) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("ember_text_" + std::to_string(::getpid()) + ".txt")).string();
  const std::string content("line one\r\nzero \0 byte\xFF", 22);
  std::ofstream(path, std::ios::binary) << content;
  EXPECT_EQ(read_text_file(path), content);
  std::filesystem::remove(path);
  try {
    read_text_file(path);
    FAIL() << "no IoError";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

// A FIFO would block the open (and, opened, be read for ever), a directory fails deep in the
// stream: both are refused first, named.
TEST(ReadTextFile, RefusesWhatIsNotARegularFile) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("ember_text_dir_" + std::to_string(::getpid()))).string();
  std::filesystem::create_directories(dir);
  ASSERT_EQ(::mkfifo((dir + "/fifo").c_str(), 0600), 0);
  for (const auto& [path, why] :
       {std::pair{dir, "is a directory"}, std::pair{dir + "/fifo", "is not a regular file"}}) {
    try {
      read_text_file(path);
      ADD_FAILURE() << path << ": no IoError";
    } catch (const IoError& e) {
      EXPECT_NE(std::string(e.what()).find(path + " " + why), std::string::npos) << e.what();
    }
  }
  std::filesystem::remove_all(dir);
}

TEST(SequenceDataset, RejectsAShortSequenceABadContextAndAnEmptyBatch) {
  EXPECT_NE(argument_error_of([] { SequenceDataset(positions(5), 0); }).find("context length must be >= 1, got 0"),
            std::string::npos);
  std::string m = argument_error_of([] { SequenceDataset(positions(4), 4); });
  EXPECT_NE(m.find("4 tokens, fewer than the context length + 1 (5)"), std::string::npos) << m;
  const SequenceDataset d(positions(5), 4);  // exactly one window
  Rng rng(1);
  m = argument_error_of([&] { d.train_batch(0, rng); });
  EXPECT_NE(m.find("batch must be >= 1, got 0"), std::string::npos) << m;
}

TEST(SequenceDataset, EvalWindowsAreNonOverlappingWithTargetsOneTokenOn) {
  const SequenceDataset d(positions(11), 3);  // windows at 0, 3, 6; token 10 is only a target
  EXPECT_EQ(d.num_eval_windows(), 3);
  const SequenceBatch w = d.eval_windows();
  EXPECT_EQ(w.x.shape(), (Shape{3, 3}));
  EXPECT_EQ(w.y.shape(), (Shape{3, 3}));
  EXPECT_EQ(w.x.dtype(), DType::I32);
  EXPECT_EQ(w.y.dtype(), DType::I32);
  EXPECT_EQ(ints(w.x), (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(ints(w.y), (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

TEST(SequenceDataset, TheLastEvalWindowEndsWhereItsTargetsFit) {
  // j T + T + 1 <= n: with T = 3, n = 10 has a third window (its last target is token 9) ...
  const SequenceBatch ten = SequenceDataset(positions(10), 3).eval_windows();
  EXPECT_EQ(ten.x.dim(0), 3);
  EXPECT_EQ(ints(ten.y).back(), 9);
  // ... n = 9 does not (it would need token 9), and a single window takes T + 1 tokens.
  EXPECT_EQ(SequenceDataset(positions(9), 3).num_eval_windows(), 2);
  EXPECT_EQ(ints(SequenceDataset(positions(9), 3).eval_windows().y).back(), 6);
  const SequenceBatch one = SequenceDataset(positions(4), 3).eval_windows();
  EXPECT_EQ(ints(one.x), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(ints(one.y), (std::vector<int32_t>{1, 2, 3}));
}

TEST(SequenceDataset, TrainBatchDrawsOneStartPerRowFromTheSeed) {
  const int32_t n = 9;
  const int64_t t = 4;
  const SequenceDataset d(positions(n), t);
  Rng a(7), b(7), c(8);
  const SequenceBatch x = d.train_batch(64, a);
  EXPECT_EQ(x.x.shape(), (Shape{64, t}));
  EXPECT_EQ(x.y.shape(), (Shape{64, t}));
  EXPECT_EQ(x.x.device(), Device::cpu());
  EXPECT_EQ(ints(x.x), ints(d.train_batch(64, b).x));  // the same seed, the same batch
  EXPECT_NE(ints(x.x), ints(d.train_batch(64, c).x));
  Rng replay(7);  // row r starts at the r-th rng.below(n - T)
  std::set<int32_t> starts;
  for (int64_t r = 0; r < 64; ++r) {
    const int32_t s = x.x.data<int32_t>()[r * t];
    EXPECT_EQ(s, static_cast<int32_t>(replay.below(n - t))) << "row " << r;
    starts.insert(s);
    for (int64_t k = 0; k < t; ++k) {
      EXPECT_EQ(x.x.data<int32_t>()[r * t + k], s + k);
      EXPECT_EQ(x.y.data<int32_t>()[r * t + k], s + k + 1);
    }
  }
  // Every start in [0, n - T - 1] is drawn, none outside.
  EXPECT_EQ(starts, (std::set<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(a.next_u64(), replay.next_u64());  // nothing else was drawn
}

TEST(SequenceDataset, IdsPassThroughADatasetAndADataLoaderUnchanged) {
  const SequenceDataset seq(positions(25), 4);  // 6 windows
  const Dataset d = seq.eval_dataset({.num_classes = 25, .name = "text"});
  EXPECT_EQ(d.size(), 6);
  EXPECT_EQ(d.sample_shape(), Shape{4});
  EXPECT_EQ(d.target_shape(), Shape{4});
  EXPECT_EQ(d.features().dtype(), DType::I32);
  Tensor x, y;
  const std::vector<int64_t> rows{5, 0};
  d.gather(rows, x, y);
  EXPECT_EQ(x.dtype(), DType::I32);
  EXPECT_EQ(ints(x), (std::vector<int32_t>{20, 21, 22, 23, 0, 1, 2, 3}));
  EXPECT_EQ(ints(y), (std::vector<int32_t>{21, 22, 23, 24, 1, 2, 3, 4}));

  DataLoader loader(d, {.batch_size = 4, .shuffle = true, .seed = 3});
  const std::vector<int64_t> order = loader.epoch_order(0);
  loader.start_epoch(0);
  Batch batch;
  size_t seen = 0;
  while (loader.next(batch)) {
    ASSERT_EQ(batch.x().dtype(), DType::I32);
    ASSERT_EQ(batch.y().dtype(), DType::I32);
    ASSERT_EQ(batch.y().shape(), (Shape{batch.rows(), 4}));
    for (int64_t r = 0; r < batch.rows(); ++r, ++seen) {
      const int32_t start = static_cast<int32_t>(order[seen]) * 4;
      for (int32_t k = 0; k < 4; ++k) {
        EXPECT_EQ(batch.x().data<int32_t>()[r * 4 + k], start + k);
        EXPECT_EQ(batch.y().data<int32_t>()[r * 4 + k], start + k + 1);
      }
    }
  }
  EXPECT_EQ(seen, 6u);
}

// On a GPU the loader gathers the ids there (data/cuda/gather.cu): the same i32 batches as on the CPU.
TEST(SequenceDataset, IdsPassThroughADataLoaderOnTheGpuAsOnTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no usable GPU: " << cuda_status().reason;
  const Dataset d = SequenceDataset(positions(41), 4).eval_dataset();  // 10 windows: batches of 4, 4, 2
  DataLoader cpu(d, {.batch_size = 4, .seed = 2}), gpu(d, {.batch_size = 4, .seed = 2, .device = Device::cuda(0)});
  cpu.start_epoch(0);
  gpu.start_epoch(0);
  Batch a, b;
  while (cpu.next(a)) {
    ASSERT_TRUE(gpu.next(b));
    ASSERT_EQ(b.x().dtype(), DType::I32);
    EXPECT_EQ(ints(b.x().to(Device::cpu())), ints(a.x()));
    EXPECT_EQ(ints(b.y().to(Device::cpu())), ints(a.y()));
  }
  EXPECT_FALSE(gpu.next(b));
}

TEST(SequenceDataset, IdsTakeNoScaleAndEveryStepsLabelIsChecked) {
  const SequenceBatch w = SequenceDataset(positions(13), 3).eval_windows();  // ids 0 .. 12
  std::string m = argument_error_of([&] { Dataset::from_tensors(w.x, w.y, {.scale = 0.5f}); });
  EXPECT_NE(m.find("i32 ids, passed to the batch as they are: the scale must be 1"), std::string::npos) << m;
  m = argument_error_of([&] { Dataset::from_inputs({DataInput{.name = "", .values = w.x, .scale = 2.0f}}, w.y); });
  EXPECT_NE(m.find("the scale must be 1"), std::string::npos) << m;
  // The last target of the last window is 12: the label range is checked over every (N, T) element.
  m = argument_error_of([&] { Dataset::from_tensors(w.x, w.y, {.num_classes = 12}); });
  EXPECT_NE(m.find("label 12 at index 11 is outside [0, 12)"), std::string::npos) << m;
  EXPECT_NO_THROW(Dataset::from_tensors(w.x, w.y, {.num_classes = 13}));
}

#ifdef EMBER_MOBY_DICK_FILE
// The real text when scripts/fetch_data.sh moby-dick has fetched it.
TEST(SequenceDataset, MobyDickHas85DistinctBytes) {
  if (!std::filesystem::exists(EMBER_MOBY_DICK_FILE))
    GTEST_SKIP() << EMBER_MOBY_DICK_FILE << " is absent (scripts/fetch_data.sh moby-dick)";
  const std::string text = read_text_file(EMBER_MOBY_DICK_FILE);
  EXPECT_EQ(text.size(), 1204997u);
  const ByteVocabulary v(text);
  EXPECT_EQ(v.size(), 85);
  EXPECT_EQ(v.decode(v.encode(text.substr(0, 1000))), text.substr(0, 1000));
}
#endif

}  // namespace
}  // namespace ember
