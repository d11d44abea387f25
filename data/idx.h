/// @file
/// IDX files (the MNIST format), raw or gzip-compressed (detected by content, not name).
/// Layout: 2 zero bytes, an element-type byte (0x08 = unsigned byte), a rank byte, then `rank`
/// big-endian uint32 sizes, then the elements. Every check names the file and what is wrong,
/// and sizes from the header are never trusted before being checked against the real length.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "../core/tensor.h"

namespace ember {

/// A decoded IDX file: its dimensions and its unsigned-byte elements.
struct IdxArray {
  std::vector<int64_t> dims;  ///< the sizes from the header, outermost first
  std::vector<uint8_t> data;  ///< unsigned-byte elements, row-major
};

/// Parses an IDX image already in memory (gzip or raw). `name` is used in error messages.
/// Throws IoError on any malformation. Decompressed size is capped at `max_bytes`.
IdxArray decode_idx(std::span<const uint8_t> bytes, const std::string& name, size_t max_bytes = size_t{1} << 31);
/// Reads and decodes a file.
IdxArray read_idx(const std::string& path);

/// Images as u8 (N, 1, H, W) from a rank-3 IDX file (N, H, W).
Tensor load_idx_images(const std::string& path);
/// Labels as i32 (N) from a rank-1 IDX file; every label must be in [0, num_classes).
Tensor load_idx_labels(const std::string& path, int num_classes = 10);

}  // namespace ember
