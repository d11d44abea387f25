/// @file
/// The safetensors format (readable by PyTorch's safetensors and others):
/// @code{.unparsed}
///   [8 bytes: little-endian u64 header length N][N bytes: JSON header][raw little-endian data]
/// @endcode
/// The header maps each tensor name to {"dtype": "F32", "shape": [...], "data_offsets": [b, e]}
/// (offsets into the data section) and holds "__metadata__": a string-to-string map.
/// Writes are atomic (core/output_file.h): a temporary file in the same directory is written,
/// fsync'ed and renamed over the target, which must be absent or a regular file (a symbolic link
/// is followed, never replaced). Reads validate sizes, header, dtypes and offsets before returning anything.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "error.h"
#include "tensor.h"

namespace ember {

class CheckpointError : public IoError {
 public:
  using IoError::IoError;
};

/// A raw safetensors file: named tensors (F32 / I32 / U8) and metadata.
struct SafeTensors {
  std::vector<std::pair<std::string, Tensor>> tensors;  ///< name and tensor (on the CPU)
  std::map<std::string, std::string> metadata;          ///< the "__metadata__" map
};

/// Writes atomically (write_file_atomically). Throws IoError on any failure; the target is then
/// untouched. `fail_after_bytes` >= 0 simulates a crash after that many bytes (tests).
void write_safetensors(const std::string& path, const SafeTensors& st, int64_t fail_after_bytes = -1);
/// Reads and validates a file; throws CheckpointError naming the file and what is wrong.
/// A FIFO, directory or device is refused before it is opened; only the header and the spans it
/// declares are read, so a lying file allocates no more than it holds.
SafeTensors read_safetensors(const std::string& path);
/// The same checks on a file already in memory (`name` for messages; the fuzz target).
SafeTensors decode_safetensors(std::span<const uint8_t> bytes, const std::string& name);

}  // namespace ember
