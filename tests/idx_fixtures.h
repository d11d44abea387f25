// Writes IDX files (raw or gzip) for tests: valid ones, and synthetic MNIST-shaped data sets.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ember::test {

// The bytes of an IDX file: header (type 0x08, dims) followed by `data`.
std::vector<uint8_t> idx_bytes(const std::vector<uint32_t>& dims, const std::vector<uint8_t>& data,
                               uint8_t type = 0x08);
void write_file(const std::string& path, const std::vector<uint8_t>& bytes, bool gzip = false);

// A fresh directory under the system temp dir, removed by the caller if wanted.
std::string temp_dir(const std::string& tag);

// Writes the four MNIST files into `dir`: n_train/n_test images of 28x28 whose class k is a
// bright 6x6 square at one of ten positions, plus noise (learnable in a few hundred steps).
void write_synthetic_mnist(const std::string& dir, int n_train, int n_test, bool gzip, uint64_t seed = 1);

}  // namespace ember::test
