// IDX fixtures (see idx_fixtures.h).
#include "idx_fixtures.h"

#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "core/rng.h"

namespace ember::test {

std::vector<uint8_t> idx_bytes(const std::vector<uint32_t>& dims, const std::vector<uint8_t>& data, uint8_t type) {
  std::vector<uint8_t> out{0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(d >> s));
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes, bool gzip) {
  if (gzip) {
    gzFile f = gzopen(path.c_str(), "wb");
    if (!f) throw std::runtime_error("cannot write " + path);
    if (!bytes.empty() && gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) == 0)
      throw std::runtime_error("gzwrite failed on " + path);
    gzclose(f);
    return;
  }
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw std::runtime_error("cannot write " + path);
}

std::string temp_dir(const std::string& tag) {
  namespace fs = std::filesystem;
  static int counter = 0;
  const fs::path p = fs::temp_directory_path() /
                     ("ember_test_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

void write_synthetic_mnist(const std::string& dir, int n_train, int n_test, bool gzip, uint64_t seed) {
  Rng rng(seed);
  auto make = [&](int n, const std::string& images, const std::string& labels) {
    std::vector<uint8_t> px(static_cast<size_t>(n) * 784), lab(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      const int k = static_cast<int>(rng.below(10));
      lab[static_cast<size_t>(i)] = static_cast<uint8_t>(k);
      uint8_t* img = px.data() + static_cast<size_t>(i) * 784;
      for (int j = 0; j < 784; ++j) img[j] = static_cast<uint8_t>(rng.below(40));
      const int top = 2 + (k / 5) * 14, left = 1 + (k % 5) * 5;
      for (int r = 0; r < 6; ++r)
        for (int c = 0; c < 6 && left + c < 28; ++c) img[(top + r) * 28 + left + c] = 230;
    }
    const std::string ext = gzip ? ".gz" : "";
    write_file(dir + "/" + images + ext, idx_bytes({static_cast<uint32_t>(n), 28, 28}, px), gzip);
    write_file(dir + "/" + labels + ext, idx_bytes({static_cast<uint32_t>(n)}, lab), gzip);
  };
  make(n_train, "train-images-idx3-ubyte", "train-labels-idx1-ubyte");
  make(n_test, "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte");
}

}  // namespace ember::test
