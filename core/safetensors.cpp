// The safetensors format: reading and atomic writing (see safetensors.h).
#include "safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "error.h"

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

// Writes all of buf or throws; `budget` simulates a crash (tests) by failing once it runs out.
void write_all(int fd, const void* buf, size_t n, const std::string& path, int64_t& budget) {
  const char* p = static_cast<const char*>(buf);
  while (n > 0) {
    size_t chunk = n;
    if (budget >= 0) {
      if (budget == 0) throw IoError("writing " + path + " failed: simulated crash");
      chunk = std::min<size_t>(chunk, static_cast<size_t>(budget));
    }
    const ssize_t w = ::write(fd, p, chunk);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw IoError("writing " + path + " failed: " + std::strerror(errno));
    }
    if (budget >= 0) budget -= w;
    p += w;
    n -= static_cast<size_t>(w);
  }
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

  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const std::string tmp = (dir / ("." + target.filename().string() + ".tmp." + std::to_string(::getpid()))).string();
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw IoError("cannot write checkpoint " + path + ": " + std::strerror(errno));
  int64_t budget = fail_after_bytes;
  try {
    write_all(fd, len, 8, path, budget);
    write_all(fd, text.data(), text.size(), path, budget);
    for (const auto& [name, t] : st.tensors) {
      const Tensor rm = t.layout() == Layout::RowMajor ? t : t.to_layout(Layout::RowMajor);
      write_all(fd, rm.raw(), rm.nbytes(), path, budget);  // x86-64 is little-endian, as the format
    }
    if (::fsync(fd) != 0) throw IoError("fsync of " + tmp + " failed: " + std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    throw IoError("closing " + tmp + " failed: " + std::strerror(errno));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw IoError("cannot move the checkpoint into place at " + path + ": " + why);
  }
  // Make the rename itself durable.
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

SafeTensors read_safetensors(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) throw CheckpointError("cannot open checkpoint " + path + ": " + std::strerror(errno));
  const auto size = static_cast<uint64_t>(f.tellg());
  if (size < 8) bad(path, "file of " + std::to_string(size) + " bytes is too short for a safetensors header");
  f.seekg(0);
  unsigned char len[8];
  f.read(reinterpret_cast<char*>(len), 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  if (n > kMaxHeaderBytes || n > size - 8)
    bad(path, "header length " + std::to_string(n) + " does not fit a file of " + std::to_string(size) + " bytes");
  std::string text(n, '\0');
  if (!f.read(text.data(), static_cast<std::streamsize>(n))) bad(path, "cannot read the header");
  json header;
  try {
    header = json::parse(text);
  } catch (const json::exception& e) {
    bad(path, std::string("the header is not valid JSON (") + e.what() + ")");
  }
  if (!header.is_object()) bad(path, "the header is not a JSON object");
  const uint64_t data_size = size - 8 - n;
  std::vector<char> data(data_size);
  if (data_size > 0 && !f.read(data.data(), static_cast<std::streamsize>(data_size))) bad(path, "cannot read the data");

  SafeTensors st;
  uint64_t covered = 0;
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
    else
      bad(path, "tensor '" + name + "' has dtype " + d.dump() + "; Ember reads F32, I32 and U8");
    const json& sh = e["shape"];
    const json& off = e["data_offsets"];
    if (!sh.is_array() || static_cast<int>(sh.size()) > Shape::kMaxRank || !off.is_array() || off.size() != 2)
      bad(path, "tensor '" + name + "' has a malformed shape or data_offsets");
    uint64_t count = 1;
    for (const json& v : sh) {
      if (!v.is_number_unsigned() || v.get<uint64_t>() > (uint64_t{1} << 40))
        bad(path, "tensor '" + name + "' has a bad dimension");
      count *= v.get<uint64_t>();
      if (count > data_size) count = data_size + 1;  // saturate; fails the size check below
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
    Tensor t = Tensor::empty(shape, dt, Device::cpu());
    if (t.nbytes() > 0) std::memcpy(t.raw(), data.data() + b, t.nbytes());
    st.tensors.emplace_back(name, std::move(t));
    covered += en - b;
  }
  if (covered > data_size) bad(path, "tensors overlap in the data section");
  return st;
}

}  // namespace ember
