// Embedding on the CPU: the forward copies table rows; the backward sorts the positions by id
// (a stable counting sort, so each id's positions stay ascending) and sums each id's rows in the
// batch's sum order (layers/embedding_math.h), the ids split across the OpenMP pool.
#include "embedding.h"

#include <algorithm>
#include <cstring>

#include "../../core/error.h"
#include "../embedding_math.h"

namespace ember::cpu {

namespace {
void check(const Tensor& ids, const Tensor& table, const Tensor& y, const char* what) {
  EMBER_CHECK(ids.dtype() == DType::I32 && ids.device().is_cpu() && ids.layout() == Layout::RowMajor, ShapeError,
              "embedding (cpu): ids must be i32 row-major on the cpu, got " + ids.str());
  EMBER_CHECK(table.rank() == 2 && table.dtype() == DType::F32 && table.device().is_cpu(), ShapeError,
              "embedding (cpu): the table must be f32 (vocabulary, features) on the cpu, got " + table.str());
  std::vector<int64_t> want(ids.shape().begin(), ids.shape().end());
  want.push_back(table.dim(1));
  EMBER_CHECK(
      y.shape() == Shape(want) && y.dtype() == DType::F32 && y.device().is_cpu() && y.layout() == Layout::RowMajor,
      ShapeError,
      std::string("embedding (cpu): ") + what + " must be f32 row-major " + Shape(want).str() + ", got " + y.str());
}
}  // namespace

void embedding_forward(const Tensor& ids, const Tensor& table, Tensor& y) {
  check(ids, table, y, "the output");
  const int64_t r = ids.numel(), v = table.dim(0), c = table.dim(1);
  const int32_t* id = ids.data<int32_t>();
  for (int64_t p = 0; p < r; ++p)
    EMBER_CHECK(id[p] >= 0 && id[p] < v, ArgumentError,
                "Embedding: id " + std::to_string(id[p]) + " at position " + std::to_string(p) +
                    " is outside the vocabulary [0, " + std::to_string(v) + ")");
  const float* t = table.f32();
  float* out = y.f32();
#pragma omp parallel for schedule(static) if (r * c > 32768)
  for (int64_t p = 0; p < r; ++p)
    std::memcpy(out + p * c, t + int64_t{id[p]} * c, static_cast<size_t>(c) * sizeof(float));
}

void embedding_backward(const Tensor& ids, const Tensor& dy, Tensor& dtable, Tensor& scratch) {
  check(ids, dtable, dy, "the output gradient");
  const int64_t r = ids.numel(), v = dtable.dim(0), c = dtable.dim(1);
  EMBER_CHECK(r < (int64_t{1} << 31) && v < (int64_t{1} << 30), ShapeError,
              "embedding (cpu): more than 2^31 positions or 2^30 ids");
  // scratch: v + 1 offsets, the r positions sorted by id, a write cursor per id.
  ensure(scratch, Shape{2 * v + 1 + r}, DType::I32, Device::cpu());
  int32_t* start = scratch.data<int32_t>();
  int32_t* pos = start + v + 1;
  const int32_t* id = ids.data<int32_t>();
  std::fill(start, start + v + 1, 0);
  for (int64_t p = 0; p < r; ++p) {
    EMBER_CHECK(id[p] >= 0 && id[p] < v, ArgumentError,
                "Embedding: id " + std::to_string(id[p]) + " at position " + std::to_string(p) +
                    " is outside the vocabulary [0, " + std::to_string(v) + ")");
    ++start[id[p] + 1];
  }
  for (int64_t i = 0; i < v; ++i) start[i + 1] += start[i];
  int32_t* next = pos + r;
  std::copy(start, start + v, next);
  for (int64_t p = 0; p < r; ++p) pos[next[id[p]]++] = static_cast<int32_t>(p);
  const float* g = dy.f32();
  float* d = dtable.f32();
  const int64_t groups = batch_groups(r);
#pragma omp parallel for schedule(dynamic, 16) if (r * c > 32768)
  for (int64_t i = 0; i < v; ++i) {
    const int32_t* first = pos + start[i];
    const int64_t k = start[i + 1] - start[i];
    for (int64_t col = 0; col < c; ++col) {
      float s = 0.0f;
      detail::embedding_grad_tree(first, k, g, c, col, 0, groups, &s);
      d[i * c + col] = s;
    }
  }
}

}  // namespace ember::cpu
