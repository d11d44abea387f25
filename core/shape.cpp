// Shape helpers.
#include "shape.h"

#include "error.h"

namespace ember {

Shape::Shape(std::initializer_list<int64_t> dims) : Shape(std::span<const int64_t>(dims.begin(), dims.size())) {}

Shape::Shape(std::span<const int64_t> dims) {
  EMBER_CHECK(dims.size() <= kMaxRank, ShapeError,
              "shape has " + std::to_string(dims.size()) + " dimensions; at most 6 are supported");
  int64_t n = 1;
  for (int64_t d : dims) {
    EMBER_CHECK(d >= 0, ShapeError, "shape dimensions must be >= 0, got " + std::to_string(d));
    // At most 2^60 elements: their bytes (up to 8 each) and every product of dimensions fit int64.
    EMBER_CHECK(!__builtin_mul_overflow(n, d, &n) && n <= kMaxElements, ShapeError,
                "shape of more than 2^60 elements (a dimension of " + std::to_string(d) + ")");
    dims_[static_cast<size_t>(rank_++)] = d;
  }
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[static_cast<size_t>(i)];
  return n;
}

Shape Shape::with_batch(int64_t n) const {
  EMBER_CHECK(rank_ < kMaxRank, ShapeError, "cannot add a batch dimension to " + str());
  Shape s;
  s.rank_ = rank_ + 1;
  s.dims_[0] = n;
  for (int i = 0; i < rank_; ++i) s.dims_[static_cast<size_t>(i + 1)] = dims_[static_cast<size_t>(i)];
  return Shape(std::span<const int64_t>(s.dims_.data(), static_cast<size_t>(s.rank_)));  // checked
}

Shape Shape::without_batch() const {
  EMBER_CHECK(rank_ >= 1, ShapeError, "a scalar shape has no batch dimension");
  Shape s;
  s.rank_ = rank_ - 1;
  for (int i = 1; i < rank_; ++i) s.dims_[static_cast<size_t>(i - 1)] = dims_[static_cast<size_t>(i)];
  return s;
}

std::string Shape::str() const {
  std::string s = "(";
  for (int i = 0; i < rank_; ++i) {
    if (i) s += ", ";
    s += std::to_string(dims_[static_cast<size_t>(i)]);
  }
  if (rank_ == 1) s += ",";
  return s + ")";
}

bool operator==(const Shape& a, const Shape& b) {
  if (a.rank_ != b.rank_) return false;
  for (int i = 0; i < a.rank_; ++i)
    if (a.dims_[static_cast<size_t>(i)] != b.dims_[static_cast<size_t>(i)]) return false;
  return true;
}

}  // namespace ember
