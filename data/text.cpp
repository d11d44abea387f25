// Text data (see text.h): the byte vocabulary's lookups, the file reader, and the windows of a
// token sequence copied into i32 tensors.
#include "text.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "../core/error.h"

namespace ember {

namespace {
// "\x0A" for an unprintable byte, "\x41 ('A')" for a printable one.
std::string describe_byte(uint8_t b) {
  char hex[8];
  std::snprintf(hex, sizeof hex, "\\x%02X", static_cast<unsigned>(b));
  std::string s = hex;
  if (b >= 0x20 && b < 0x7F) s += std::string(" ('") + static_cast<char>(b) + "')";
  return s;
}
}  // namespace

ByteVocabulary::ByteVocabulary(std::string_view text) {
  EMBER_CHECK(!text.empty(), ArgumentError, "ByteVocabulary: the text is empty");
  std::array<bool, 256> seen{};
  for (const char c : text) seen[static_cast<uint8_t>(c)] = true;
  for (int b = 0; b < 256; ++b)
    if (seen[static_cast<size_t>(b)]) {
      id_of_[static_cast<size_t>(b)] = static_cast<int16_t>(bytes_.size());
      bytes_.push_back(static_cast<uint8_t>(b));
    }
}

ByteVocabulary ByteVocabulary::from_bytes(std::span<const uint8_t> bytes) {
  EMBER_CHECK(!bytes.empty(), ArgumentError, "ByteVocabulary::from_bytes: no bytes");
  ByteVocabulary v;
  for (size_t i = 0; i < bytes.size(); ++i) {
    // Strictly ascending: the ids of a vocabulary built from text, so the same list gives the same ids.
    EMBER_CHECK(i == 0 || bytes[i] > bytes[i - 1], ArgumentError,
                "ByteVocabulary::from_bytes: byte " + std::to_string(i) + " (" + describe_byte(bytes[i]) +
                    ") does not come after byte " + std::to_string(i - 1) + " (" + describe_byte(bytes[i - 1]) +
                    "): the bytes must be strictly ascending");
    v.id_of_[bytes[i]] = static_cast<int16_t>(i);
    v.bytes_.push_back(bytes[i]);
  }
  return v;
}

std::vector<int32_t> ByteVocabulary::encode(std::string_view text) const {
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const uint8_t b = static_cast<uint8_t>(text[i]);
    EMBER_CHECK(id_of_[b] >= 0, ArgumentError,
                "ByteVocabulary::encode: byte " + describe_byte(b) + " at position " + std::to_string(i) +
                    " is not in the vocabulary of " + std::to_string(size()) + " bytes");
    ids[i] = id_of_[b];
  }
  return ids;
}

std::string ByteVocabulary::decode(std::span<const int32_t> ids) const {
  std::string text(ids.size(), '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    EMBER_CHECK(ids[i] >= 0 && ids[i] < size(), ArgumentError,
                "ByteVocabulary::decode: id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                    " is outside [0, " + std::to_string(size()) + ")");
    text[i] = static_cast<char>(bytes_[static_cast<size_t>(ids[i])]);
  }
  return text;
}

std::string read_text_file(const std::string& path) {
  const std::string where = "read_text_file: " + (path.empty() ? std::string("''") : path);
  EMBER_CHECK(!path.empty(), IoError, where + ": the path is empty");
  // open() with O_NONBLOCK, then fstat: a FIFO neither blocks the open nor gets read forever.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  EMBER_CHECK(fd >= 0, IoError, where + ": cannot open it (" + std::strerror(errno) + ")");
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat sb {};
  EMBER_CHECK(::fstat(fd, &sb) == 0, IoError, where + ": cannot stat it (" + std::strerror(errno) + ")");
  EMBER_CHECK(S_ISREG(sb.st_mode), IoError,
              where + (S_ISDIR(sb.st_mode) ? " is a directory" : " is not a regular file (a FIFO, socket or device)") +
                  ", not a text file");
  // A regular file: blocking reads from here (O_NONBLOCK only kept the open from waiting).
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  // One byte more than the size: the end shows without growing (the string holds the file once).
  std::string text(static_cast<size_t>(sb.st_size) + 1, '\0');
  size_t got = 0;
  for (;;) {  // to the end, whatever the size said (a file that grew, procfs)
    if (got == text.size()) text.resize(std::max<size_t>(2 * text.size(), 4096));
    const ssize_t r = ::read(fd, text.data() + got, text.size() - got);
    if (r < 0 && errno == EINTR) continue;
    EMBER_CHECK(r >= 0, IoError, where + ": read failed (" + std::strerror(errno) + ")");
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  text.resize(got);
  text.shrink_to_fit();
  return text;
}

SequenceDataset::SequenceDataset(std::vector<int32_t> tokens, int64_t context)
    : tokens_(std::move(tokens)), context_(context) {
  EMBER_CHECK(context_ >= 1, ArgumentError,
              "SequenceDataset: the context length must be >= 1, got " + std::to_string(context_));
  EMBER_CHECK(num_tokens() >= context_ + 1, ArgumentError,
              "SequenceDataset: " + std::to_string(num_tokens()) + " tokens, fewer than the context length + 1 (" +
                  std::to_string(context_ + 1) + ") that one window and its next token need");
}

namespace {
// x[b] = tokens[starts[b], starts[b] + T) and y[b] the same window one token on.
SequenceBatch windows_at(const std::vector<int32_t>& tokens, int64_t t, const std::vector<int64_t>& starts) {
  const int64_t b = static_cast<int64_t>(starts.size());
  SequenceBatch out{Tensor::empty(Shape{b, t}, DType::I32, Device::cpu()),
                    Tensor::empty(Shape{b, t}, DType::I32, Device::cpu())};
  const size_t row = static_cast<size_t>(t) * sizeof(int32_t);
  for (int64_t i = 0; i < b; ++i) {
    const int32_t* from = tokens.data() + starts[static_cast<size_t>(i)];
    std::memcpy(out.x.data<int32_t>() + i * t, from, row);
    std::memcpy(out.y.data<int32_t>() + i * t, from + 1, row);
  }
  return out;
}
}  // namespace

SequenceBatch SequenceDataset::train_batch(int64_t batch, Rng& rng) const {
  EMBER_CHECK(batch >= 1, ArgumentError,
              "SequenceDataset::train_batch: batch must be >= 1, got " + std::to_string(batch));
  std::vector<int64_t> starts(static_cast<size_t>(batch));
  // n - T starts, 0 .. n - T - 1: the last window's target ends at the last token.
  for (int64_t& s : starts) s = static_cast<int64_t>(rng.below(static_cast<uint64_t>(num_tokens() - context_)));
  return windows_at(tokens_, context_, starts);
}

SequenceBatch SequenceDataset::eval_windows() const {
  std::vector<int64_t> starts(static_cast<size_t>(num_eval_windows()));
  for (size_t j = 0; j < starts.size(); ++j) starts[j] = static_cast<int64_t>(j) * context_;
  return windows_at(tokens_, context_, starts);
}

Dataset SequenceDataset::eval_dataset(DatasetOptions options) const {
  SequenceBatch w = eval_windows();
  return Dataset::from_tensors(std::move(w.x), std::move(w.y), std::move(options));
}

}  // namespace ember
