// Shape: up to 6 dimensions, always in logical order (N, C, H, W for images), whatever the
// memory layout of the tensor that carries it (see Tensor::layout()).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

namespace ember {

class Shape {
 public:
  static constexpr int kMaxRank = 6;
  static constexpr int64_t kMaxElements = int64_t{1} << 60;  // checked by the constructors

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(std::span<const int64_t> dims);

  int rank() const { return rank_; }
  int64_t operator[](int i) const { return dims_[static_cast<size_t>(i)]; }
  int64_t& operator[](int i) { return dims_[static_cast<size_t>(i)]; }
  int64_t numel() const;
  const int64_t* begin() const { return dims_.data(); }
  const int64_t* end() const { return dims_.data() + rank_; }
  // A copy with `n` as the leading (batch) dimension prepended.
  Shape with_batch(int64_t n) const;
  // A copy without the leading dimension.
  Shape without_batch() const;
  std::string str() const;  // "(64, 1, 28, 28)"

  friend bool operator==(const Shape& a, const Shape& b);

 private:
  std::array<int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

}  // namespace ember
