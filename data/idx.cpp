// IDX decoding. The whole file is read first (its real size bounds every allocation), gunzipped
// when it starts with the gzip magic (capped), and only then is the header checked against it.
#include "idx.h"

#include <zlib.h>

#include <cstring>
#include <fstream>

#include "../core/error.h"

namespace ember {

namespace {

std::vector<uint8_t> gunzip(std::span<const uint8_t> in, const std::string& name, size_t max_bytes) {
  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) throw IoError(name + ": zlib could not start");
  std::vector<uint8_t> out;
  out.resize(std::min<size_t>(std::max<size_t>(in.size() * 4, 1 << 16), max_bytes));
  zs.next_in = const_cast<Bytef*>(in.data());
  zs.avail_in = static_cast<uInt>(in.size());
  size_t produced = 0;
  int rc = Z_OK;
  for (;;) {
    if (produced == out.size()) {
      if (out.size() >= max_bytes) {
        inflateEnd(&zs);
        throw IoError(name + ": decompresses to more than " + std::to_string(max_bytes) + " bytes");
      }
      out.resize(std::min(out.size() * 2, max_bytes));
    }
    zs.next_out = out.data() + produced;
    zs.avail_out = static_cast<uInt>(std::min<size_t>(out.size() - produced, 1u << 30));
    const uInt before = zs.avail_out;
    rc = inflate(&zs, Z_NO_FLUSH);
    produced += before - zs.avail_out;
    if (rc == Z_STREAM_END) {
      // Concatenated gzip members are legal (gzip -c a b); continue with the next one.
      if (zs.avail_in > 0 && inflateReset(&zs) == Z_OK) continue;
      break;
    }
    if (rc == Z_BUF_ERROR && zs.avail_in == 0) {
      inflateEnd(&zs);
      throw IoError(name + ": the gzip stream is truncated");
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR) {
      const std::string msg = zs.msg ? zs.msg : "error " + std::to_string(rc);
      inflateEnd(&zs);
      throw IoError(name + ": corrupt gzip data (" + msg + ")");
    }
  }
  inflateEnd(&zs);
  out.resize(produced);
  return out;
}

uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

const char* type_name(uint8_t t) {
  switch (t) {
    case 0x08:
      return "unsigned byte";
    case 0x09:
      return "signed byte";
    case 0x0B:
      return "int16";
    case 0x0C:
      return "int32";
    case 0x0D:
      return "float32";
    case 0x0E:
      return "float64";
    default:
      return nullptr;
  }
}

}  // namespace

namespace {
// Decodes a buffer it owns, so that the data can stay in it (no copy of a 47 MB file).
IdxArray decode_owned(std::vector<uint8_t> owned, const std::string& name, size_t max_bytes) {
  if (owned.size() >= 2 && owned[0] == 0x1f && owned[1] == 0x8b) owned = gunzip(owned, name, max_bytes);
  const std::span<const uint8_t> bytes(owned);
  if (bytes.size() < 4)
    throw IoError(name + ": not an IDX file (" + std::to_string(bytes.size()) + " bytes, shorter than the header)");
  if (bytes[0] != 0 || bytes[1] != 0)
    throw IoError(name + ": not an IDX file (bad magic number: the first two bytes must be zero)");
  const uint8_t type = bytes[2];
  const int rank = bytes[3];
  if (type != 0x08) {
    const char* tn = type_name(type);
    throw IoError(name + ": element type " + (tn ? std::string(tn) : "0x" + std::to_string(type) + " (unknown)") +
                  " is not supported; Ember reads unsigned-byte IDX files (type 0x08)");
  }
  if (rank < 1 || rank > 4) throw IoError(name + ": IDX rank " + std::to_string(rank) + " is outside 1..4");
  const size_t header = 4 + 4 * static_cast<size_t>(rank);
  if (bytes.size() < header)
    throw IoError(name + ": truncated header (" + std::to_string(bytes.size()) + " bytes, need " +
                  std::to_string(header) + ")");
  IdxArray a;
  uint64_t count = 1;
  for (int i = 0; i < rank; ++i) {
    const uint32_t d = be32(bytes.data() + 4 + 4 * i);
    a.dims.push_back(d);
    count *= d;  // <= (2^32)^4 overflows only past 2^64; compared against the real size below
    if (count > bytes.size()) count = bytes.size() + 1;  // saturate: already known to be too large
  }
  const size_t payload = bytes.size() - header;
  if (count > payload) {
    std::string dims;
    for (auto d : a.dims) dims += (dims.empty() ? "" : "x") + std::to_string(d);
    throw IoError(name + ": truncated: the header says " + dims + " elements but the file holds only " +
                  std::to_string(payload) + " bytes of data");
  }
  if (count < payload)
    throw IoError(name + ": " + std::to_string(payload - count) + " bytes of trailing data after the " +
                  std::to_string(count) + " elements the header describes");
  owned.erase(owned.begin(), owned.begin() + static_cast<std::ptrdiff_t>(header));
  a.data = std::move(owned);
  return a;
}
}  // namespace

IdxArray decode_idx(std::span<const uint8_t> bytes, const std::string& name, size_t max_bytes) {
  return decode_owned(std::vector<uint8_t>(bytes.begin(), bytes.end()), name, max_bytes);
}

IdxArray read_idx(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) throw IoError(path + ": cannot open (" + std::strerror(errno) + ")");
  const std::streamoff size = f.tellg();
  if (size < 0) throw IoError(path + ": cannot determine the file size");
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  f.seekg(0);
  if (!f.read(reinterpret_cast<char*>(bytes.data()), size)) throw IoError(path + ": read failed");
  return decode_owned(std::move(bytes), path, size_t{1} << 31);
}

Tensor load_idx_images(const std::string& path) {
  IdxArray a = read_idx(path);
  if (a.dims.size() != 3)
    throw IoError(path + ": an image file must have rank 3 (N, H, W); this one has rank " +
                  std::to_string(a.dims.size()));
  if (a.dims[1] == 0 || a.dims[2] == 0) throw IoError(path + ": images of size 0");
  Tensor t = Tensor::empty(Shape{a.dims[0], 1, a.dims[1], a.dims[2]}, DType::U8, Device::cpu());
  if (!a.data.empty()) std::memcpy(t.raw(), a.data.data(), a.data.size());
  return t;
}

Tensor load_idx_labels(const std::string& path, int num_classes) {
  IdxArray a = read_idx(path);
  if (a.dims.size() != 1)
    throw IoError(path + ": a label file must have rank 1; this one has rank " + std::to_string(a.dims.size()));
  Tensor t = Tensor::empty(Shape{a.dims[0]}, DType::I32, Device::cpu());
  int32_t* out = t.data<int32_t>();
  for (size_t i = 0; i < a.data.size(); ++i) {
    if (a.data[i] >= num_classes)
      throw IoError(path + ": label " + std::to_string(a.data[i]) + " at index " + std::to_string(i) +
                    " is outside 0.." + std::to_string(num_classes - 1));
    out[i] = a.data[i];
  }
  return t;
}

}  // namespace ember
