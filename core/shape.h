/// @file
/// Shape: up to 6 dimensions, always in logical order (N, C, H, W for images), whatever the
/// memory layout of the tensor that carries it (see Tensor::layout()).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

namespace ember {

/// The dimensions of a tensor, in logical order (at most kMaxRank of them, each >= 0).
class Shape {
 public:
  static constexpr int kMaxRank = 6;                         ///< the most dimensions a shape has
  static constexpr int64_t kMaxElements = int64_t{1} << 60;  ///< checked by the constructors

  /// The shape of rank 0 (a scalar: one element).
  Shape() = default;
  /// `Shape{64, 1, 28, 28}`. ShapeError for more than kMaxRank dimensions, a negative one, or more
  /// than kMaxElements elements.
  Shape(std::initializer_list<int64_t> dims);
  /// The same from a span of dimensions (the same checks).
  explicit Shape(std::span<const int64_t> dims);

  int rank() const { return rank_; }  ///< The number of dimensions.
  /// Dimension `i` (0 <= i < rank(), unchecked).
  int64_t operator[](int i) const { return dims_[static_cast<size_t>(i)]; }
  /// Dimension `i`, writable (0 <= i < rank(), unchecked; the new value is not checked either).
  int64_t& operator[](int i) { return dims_[static_cast<size_t>(i)]; }
  int64_t numel() const;                                       ///< The product of the dimensions (1 for rank 0).
  const int64_t* begin() const { return dims_.data(); }        ///< The first dimension, for range-for.
  const int64_t* end() const { return dims_.data() + rank_; }  ///< Past the last dimension.
  /// A copy with `n` as the leading (batch) dimension prepended.
  Shape with_batch(int64_t n) const;
  /// A copy without the leading dimension.
  Shape without_batch() const;
  std::string str() const;  ///< "(64, 1, 28, 28)"

  friend bool operator==(const Shape& a, const Shape& b);  ///< Same rank and dimensions.

 private:
  std::array<int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

}  // namespace ember
