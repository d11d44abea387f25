// The safetensors format: reading and atomic writing (see safetensors.h).
#include "safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>

#include <nlohmann/json.hpp>

#include "error.h"
#include "output_file.h"

namespace ember {

namespace {
using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // safetensors' own limit

const char* st_dtype(DType t) {
  switch (t) {
    case DType::F32:
      return "F32";
    case DType::I32:
      return "I32";
    case DType::U8:
      return "U8";
    case DType::F64:
      return "F64";
  }
  return "?";
}

// Writes all of buf; `budget` >= 0 simulates a crash (tests) by failing once it runs out.
void write_budgeted(int fd, const void* buf, size_t n, const std::string& path, int64_t& budget) {
  if (budget < 0) return write_all(fd, buf, n, path);
  const size_t chunk = std::min<size_t>(n, static_cast<size_t>(budget));
  write_all(fd, buf, chunk, path);
  budget -= static_cast<int64_t>(chunk);
  if (chunk < n) throw IoError("writing " + path + " failed: simulated crash");
}

[[noreturn]] void bad(const std::string& path, const std::string& why) {
  throw CheckpointError("checkpoint " + path + ": " + why);
}
}  // namespace

void write_safetensors(const std::string& path, const SafeTensors& st, int64_t fail_after_bytes) {
  json header = json::object();
  uint64_t offset = 0;
  for (const auto& [name, t] : st.tensors) {
    EMBER_CHECK(t.defined() && t.device().is_cpu(), ArgumentError,
                "write_safetensors: tensor '" + name + "' must be a defined cpu tensor");
    EMBER_CHECK(name != "__metadata__" && !header.contains(name), ArgumentError,
                "write_safetensors: duplicate or reserved tensor name '" + name + "'");
    json shape = json::array();
    for (int64_t d : t.shape()) shape.push_back(d);
    header[name] = {{"dtype", st_dtype(t.dtype())}, {"shape", shape}, {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  if (!st.metadata.empty()) header["__metadata__"] = st.metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned
  const uint64_t n = text.size();
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));  // little-endian

  int64_t budget = fail_after_bytes;
  write_file_atomically(path, "checkpoint", [&](int fd) {
    write_budgeted(fd, len, 8, path, budget);
    write_budgeted(fd, text.data(), text.size(), path, budget);
    for (const auto& [name, t] : st.tensors) {
      const Tensor rm = t.layout() == Layout::RowMajor ? t : t.to_layout(Layout::RowMajor);
      write_budgeted(fd, rm.raw(), rm.nbytes(), path, budget);  // x86-64 is little-endian, as the format
    }
  });
}

namespace {
// Where a safetensors file's bytes come from: a file (read at offsets, so only what the header
// promises is ever allocated) or memory (the fuzzer).
struct ByteSource {
  uint64_t size = 0;
  std::function<bool(uint64_t offset, void* dst, size_t n)> read;
};

SafeTensors decode(const ByteSource& src, const std::string& path);
}  // namespace

SafeTensors read_safetensors(const std::string& path) {
  std::error_code ec;
  const fs::file_status st_file = fs::status(path, ec);  // before open(): a FIFO would block there
  if (fs::exists(st_file) && !fs::is_regular_file(st_file))
    throw CheckpointError("checkpoint " + path + " is not a regular file (a directory, FIFO or device)");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // O_NONBLOCK: a FIFO swapped in
  if (fd < 0) throw CheckpointError("cannot open checkpoint " + path + ": " + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat sb {};
  if (::fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))
    throw CheckpointError("checkpoint " + path + " is not a regular file (a directory, FIFO or device)");
  ByteSource src;
  src.size = static_cast<uint64_t>(sb.st_size);
  std::string error;
  src.read = [fd, &error](uint64_t offset, void* dst, size_t n) {
    auto* p = static_cast<char*>(dst);
    while (n > 0) {
      const ssize_t got = ::pread(fd, p, std::min<size_t>(n, size_t{1} << 30), static_cast<off_t>(offset));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        error = got < 0 ? std::strerror(errno) : "the file is shorter than it was";
        return false;
      }
      p += got;
      n -= static_cast<size_t>(got);
      offset += static_cast<uint64_t>(got);
    }
    return true;
  };
  try {
    return decode(src, path);
  } catch (const CheckpointError& e) {
    if (error.empty()) throw;
    throw CheckpointError(std::string(e.what()) + " (" + error + ")");
  }
}

SafeTensors decode_safetensors(std::span<const uint8_t> bytes, const std::string& name) {
  ByteSource src;
  src.size = bytes.size();
  src.read = [bytes](uint64_t offset, void* dst, size_t n) {
    if (offset > bytes.size() || n > bytes.size() - offset) return false;
    if (n > 0) std::memcpy(dst, bytes.data() + offset, n);
    return true;
  };
  return decode(src, name);
}

namespace {
SafeTensors decode(const ByteSource& src, const std::string& path) {
  const uint64_t size = src.size;
  if (size < 8) bad(path, "file of " + std::to_string(size) + " bytes is too short for a safetensors header");
  unsigned char len[8];
  if (!src.read(0, len, 8)) bad(path, "cannot read the header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  if (n > kMaxHeaderBytes || n > size - 8)
    bad(path, "header length " + std::to_string(n) + " does not fit a file of " + std::to_string(size) + " bytes");
  std::string text(n, '\0');
  if (!src.read(8, text.data(), n)) bad(path, "cannot read the header");
  json header;
  try {
    header = json::parse(text);
  } catch (const json::exception& e) {
    bad(path, std::string("the header is not valid JSON (") + e.what() + ")");
  }
  if (!header.is_object()) bad(path, "the header is not a JSON object");
  const uint64_t data_size = size - 8 - n;

  SafeTensors st;
  std::vector<std::pair<uint64_t, uint64_t>> spans;  // each tensor's [begin, end) in the data section
  struct Entry {
    std::string name;
    DType dtype;
    Shape shape;
    uint64_t begin;
  };
  std::vector<Entry> entries;  // validated, read after the span check
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) bad(path, "__metadata__ is not an object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) bad(path, "metadata '" + m.key() + "' is not a string");
        st.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    const json& e = *it;
    const std::string& name = it.key();
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets"))
      bad(path, "tensor '" + name + "' lacks dtype, shape or data_offsets");
    DType dt;
    const json& d = e["dtype"];
    if (d == "F32")
      dt = DType::F32;
    else if (d == "I32")
      dt = DType::I32;
    else if (d == "U8")
      dt = DType::U8;
    else if (d == "F64")
      dt = DType::F64;
    else
      bad(path, "tensor '" + name + "' has dtype " + d.dump() + "; Ember reads F32, F64, I32 and U8");
    const json& sh = e["shape"];
    const json& off = e["data_offsets"];
    if (!sh.is_array() || static_cast<int>(sh.size()) > Shape::kMaxRank || !off.is_array() || off.size() != 2)
      bad(path, "tensor '" + name + "' has a malformed shape or data_offsets");
    uint64_t count = 1;  // elements, saturated at data_size + 1 (which fails the size check below)
    for (const json& v : sh) {
      if (!v.is_number_unsigned() || v.get<uint64_t>() > (uint64_t{1} << 40))
        bad(path, "tensor '" + name + "' has a bad dimension");
      const uint64_t dim = v.get<uint64_t>();
      if (count != 0 && dim > (data_size + 1) / count) {  // count * dim would exceed data_size + 1 (or wrap)
        count = dim == 0 ? 0 : data_size + 1;
      } else {
        count = std::min(count * dim, data_size + 1);
      }
    }
    for (const json& v : off)
      if (!v.is_number_unsigned()) bad(path, "tensor '" + name + "' has non-integer data_offsets");
    const uint64_t b = off[0], en = off[1];
    if (b > en || en > data_size)
      bad(path, "tensor '" + name + "' data [" + std::to_string(b) + ", " + std::to_string(en) + ") lies outside the " +
                    std::to_string(data_size) + "-byte data section (truncated file?)");
    if (count * dtype_size(dt) != en - b)
      bad(path, "tensor '" + name + "' has " + std::to_string(en - b) + " bytes for its shape " + sh.dump());
    std::vector<int64_t> dims;
    for (const json& v : sh) dims.push_back(v.get<int64_t>());
    const Shape shape(dims);
    spans.emplace_back(b, en);
    entries.push_back({name, dt, shape, b});
  }
  // The format's rule: the tensors cover the data section exactly, without holes or overlaps.
  std::sort(spans.begin(), spans.end());
  uint64_t at = 0;
  for (const auto& [b, en] : spans) {
    if (b < at) bad(path, "tensors overlap in the data section (at byte " + std::to_string(b) + ")");
    if (b > at)
      bad(path, "bytes " + std::to_string(at) + "-" + std::to_string(b) + " of the data section belong to no tensor");
    at = en;
  }
  if (at != data_size)
    bad(path, std::to_string(data_size - at) + " trailing bytes after the last tensor (a damaged or appended file?)");
  // Only now, with every span checked (disjoint, inside the file), allocate and read: the
  // tensors together are exactly the data section, never more than the file holds.
  for (const Entry& e : entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype, Device::cpu());
    if (t.nbytes() > 0) {
      if (!src.read(8 + n + e.begin, t.raw(), t.nbytes())) bad(path, "cannot read the data of tensor '" + e.name + "'");
    }
    st.tensors.emplace_back(e.name, std::move(t));
  }
  return st;
}
}  // namespace

}  // namespace ember
