// IDX decoding, header first: the 4-byte magic/type/rank and the sizes are read and checked
// before anything is allocated. A raw file's size must match the header exactly (known from
// fstat, nothing read yet); a gzip stream is inflated as it is read, into a buffer that grows
// with the data actually decompressed up to what the header promises, plus one byte to detect
// excess. So a lying header or a gzip bomb costs no more memory than the real data.
#include "idx.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>

#include "../core/error.h"

namespace ember {

namespace {

// A stream of bytes; read() returns how many it gave (0 only at the end), throws IoError.
class Input {
 public:
  virtual ~Input() = default;
  virtual size_t read(uint8_t* dst, size_t n) = 0;
};

class SpanInput final : public Input {
 public:
  explicit SpanInput(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  size_t read(uint8_t* dst, size_t n) override {
    const size_t k = std::min(n, bytes_.size() - pos_);
    if (k > 0) std::memcpy(dst, bytes_.data() + pos_, k);
    pos_ += k;
    return k;
  }

 private:
  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
};

class FdInput final : public Input {
 public:
  FdInput(int fd, const std::string& path) : fd_(fd), path_(path) {}
  size_t read(uint8_t* dst, size_t n) override {
    for (;;) {
      const ssize_t got = ::read(fd_, dst, std::min<size_t>(n, size_t{1} << 30));
      if (got >= 0) return static_cast<size_t>(got);
      if (errno != EINTR) throw IoError(path_ + ": read failed (" + std::strerror(errno) + ")");
    }
  }

 private:
  int fd_;
  const std::string& path_;
};

// Inflates a gzip stream (concatenated members too, as gzip -c a b writes) read from `src`.
class GunzipInput final : public Input {
 public:
  GunzipInput(Input& src, const std::string& name) : src_(src), name_(name) {
    if (inflateInit2(&zs_, 16 + MAX_WBITS) != Z_OK) throw IoError(name + ": zlib could not start");
  }
  ~GunzipInput() override { inflateEnd(&zs_); }
  GunzipInput(const GunzipInput&) = delete;
  GunzipInput& operator=(const GunzipInput&) = delete;

  size_t read(uint8_t* dst, size_t n) override {
    zs_.next_out = dst;
    zs_.avail_out = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    const uInt want = zs_.avail_out;
    while (!done_ && zs_.avail_out == want) {  // until something came out, or the end
      if (zs_.avail_in == 0 && !src_end_) refill();
      const int rc = inflate(&zs_, Z_NO_FLUSH);
      if (rc == Z_STREAM_END) {
        if (zs_.avail_in == 0 && !src_end_) refill();
        if (zs_.avail_in == 0) {
          done_ = true;
        } else if (inflateReset(&zs_) != Z_OK) {
          throw IoError(name_ + ": zlib could not continue with the next gzip member");
        }
        continue;
      }
      if (rc == Z_BUF_ERROR && zs_.avail_in == 0 && src_end_) throw IoError(name_ + ": the gzip stream is truncated");
      if (rc != Z_OK && rc != Z_BUF_ERROR)
        throw IoError(name_ + ": corrupt gzip data (" + (zs_.msg ? zs_.msg : "error " + std::to_string(rc)) + ")");
    }
    return want - zs_.avail_out;
  }

 private:
  void refill() {
    const size_t got = src_.read(in_.data(), in_.size());
    src_end_ = got == 0;
    zs_.next_in = in_.data();
    zs_.avail_in = static_cast<uInt>(got);
  }

  Input& src_;
  const std::string& name_;
  z_stream zs_{};
  std::array<uint8_t, 1 << 16> in_{};
  bool src_end_ = false, done_ = false;
};

// Reads until `n` bytes or the end; returns how many.
size_t read_fully(Input& in, uint8_t* dst, size_t n) {
  size_t got = 0;
  while (got < n) {
    const size_t k = in.read(dst + got, n - got);
    if (k == 0) break;
    got += k;
  }
  return got;
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

std::string dims_text(const std::vector<int64_t>& dims) {
  std::string s;
  for (auto d : dims) s += (s.empty() ? "" : "x") + std::to_string(d);
  return s;
}

// Decodes `in`. `raw_size`: the whole (uncompressed) size when known, else nullopt (gzip).
IdxArray decode_stream(Input& in, const std::string& name, std::optional<uint64_t> raw_size, size_t max_bytes) {
  uint8_t head[4 + 4 * 4];
  const size_t got = read_fully(in, head, 4);
  if (got < 4) throw IoError(name + ": not an IDX file (" + std::to_string(got) + " bytes, shorter than the header)");
  if (head[0] != 0 || head[1] != 0)
    throw IoError(name + ": not an IDX file (bad magic number: the first two bytes must be zero)");
  const uint8_t type = head[2];
  const int rank = head[3];
  if (type != 0x08) {
    const char* tn = type_name(type);
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02X", type);
    throw IoError(name + ": element type " +
                  (tn ? std::string(tn) + " (" + hex + ")" : std::string(hex) + " (unknown)") +
                  " is not supported; Ember reads unsigned-byte IDX files (type 0x08)");
  }
  if (rank < 1 || rank > 4) throw IoError(name + ": IDX rank " + std::to_string(rank) + " is outside 1..4");
  const size_t header = 4 + 4 * static_cast<size_t>(rank);
  const size_t got_dims = read_fully(in, head + 4, header - 4);
  if (got_dims < header - 4)
    throw IoError(name + ": truncated header (" + std::to_string(4 + got_dims) + " bytes, need " +
                  std::to_string(header) + ")");
  IdxArray a;
  uint64_t count = 1;
  bool huge = false;  // the product passed 2^62: more than any file or cap
  for (int i = 0; i < rank; ++i) {
    const uint32_t d = be32(head + 4 + 4 * i);
    a.dims.push_back(d);
    if (d != 0 && count > (uint64_t{1} << 62) / d) huge = true;
    count = huge ? count : count * d;
  }
  if (std::find(a.dims.begin(), a.dims.end(), 0) != a.dims.end()) {  // a zero dimension: no elements
    huge = false;
    count = 0;
  }

  if (raw_size) {  // the size is known: check it against the header before reading anything
    if (*raw_size < header)
      throw IoError(name + ": the file's size (" + std::to_string(*raw_size) +
                    " bytes) is less than its header; it is not a plain file's content");
    const uint64_t payload = *raw_size - header;
    if (huge || count > payload)
      throw IoError(name + ": truncated: the header says " + dims_text(a.dims) + " elements but the file holds only " +
                    std::to_string(payload) + " bytes of data");
    if (count < payload)
      throw IoError(name + ": " + std::to_string(payload - count) + " bytes of trailing data after the " +
                    std::to_string(count) + " elements the header describes");
    a.data.resize(count);
    const size_t n = read_fully(in, a.data.data(), count);
    if (n < count)
      throw IoError(name + ": the file ended after " + std::to_string(header + n) + " of its " +
                    std::to_string(*raw_size) + " bytes (it changed while being read?)");
    return a;
  }
  if (huge || count > max_bytes - std::min(max_bytes, header))
    throw IoError(name + ": the header says " + dims_text(a.dims) + " elements, more than the " +
                  std::to_string(max_bytes) + "-byte decompression limit");
  // Grows with what really decompresses, never past what the header promises.
  size_t have = 0;
  while (have < count) {
    a.data.resize(std::min<uint64_t>(count, std::max<uint64_t>(2 * have, 1 << 16)));
    const size_t k = read_fully(in, a.data.data() + have, a.data.size() - have);
    have += k;
    if (have < a.data.size())
      throw IoError(name + ": truncated: the header says " + dims_text(a.dims) +
                    " elements but the file decompresses to only " + std::to_string(have) + " bytes of data");
  }
  uint8_t extra = 0;
  if (read_fully(in, &extra, 1) != 0)
    throw IoError(name + ": trailing data after the " + std::to_string(count) +
                  " elements the header describes (the gzip stream decompresses to more)");
  return a;
}

bool is_gzip(const uint8_t* p, size_t n) { return n >= 2 && p[0] == 0x1f && p[1] == 0x8b; }

}  // namespace

IdxArray decode_idx(std::span<const uint8_t> bytes, const std::string& name, size_t max_bytes) {
  SpanInput raw(bytes);
  if (!is_gzip(bytes.data(), bytes.size())) return decode_stream(raw, name, bytes.size(), max_bytes);
  GunzipInput gz(raw, name);
  return decode_stream(gz, name, std::nullopt, max_bytes);
}

IdxArray read_idx(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);  // before open(): a FIFO would block there
  if (fs::is_directory(st)) throw IoError(path + " is a directory, not an IDX file");
  if (fs::exists(st) && !fs::is_regular_file(st))
    throw IoError(path + " is not a regular file (a FIFO, socket or device), not an IDX file");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw IoError(path + ": cannot open (" + std::strerror(errno) + ")");
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat sb {};
  if (::fstat(fd, &sb) != 0) throw IoError(path + ": cannot stat (" + std::strerror(errno) + ")");
  if (!S_ISREG(sb.st_mode)) throw IoError(path + " is not a regular file, not an IDX file");
  uint8_t magic[2] = {0, 0};
  const ssize_t m = ::pread(fd, magic, 2, 0);
  if (m < 0) throw IoError(path + ": read failed (" + std::strerror(errno) + ")");
  FdInput raw(fd, path);
  if (!is_gzip(magic, static_cast<size_t>(m))) {
    // A file whose stat size is not its content (sysfs, procfs) fails the size checks, named.
    return decode_stream(raw, path, static_cast<uint64_t>(sb.st_size), size_t{1} << 31);
  }
  GunzipInput gz(raw, path);
  return decode_stream(gz, path, std::nullopt, size_t{1} << 31);
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
