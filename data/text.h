/// @file
/// Text as token ids for a character-level language model: a byte vocabulary, a whole-file
/// reader, and windows of a token sequence as (x, y) pairs, y being x shifted by one token.
///
/// @code{.unparsed}
///   n tokens, context T (1 <= T, T + 1 <= n)
///   train_batch   x, y  i32 (B, T): x[b] = tokens[s_b, s_b + T), y[b] = tokens[s_b + 1, s_b + T + 1),
///                       s_b uniform in [0, n - T - 1] (nanoGPT's get_batch)
///   eval_windows  x, y  i32 (W, T): x[j] = tokens[jT, jT + T), y[j] = tokens[jT + 1, jT + T + 1),
///                       every j with jT + T + 1 <= n, so W = floor((n - 1) / T)
/// @endcode
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "../core/rng.h"
#include "../core/tensor.h"
#include "dataset.h"

namespace ember {

/// A vocabulary of single bytes: id i is the i-th smallest byte of the vocabulary. Text is taken
/// as bytes, so a UTF-8 character outside ASCII is several tokens.
class ByteVocabulary {
 public:
  /// An empty vocabulary (size 0: encodes nothing but the empty string).
  ByteVocabulary() = default;
  /// The distinct bytes of `text`, sorted ascending. ArgumentError when `text` is empty.
  explicit ByteVocabulary(std::string_view text);
  /// A vocabulary of exactly `bytes` (e.g. bytes() of a saved one, to recreate its ids), which
  /// must be non-empty and strictly ascending: ArgumentError naming the first out of order.
  static ByteVocabulary from_bytes(std::span<const uint8_t> bytes);

  /// The number of ids: ids are in [0, size()).
  int size() const { return static_cast<int>(bytes_.size()); }
  /// The bytes, sorted ascending: bytes()[id] is the byte of `id`.
  const std::vector<uint8_t>& bytes() const { return bytes_; }
  /// Whether `byte` has an id.
  bool contains(uint8_t byte) const { return id_of_[byte] >= 0; }
  /// The id of every byte of `text`. ArgumentError naming the first byte not in the vocabulary
  /// (as \\xNN, and as itself when printable) and its position.
  std::vector<int32_t> encode(std::string_view text) const;
  /// The bytes of `ids`. ArgumentError naming the first id outside [0, size()) and its position.
  std::string decode(std::span<const int32_t> ids) const;

 private:
  std::vector<uint8_t> bytes_;
  std::array<int16_t, 256> id_of_ = [] {  // by byte: its id, -1 when not in the vocabulary
    std::array<int16_t, 256> a{};
    a.fill(-1);
    return a;
  }();
};

/// The whole content of the file at `path`, as bytes. IoError naming the path (and the system's
/// reason) when it cannot be opened or read, or is not a regular file (a directory, a FIFO, a
/// device: refused before any read, so a FIFO never blocks and /dev/zero is never read forever).
std::string read_text_file(const std::string& path);

/// A batch of windows: x and y i32 (B, T) on the CPU, y[b][t] = the token after x[b][t].
struct SequenceBatch {
  Tensor x;  ///< i32 (B, T): the inputs
  Tensor y;  ///< i32 (B, T): the next tokens, the targets
};

/// A token sequence cut into windows of a context length T (see text.h): random windows for
/// training, non-overlapping ones for evaluation.
class SequenceDataset {
 public:
  /// `tokens` (ids, any values) and the context length T. ArgumentError when T < 1 or there are
  /// fewer than T + 1 tokens (one window and its next token).
  SequenceDataset(std::vector<int32_t> tokens, int64_t context);

  int64_t context() const { return context_; }                                 ///< T: tokens per window.
  int64_t num_tokens() const { return static_cast<int64_t>(tokens_.size()); }  ///< n.
  const std::vector<int32_t>& tokens() const { return tokens_; }               ///< The sequence.

  /// `batch` windows at random starts, as nanoGPT's get_batch (torch.randint(n - T, (batch,))):
  /// s_b = rng.below(n - T), one call per row in the order b = 0, 1, ..., batch - 1 and no other
  /// use of `rng`, so the batch is fixed by the rng's state (a seed);
  /// x[b] = tokens[s_b, s_b + T), y[b] = tokens[s_b + 1, s_b + T + 1). ArgumentError when
  /// batch < 1.
  SequenceBatch train_batch(int64_t batch, Rng& rng) const;
  /// W = floor((n - 1) / T): the windows j with j T + T + 1 <= n.
  int64_t num_eval_windows() const { return (num_tokens() - 1) / context_; }
  /// The W non-overlapping windows in order: x[j] = tokens[j T, j T + T), y[j] = tokens[j T + 1,
  /// j T + T + 1), i32 (W, T). The tokens after the last whole window's target are left out.
  SequenceBatch eval_windows() const;
  /// eval_windows() as a Dataset (i32 features (W, T), scale 1; i32 targets (W, T)), for
  /// Model::evaluate. `options.scale` must stay 1; `options.num_classes` > 0 checks every
  /// target id against it.
  Dataset eval_dataset(DatasetOptions options = {}) const;

 private:
  std::vector<int32_t> tokens_;
  int64_t context_ = 0;
};

}  // namespace ember
