// Checkpoints: safetensors round trip, metadata, resume == uninterrupted (bit for bit),
// every kind of bad file as a CheckpointError that leaves the model untouched, atomic writes.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <tuple>

#include "idx_fixtures.h"
#include "test_util.h"

namespace ember {
namespace {

namespace fs = std::filesystem;

Sequential small_cnn() {
  Sequential m;
  m.add<Conv2D>(4, Size2{3, 3}, Activation::ReLU);
  m.add<MaxPool2D>(Size2{2, 2});
  m.add<Flatten>();
  m.add<Dense>(8, Activation::ReLU);
  m.add<Dense>(10);
  return m;
}

Dataset synthetic(int n, uint64_t seed) {
  Tensor images = Tensor::empty(Shape{n, 1, 8, 8}, DType::U8);
  Tensor labels = Tensor::empty(Shape{n}, DType::I32);
  Rng rng(seed);
  for (int i = 0; i < n; ++i) {
    const int k = static_cast<int>(rng.below(10));
    labels.data<int32_t>()[i] = k;
    for (int j = 0; j < 64; ++j)
      images.data<uint8_t>()[i * 64 + j] = static_cast<uint8_t>(rng.below(50) + (j == k * 6 ? 200 : 0));
  }
  return Dataset(images, labels, 10);
}

// small_cnn built with seed 1 and trained one epoch of `samples` (batches of 16) by Adam.
Sequential trained_cnn(int samples) {
  Sequential m = small_cnn();
  m.build(Shape{1, 8, 8}, 1);
  m.compile(std::make_unique<Adam>());
  FitOptions fo;
  fo.verbose = 0;
  fo.batch_size = 16;
  m.fit(synthetic(samples, 1), fo);
  return m;
}

std::vector<uint8_t> read_bytes(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}
void write_bytes(const std::string& p, const std::vector<uint8_t>& b) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

class Checkpoint : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::temp_dir("ckpt"); }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  // Loading bad.safetensors into `m` must throw a CheckpointError containing `needle` and leave
  // the parameters as they were.
  void expect_load_fails(Sequential& m, const std::string& needle) const {
    const std::vector<float> before = m.params().to_vector();
    try {
      m.load(path("bad.safetensors"));
      ADD_FAILURE() << "expected CheckpointError containing '" << needle << "'";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    EXPECT_EQ(m.params().to_vector(), before) << needle;
  }
  std::string dir_;
};

TEST_F(Checkpoint, SafetensorsRoundTripOfEveryDtypeAndMetadata) {
  SafeTensors st;
  st.tensors.emplace_back("a", test::random_tensor(Shape{2, 3}, 1));
  Tensor i = Tensor::empty(Shape{3}, DType::I32);
  i.data<int32_t>()[0] = -7, i.data<int32_t>()[1] = 0, i.data<int32_t>()[2] = 1 << 30;
  st.tensors.emplace_back("ints", i);
  Tensor u = Tensor::zeros(Shape{1, 5}, DType::U8);
  u.data<uint8_t>()[4] = 255;
  st.tensors.emplace_back("bytes", u);
  st.tensors.emplace_back("nhwc", test::random_tensor(Shape{1, 2, 2, 3}, 2).to_layout(Layout::NHWC));
  st.metadata = {{"k", "v"}, {"json", "{\"x\": [1, 2]}"}};
  write_safetensors(path("a.safetensors"), st);
  const SafeTensors back = read_safetensors(path("a.safetensors"));
  ASSERT_EQ(back.tensors.size(), 4u);
  std::map<std::string, Tensor> m(back.tensors.begin(), back.tensors.end());
  EXPECT_EQ(m["a"].to_vector(), st.tensors[0].second.to_vector());
  EXPECT_EQ(m["ints"].data<int32_t>()[2], 1 << 30);
  EXPECT_EQ(m["bytes"].data<uint8_t>()[4], 255);
  EXPECT_EQ(m["nhwc"].to_vector(), st.tensors[3].second.to_vector());  // stored row-major
  EXPECT_EQ(back.metadata, st.metadata);
  // The file follows the format byte for byte: 8-byte LE length, JSON, data 8-byte aligned.
  const auto bytes = read_bytes(path("a.safetensors"));
  uint64_t n = 0;
  for (int k = 7; k >= 0; --k) n = (n << 8) | bytes[static_cast<size_t>(k)];
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes[8], '{');
  EXPECT_EQ(bytes.size(), 8 + n + 24 + 12 + 5 + 48);
  // The in-memory decoder (the fuzz target's entry) reads the same tensors, and its errors are
  // checkpoint errors naming what it was given.
  const SafeTensors mem = decode_safetensors(bytes, "in-memory");
  ASSERT_EQ(mem.tensors.size(), back.tensors.size());
  for (size_t k = 0; k < mem.tensors.size(); ++k) {
    EXPECT_EQ(mem.tensors[k].first, back.tensors[k].first);
    EXPECT_EQ(mem.tensors[k].second.nbytes(), back.tensors[k].second.nbytes());
  }
  EXPECT_EQ(mem.metadata, back.metadata);
  const std::vector<uint8_t> cut(bytes.begin(), bytes.end() - 1);
  try {
    decode_safetensors(cut, "in-memory");
    FAIL();
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("checkpoint in-memory:"), std::string::npos) << e.what();
  }
}

TEST_F(Checkpoint, ModelAndOptimizerRoundTrip) {
  Sequential a = trained_cnn(64);  // 4 Adam steps
  TrainingState s;
  s.epochs_done = 1;
  s.seed = 42;
  s.batch_size = 16;
  s.extra["note"] = "hello";
  a.save(path("m.safetensors"), s);

  Sequential b = small_cnn();
  b.build(Shape{1, 8, 8}, 2);
  b.compile(std::make_unique<Adam>());
  const TrainingState r = b.load(path("m.safetensors"));
  EXPECT_EQ(b.params().to_vector(), a.params().to_vector());
  EXPECT_EQ(b.optimizer()->iterations(), 4);
  EXPECT_EQ(b.optimizer()->state()[0].second.to_vector(), a.optimizer()->state()[0].second.to_vector());
  EXPECT_EQ(b.optimizer()->state()[1].second.to_vector(), a.optimizer()->state()[1].second.to_vector());
  EXPECT_EQ(r.epochs_done, 1);
  EXPECT_EQ(r.seed, 42u);
  EXPECT_EQ(r.batch_size, 16);
  EXPECT_EQ(r.extra.at("note"), "hello");
  const SafeTensors raw = read_safetensors(path("m.safetensors"));
  EXPECT_EQ(raw.metadata.at("format"), "ember");
  EXPECT_EQ(raw.metadata.at("ember_version"), ember::version());
  EXPECT_NE(raw.metadata.at("architecture").find("\"Conv2D\""), std::string::npos);
  EXPECT_NE(raw.metadata.at("optimizer").find("\"beta2\""), std::string::npos);
}

// save(path, {.with_optimizer = false}): the weights alone. With Adam the file is about a third of
// the full one (weights, then m and v of the same size each); it loads, predicts as the model that
// saved it, and a compiled model loading it keeps its optimizer fresh.
TEST_F(Checkpoint, AnInferenceFileHoldsTheWeightsAlone) {
  Sequential a = trained_cnn(64);
  a.save(path("full.safetensors"));
  a.save(path("weights.safetensors"), {.with_optimizer = false});
  const auto full = fs::file_size(path("full.safetensors")), weights = fs::file_size(path("weights.safetensors"));
  const auto params = static_cast<uintmax_t>(a.num_params()) * 4;
  EXPECT_GE(weights, params);
  EXPECT_LT(weights, params + 8192);  // the header: names, shapes, the architecture
  EXPECT_GE(full, 3 * params);
  const SafeTensors raw = read_safetensors(path("weights.safetensors"));
  for (const auto& [name, t] : raw.tensors) EXPECT_EQ(name.rfind("optimizer/", 0), std::string::npos) << name;
  EXPECT_EQ(raw.metadata.at("optimizer"), "null");

  std::unique_ptr<Model> b = load_model(path("weights.safetensors"));
  const Tensor x = test::random_tensor(Shape{4, 1, 8, 8}, 3, 0.0f, 1.0f);
  EXPECT_EQ(b->predict(x).to_vector(), a.predict(x).to_vector());
  Sequential c = small_cnn();
  c.build(Shape{1, 8, 8}, 2);
  c.compile(std::make_unique<Adam>());
  EXPECT_FALSE(c.load(path("weights.safetensors")).with_optimizer);
  EXPECT_EQ(c.optimizer()->iterations(), 0);
  EXPECT_EQ(c.params().to_vector(), a.params().to_vector());
  EXPECT_TRUE(c.load(path("full.safetensors")).with_optimizer);
  EXPECT_EQ(c.optimizer()->iterations(), 4);
  // Not yet compiled: a full file's optimizer state waits for compile(), unless a weights-only
  // file is loaded after it (that state belongs to other weights).
  Sequential d = small_cnn();
  d.build(Shape{1, 8, 8}, 2);
  d.load(path("full.safetensors"));
  d.load(path("weights.safetensors"));
  d.compile(std::make_unique<Adam>());
  EXPECT_EQ(d.optimizer()->iterations(), 0);
}

// load_model gives a Sequential the name its file holds.
TEST_F(Checkpoint, ALoadedSequentialKeepsItsName) {
  Sequential a("tiny_cnn");
  a.add<Conv2D>(4, Size2{3, 3}, Activation::ReLU);
  a.add<Flatten>();
  a.add<Dense>(10);
  a.build(Shape{1, 8, 8}, 1);
  a.save(path("named.safetensors"));
  EXPECT_EQ(load_model(path("named.safetensors"))->name(), "tiny_cnn");
}

// Files written before the format dropped "batches_done" (always 0: runs resume at epoch
// boundaries) still load, and the key is not mistaken for caller metadata.
TEST_F(Checkpoint, FilesWithTheLegacyBatchesDoneKeyStillLoad) {
  Sequential a = small_cnn();
  a.build(Shape{1, 8, 8}, 1);
  a.compile(std::make_unique<Adam>());
  a.save(path("new.safetensors"), TrainingState{.epochs_done = 2, .seed = 5, .batch_size = 8, .extra = {}});
  SafeTensors raw = read_safetensors(path("new.safetensors"));
  EXPECT_EQ(raw.metadata.count("batches_done"), 0u);
  raw.metadata["batches_done"] = "0";  // as every file written up to 56b7723 has it
  write_safetensors(path("old.safetensors"), raw);
  Sequential b = small_cnn();
  b.build(Shape{1, 8, 8}, 2);
  b.compile(std::make_unique<Adam>());
  const TrainingState st = b.load(path("old.safetensors"));
  EXPECT_EQ(b.params().to_vector(), a.params().to_vector());
  EXPECT_EQ(st.epochs_done, 2);
  EXPECT_TRUE(st.extra.empty());
}

// The resume tests' model (small_cnn, Adam) and options (2 epochs of batches of 16, seed 5).
Sequential adam_cnn(uint64_t seed) {
  Sequential m = small_cnn();
  m.build(Shape{1, 8, 8}, seed);
  m.compile(std::make_unique<Adam>());
  return m;
}

FitOptions resume_options() {
  FitOptions fo;
  fo.verbose = 0;
  fo.batch_size = 16;
  fo.seed = 5;
  fo.epochs = 2;
  return fo;
}

TEST_F(Checkpoint, ResumeEqualsAnUninterruptedRunBitForBit) {
  const Dataset train = synthetic(100, 3);  // 7 batches of 16 per epoch
  FitOptions fo = resume_options();
  Sequential straight = adam_cnn(5);
  straight.fit(train, fo);  // 2 epochs, uninterrupted

  Sequential first = adam_cnn(5);
  fo.epochs = 1;
  first.fit(train, fo);
  first.save(path("e1.safetensors"), TrainingState{.epochs_done = 1, .seed = 5, .batch_size = 16});

  Sequential resumed = adam_cnn(99);  // different init: everything must come from the file
  const TrainingState st = resumed.load(path("e1.safetensors"));
  fo.epochs = 2;
  fo.initial_epoch = st.epochs_done;
  resumed.fit(train, fo);
  EXPECT_EQ(resumed.params().to_vector(), straight.params().to_vector());
  EXPECT_EQ(resumed.optimizer()->iterations(), straight.optimizer()->iterations());
}

// A stop request mid-epoch (a signal, in train_mnist) ends fit after that step; the checkpoint
// of that point resumes in the same epoch at the next batch, and the result is the
// uninterrupted run's, bit for bit (weights, Adam moments and step count).
TEST_F(Checkpoint, AStopMidEpochResumesAtTheNextBatchBitForBit) {
  const Dataset train = synthetic(100, 3);  // 7 batches of 16 per epoch
  FitOptions fo = resume_options();
  Sequential straight = adam_cnn(5);
  straight.fit(train, fo);  // 2 epochs, uninterrupted

  Sequential first = adam_cnn(5);
  int polls = 0;
  fo.stop_requested = [&polls] { return ++polls == 10; };  // after step 10: epoch 2, batch 3 of 7
  const History h = first.fit(train, fo);
  ASSERT_TRUE(h.stopped);
  EXPECT_EQ(h.stop_epoch, 1);
  EXPECT_EQ(h.stop_batch, 3);
  EXPECT_EQ(h.epochs.size(), 1u);  // the stopped epoch is not logged as done
  EXPECT_EQ(first.optimizer()->iterations(), 10);
  // A mid-epoch state without its batch size could not be resumed: refused at the save, not the load.
  try {
    first.save(path("nobatch.safetensors"), TrainingState{.epochs_done = h.stop_epoch, .batches_done = h.stop_batch});
    ADD_FAILURE() << "saved batches_done without a batch size";
  } catch (const ArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("batch_size is not set"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(path("nobatch.safetensors")));
  first.save(path("mid.safetensors"),
             TrainingState{.epochs_done = h.stop_epoch, .batches_done = h.stop_batch, .seed = 5, .batch_size = 16});

  Sequential resumed = small_cnn();
  resumed.build(Shape{1, 8, 8}, 99);
  const TrainingState st = resumed.load(path("mid.safetensors"));  // before compile(): kept for it
  resumed.compile(std::make_unique<Adam>());
  EXPECT_EQ(st.epochs_done, 1);
  EXPECT_EQ(st.batches_done, 3);
  fo.stop_requested = nullptr;
  fo.initial_epoch = st.epochs_done;
  fo.initial_batch = st.batches_done;
  const History rest = resumed.fit(train, fo);
  EXPECT_FALSE(rest.stopped);
  ASSERT_EQ(rest.epochs.size(), 1u);
  EXPECT_EQ(rest.epochs[0].steps, 4);  // batches 4..7 of epoch 2
  EXPECT_EQ(resumed.params().to_vector(), straight.params().to_vector());
  EXPECT_EQ(resumed.optimizer()->iterations(), straight.optimizer()->iterations());
  for (size_t k = 0; k < straight.optimizer()->state().size(); ++k)
    EXPECT_EQ(resumed.optimizer()->state()[k].second.to_vector(), straight.optimizer()->state()[k].second.to_vector())
        << straight.optimizer()->state()[k].first;

  // A position past the epoch is refused, naming it.
  fo.initial_batch = 7;
  EXPECT_THROW(resumed.fit(train, fo), ArgumentError);
}

// load() before compile() used to drop the optimizer state; compile() now restores it into an
// optimizer of the same kind, and another kind starts fresh.
TEST_F(Checkpoint, LoadBeforeCompileKeepsTheOptimizerStateForCompile) {
  Sequential a = trained_cnn(64);
  a.save(path("a.safetensors"));
  Sequential b = small_cnn();
  b.build(Shape{1, 8, 8}, 7);
  b.load(path("a.safetensors"));
  b.compile(std::make_unique<Adam>());
  EXPECT_EQ(b.optimizer()->iterations(), a.optimizer()->iterations());
  ASSERT_EQ(b.optimizer()->state().size(), a.optimizer()->state().size());
  for (size_t k = 0; k < a.optimizer()->state().size(); ++k)
    EXPECT_EQ(b.optimizer()->state()[k].second.to_vector(), a.optimizer()->state()[k].second.to_vector());
  Sequential c = small_cnn();
  c.build(Shape{1, 8, 8}, 7);
  c.load(path("a.safetensors"));
  c.compile(std::make_unique<SGD>());
  EXPECT_EQ(c.optimizer()->iterations(), 0);
  EXPECT_EQ(c.params().to_vector(), a.params().to_vector());
}

TEST_F(Checkpoint, BadFilesGiveCheckpointErrorsAndLeaveTheModelAlone) {
  Sequential a = small_cnn();
  a.build(Shape{1, 8, 8}, 1);
  a.save(path("good.safetensors"));
  const auto good = read_bytes(path("good.safetensors"));
  Sequential target = small_cnn();
  target.build(Shape{1, 8, 8}, 2);
  const std::vector<float> before = target.params().to_vector();

  auto expect_bad = [&](const std::vector<uint8_t>& bytes, const std::string& needle) {
    write_bytes(path("bad.safetensors"), bytes);
    expect_load_fails(target, needle);
  };
  expect_bad({1, 2, 3}, "too short");
  expect_bad(std::vector<uint8_t>(good.begin(), good.end() - 100), "outside");        // truncated data
  expect_bad(std::vector<uint8_t>(good.begin(), good.begin() + 40), "does not fit");  // truncated header
  auto huge = good;
  huge[7] = 0x7F;  // header length ~ 2^63
  expect_bad(huge, "does not fit");
  auto garbled = good;
  garbled[9] = '#';
  expect_bad(garbled, "not valid JSON");
  auto dtype = good;
  const std::string text(good.begin(), good.end());
  const size_t f32 = text.find("\"F32\"");
  ASSERT_NE(f32, std::string::npos);
  dtype[f32 + 1] = 'F', dtype[f32 + 2] = '1', dtype[f32 + 3] = '6';
  expect_bad(dtype, "F16");

  // A checkpoint of another architecture.
  Sequential other;
  other.add<Flatten>();
  other.add<Dense>(10);
  other.build(Shape{1, 8, 8});
  other.save(path("other.safetensors"));
  try {
    target.load(path("other.safetensors"));
    ADD_FAILURE();
  } catch (const CheckpointError& e) {
    // Named by the architecture's first difference, before any tensor is looked at.
    EXPECT_NE(std::string(e.what()).find("holds a model of 2 layers; this one has 5"), std::string::npos) << e.what();
  }
  EXPECT_EQ(target.params().to_vector(), before);
  EXPECT_THROW(target.load(path("missing.safetensors")), CheckpointError);
}

TEST_F(Checkpoint, FailedWriteLeavesTheOldFileIntact) {
  Sequential a = small_cnn();
  a.build(Shape{1, 8, 8}, 1);
  a.save(path("ckpt.safetensors"));
  const auto old_bytes = read_bytes(path("ckpt.safetensors"));
  SafeTensors st;
  st.tensors.emplace_back("x", test::random_tensor(Shape{1000}, 3));
  EXPECT_THROW(write_safetensors(path("ckpt.safetensors"), st, /*fail_after_bytes=*/1000), IoError);
  EXPECT_EQ(read_bytes(path("ckpt.safetensors")), old_bytes);
  for (const auto& e : fs::directory_iterator(dir_))  // no temporary left behind
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
  EXPECT_THROW(write_safetensors(dir_ + "/no/such/dir/x.safetensors", st), IoError);
}

// A safetensors file from a JSON header and a data section, as another writer might make it.
std::vector<uint8_t> raw_file(const std::string& header, size_t data_bytes) {
  std::string bytes;
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<char>(header.size() >> (8 * i)));
  bytes += header + std::string(data_bytes, '\0');
  return {bytes.begin(), bytes.end()};
}

TEST_F(Checkpoint, TheReaderRejectsOverlapsHolesTrailingBytesAndSpecialFiles) {
  const auto expect_bad = [&](const std::vector<uint8_t>& bytes, const std::string& needle) {
    write_bytes(path("raw.safetensors"), bytes);
    try {
      read_safetensors(path("raw.safetensors"));
      ADD_FAILURE() << "expected CheckpointError containing '" << needle << "'";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(path("raw.safetensors")), std::string::npos) << e.what();
    }
  };
  const std::string a = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  // b aliases a's second float: the old check compared only the summed sizes.
  expect_bad(raw_file("{" + a + R"(,"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 12), "overlap");
  expect_bad(raw_file("{" + a + R"(,"b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})", 16), "belong to no");
  expect_bad(raw_file("{" + a + "}", 8 + 5), "5 trailing bytes");
  // A shape whose element count wraps 2^64 ([2^24, 2^40] x 4 bytes) must not pass as 0 bytes.
  expect_bad(raw_file("{" + a + R"(,"w":{"dtype":"F32","shape":[16777216,1099511627776],"data_offsets":[8,8]}})", 8),
             "bytes for its shape");
  // Many tensors aliasing one span: refused before anything is allocated.
  std::string aliases = "{" + a;
  for (int i = 0; i < 50; ++i)
    aliases += ",\"t" + std::to_string(i) + R"(":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  expect_bad(raw_file(aliases + "}", 8), "overlap");
  write_bytes(path("ok.safetensors"), raw_file("{" + a + "}", 8));
  EXPECT_EQ(read_safetensors(path("ok.safetensors")).tensors.size(), 1u);

  // A FIFO would block open() for ever; a directory is not a file.
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0644), 0);
  fs::create_directory(path("dir"));
  for (const char* name : {"fifo", "dir"}) {
    try {
      read_safetensors(path(name));
      ADD_FAILURE() << name;
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
    }
  }
}

// The reader allocates what the header promises only after checking it against the file's size:
// a 100-byte file whose header promises a 1 GiB tensor, and a 1 GiB (sparse) file holding an
// 8-byte tensor and trailing bytes, are both refused with peak memory growing < 64 MiB.
TEST_F(Checkpoint, TheReaderAllocatesOnlyWhatTheFileHolds) {
  const auto peak_rss_mib = [] {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_maxrss) / 1024.0;  // KiB on Linux
  };
  const double before = peak_rss_mib();
  write_bytes(path("lying.safetensors"),
              raw_file(R"({"w":{"dtype":"F32","shape":[268435456],"data_offsets":[0,1073741824]}})", 16));
  try {
    read_safetensors(path("lying.safetensors"));
    ADD_FAILURE();
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("'w'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path("lying.safetensors")), std::string::npos) << e.what();
  }
  write_bytes(path("sparse.safetensors"), raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8));
  fs::resize_file(path("sparse.safetensors"), size_t{1} << 30);
  try {
    read_safetensors(path("sparse.safetensors"));
    ADD_FAILURE();
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("trailing bytes"), std::string::npos) << e.what();
  }
  EXPECT_LT(peak_rss_mib() - before, 64.0);
}

TEST_F(Checkpoint, TheLoaderRejectsPartialOptimizerStateAndOutOfRangeIntegers) {
  Sequential a = trained_cnn(32);  // 2 Adam steps
  a.save(path("good.safetensors"));
  const SafeTensors good = read_safetensors(path("good.safetensors"));
  const std::string first_state = "optimizer/" + a.optimizer()->state()[0].first;

  Sequential target = small_cnn();
  target.build(Shape{1, 8, 8}, 2);
  target.compile(std::make_unique<Adam>());
  const auto expect_bad = [&](const SafeTensors& st, const std::string& needle) {
    write_safetensors(path("bad.safetensors"), st);
    expect_load_fails(target, needle);
    EXPECT_EQ(target.optimizer()->iterations(), 0) << needle;
  };
  SafeTensors missing = good;  // 2 iterations done, but no first moment: would resume from zeros
  std::erase_if(missing.tensors, [&](const auto& t) { return t.first == first_state; });
  expect_bad(missing, "no optimizer state");
  SafeTensors unknown = good;
  unknown.tensors.emplace_back("optimizer/zzz", test::random_tensor(Shape{3}, 4));
  expect_bad(unknown, "optimizer/zzz");
  for (const auto& [key, value, needle] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"epochs_done", "1099511627776", "outside"},  // 2^40 would have been truncated to 0
           {"epochs_done", "4294967297", "outside"},     // 2^32 + 1 would have become 1
           {"epochs_done", "-1", "outside"},
           {"epochs_done", "2x", "not an integer"},
           {"seed", "-1", "not an unsigned integer"},  // would have wrapped to 2^64 - 1
           {"seed", "99999999999999999999", "out of range"},
           {"batch_size", "99999999999999999999", "out of range"},
           {"optimizer", R"({"name": "Adam", "iterations": -3})", "non-negative"},
           {"optimizer", R"({"name": "Adam", "iterations": "2"})", "non-negative"},
           {"optimizer", R"({"name": 5})", "non-string"},
           {"optimizer", R"([1, 2])", "not a JSON object"}}) {
    SafeTensors st = good;
    st.metadata[key] = value;
    expect_bad(st, needle);
    try {  // named as a checkpoint error of this file, at this key
      target.load(path("bad.safetensors"));
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(path("bad.safetensors")), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("'" + key + "'"), std::string::npos) << e.what();
    }
  }
  target.load(path("good.safetensors"));  // and the good file still loads
  EXPECT_EQ(target.params().to_vector(), a.params().to_vector());
  EXPECT_EQ(target.optimizer()->iterations(), 2);
}

}  // namespace
}  // namespace ember
