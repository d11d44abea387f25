// IDX reader: valid raw and gzip files, and every malformation as a typed error naming the file.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "idx_fixtures.h"
#include "test_util.h"

namespace ember {
namespace {

using test::idx_bytes;

// Expects IoError whose message contains `needle` (and the file name).
void expect_io_error(const std::vector<uint8_t>& bytes, const std::string& needle) {
  try {
    decode_idx(bytes, "fixture.idx");
    FAIL() << "expected IoError containing '" << needle << "'";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("fixture.idx"), std::string::npos) << e.what();
  }
}

TEST(Idx, ReadsRawAndGzipFiles) {
  const std::string dir = test::temp_dir("idx");
  const std::vector<uint8_t> px{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  test::write_file(dir + "/raw", idx_bytes({3, 2, 2}, px));
  test::write_file(dir + "/packed.gz", idx_bytes({3, 2, 2}, px), /*gzip=*/true);
  for (const char* name : {"/raw", "/packed.gz"}) {
    const Tensor t = load_idx_images(dir + name);
    EXPECT_EQ(t.shape(), (Shape{3, 1, 2, 2})) << name;
    EXPECT_EQ(t.dtype(), DType::U8);
    EXPECT_EQ(t.data<uint8_t>()[5], 6) << name;
  }
  test::write_file(dir + "/labels", idx_bytes({4}, {0, 9, 3, 3}), true);
  const Tensor l = load_idx_labels(dir + "/labels");
  EXPECT_EQ(l.dtype(), DType::I32);
  EXPECT_EQ(l.data<int32_t>()[1], 9);
  std::filesystem::remove_all(dir);
}

TEST(Idx, MalformedFilesGiveTypedErrors) {
  const std::vector<uint8_t> px(12, 7);
  auto truncated = idx_bytes({3, 2, 2}, px);
  truncated.resize(truncated.size() - 1);
  expect_io_error(truncated, "truncated");
  auto bad_magic = idx_bytes({3, 2, 2}, px);
  bad_magic[0] = 0x12;
  expect_io_error(bad_magic, "magic");
  expect_io_error(idx_bytes({3}, std::vector<uint8_t>(12, 0), 0x0D), "float32");
  expect_io_error(idx_bytes({3}, std::vector<uint8_t>(3, 0), 0x42), "0x42 (unknown)");  // hex, as the format writes it
  expect_io_error({0, 0, 8}, "shorter than the header");
  expect_io_error({0, 0, 8, 3, 0, 0}, "truncated header");
  expect_io_error({0, 0, 8, 0}, "rank 0");
  auto trailing = idx_bytes({2}, {1, 2});
  trailing.push_back(9);
  expect_io_error(trailing, "trailing");
}

TEST(Idx, HeaderLargerThanFileNeverAllocatesFromTheHeader) {
  // 4 billion x 4 billion x 255 elements claimed, 10 bytes present: rejected from the real size.
  expect_io_error(idx_bytes({0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFu}, std::vector<uint8_t>(10, 1)), "truncated");
}

// Peak resident memory of this process so far, in MiB.
double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

std::vector<uint8_t> gzipped(const std::vector<uint8_t>& bytes) {
  const std::string dir = test::temp_dir("gzb");
  test::write_file(dir + "/f.gz", bytes, /*gzip=*/true);
  std::ifstream f(dir + "/f.gz", std::ios::binary);
  std::vector<uint8_t> gz((std::istreambuf_iterator<char>(f)), {});
  std::filesystem::remove_all(dir);
  return gz;
}

TEST(Idx, ALyingFileIsRejectedFromItsHeaderWithoutReadingIt) {
  // A 1 GiB sparse file whose header describes 12 bytes: the old reader read all of it first
  // (+1 GiB resident); the size check now fails before anything is allocated. The peak may
  // grow by no more than a 64 MiB allowance for the test's own allocations.
  const std::string dir = test::temp_dir("idxbig");
  const std::string path = dir + "/train-images-idx3-ubyte";
  test::write_file(path, idx_bytes({3, 2, 2}, std::vector<uint8_t>(12, 1)));
  ASSERT_EQ(::truncate(path.c_str(), off_t{1} << 30), 0);
  const double before = peak_rss_mib();
  try {
    read_idx(path);
    FAIL() << "a 1 GiB file with a 12-element header was accepted";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("trailing data"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  EXPECT_LT(peak_rss_mib() - before, 64.0);
  std::filesystem::remove_all(dir);
}

TEST(Idx, GzipIsInflatedNoFurtherThanTheHeaderPromises) {
  // A header promising 8 GiB (65536 x 65536 x 2) is refused before inflating anything.
  expect_io_error(gzipped(idx_bytes({65536, 65536, 2}, std::vector<uint8_t>(1024, 0))), "decompression limit");
  // A bomb: the header promises 64 bytes, the stream inflates to 64 MiB of zeros (64 KiB
  // compressed). It stops one byte after the promise: no 64 MiB buffer (allowance as above).
  const std::vector<uint8_t> bomb = gzipped(idx_bytes({64}, std::vector<uint8_t>(64u << 20, 0)));
  const double before = peak_rss_mib();
  expect_io_error(bomb, "trailing data");
  EXPECT_LT(peak_rss_mib() - before, 32.0);
  // The header promises more than the stream holds.
  expect_io_error(gzipped(idx_bytes({1u << 20}, std::vector<uint8_t>(100, 3))), "decompresses to only 100 bytes");
  // A header cut inside the gzip stream.
  expect_io_error(gzipped({0, 0, 8, 3, 0, 0}), "truncated header");
}

TEST(Idx, DirectoriesAndFifosAreNamedNotOpened) {
  const std::string dir = test::temp_dir("idxfifo");
  std::filesystem::create_directory(dir + "/train-images-idx3-ubyte");
  ASSERT_EQ(::mkfifo((dir + "/train-labels-idx1-ubyte").c_str(), 0600), 0);  // open() would block on it
  try {
    load_mnist(dir);
    FAIL();
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("train-images-idx3-ubyte is a directory"), std::string::npos) << e.what();
  }
  try {
    read_idx(dir + "/train-labels-idx1-ubyte");
    FAIL();
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
  }
  std::filesystem::remove(dir + "/train-images-idx3-ubyte");
  test::write_file(dir + "/train-images-idx3-ubyte", idx_bytes({1, 28, 28}, std::vector<uint8_t>(784, 0)));
  try {
    load_mnist(dir);
    FAIL();
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("train-labels-idx1-ubyte is not a regular file"), std::string::npos)
        << e.what();
  }
  std::filesystem::remove_all(dir);
}

TEST(Mnist, AnEmptySplitNamesItsFileAndSplit) {
  const std::string dir = test::temp_dir("mnist0");
  test::write_synthetic_mnist(dir, 30, 10, /*gzip=*/false);
  test::write_file(dir + "/t10k-images-idx3-ubyte", idx_bytes({0, 28, 28}, {}));
  test::write_file(dir + "/t10k-labels-idx1-ubyte", idx_bytes({0}, {}));
  try {
    load_mnist(dir);
    FAIL();
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("t10k-images-idx3-ubyte: the test set holds no images"), std::string::npos)
        << e.what();
  }
  std::filesystem::remove_all(dir);
}

TEST(Idx, CorruptAndTruncatedGzip) {
  const std::string dir = test::temp_dir("gz");
  test::write_file(dir + "/ok.gz", idx_bytes({64}, std::vector<uint8_t>(64, 1)), true);
  std::vector<uint8_t> gz;
  {
    std::ifstream f(dir + "/ok.gz", std::ios::binary);
    gz.assign(std::istreambuf_iterator<char>(f), {});
  }
  std::vector<uint8_t> cut(gz.begin(), gz.begin() + static_cast<long>(gz.size() / 2));
  expect_io_error(cut, "truncated");
  std::vector<uint8_t> garbled = gz;
  for (size_t i = 10; i < garbled.size(); ++i) garbled[i] ^= 0x5A;
  expect_io_error(garbled, "");  // whatever zlib says, named as this file's error
  // A decompression bomb stops at the cap instead of exhausting memory.
  try {
    decode_idx(gz, "fixture.idx", /*max_bytes=*/16);
    ADD_FAILURE();
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("fixture.idx"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

TEST(Idx, ImageAndLabelFileChecks) {
  const std::string dir = test::temp_dir("idxk");
  const auto expect_named = [&](auto&& load, const std::string& file, const std::string& needle) {
    try {
      load(dir + file);
      ADD_FAILURE() << file;
    } catch (const IoError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(dir + file), std::string::npos) << e.what();
    }
  };
  const auto images = [](const std::string& p) { return load_idx_images(p); };
  const auto labels = [](const std::string& p) { return load_idx_labels(p); };
  test::write_file(dir + "/labels_as_images", idx_bytes({4}, {1, 2, 3, 4}));
  expect_named(images, "/labels_as_images", "");
  test::write_file(dir + "/bad_label", idx_bytes({3}, {1, 10, 2}));
  expect_named(labels, "/bad_label", "label 10 at index 1");
  expect_named(images, "/does_not_exist", "");
  std::filesystem::remove_all(dir);
}

TEST(Mnist, FindsRawOrGzipFilesAndNamesWhatIsMissing) {
  const std::string dir = test::temp_dir("mnist");
  test::write_synthetic_mnist(dir, 30, 10, /*gzip=*/true);
  const MnistData d = load_mnist(dir);
  EXPECT_EQ(d.train.size(), 30);
  EXPECT_EQ(d.test.size(), 10);
  EXPECT_EQ(d.train.sample_shape(), (Shape{1, 28, 28}));
  std::filesystem::remove(dir + "/t10k-labels-idx1-ubyte.gz");
  try {
    load_mnist(dir);
    FAIL();
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("t10k-labels-idx1-ubyte"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("fetch_data.sh"), std::string::npos) << e.what();
  }
  // Count mismatch between images and labels.
  test::write_file(dir + "/t10k-labels-idx1-ubyte", test::idx_bytes({9}, std::vector<uint8_t>(9, 1)));
  EXPECT_THROW(load_mnist(dir), IoError);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ember
