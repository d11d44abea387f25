// Tensor storage, views, layout conversion.
#include "tensor.h"

#include <cstring>
#include <type_traits>

#include "cpu/host_allocator.h"
#include "cuda_module.h"
#include "error.h"
#include "rng.h"

namespace ember {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32:
      return 4;
    case DType::I32:
      return 4;
    case DType::U8:
      return 1;
    case DType::F64:
      return 8;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32:
      return "f32";
    case DType::I32:
      return "i32";
    case DType::U8:
      return "u8";
    case DType::F64:
      return "f64";
  }
  return "?";
}

const char* layout_name(Layout l) { return l == Layout::NHWC ? "nhwc" : "row-major"; }

namespace {
void free_host(void* p, size_t bytes, Device) noexcept { cpu::host_free(p, bytes); }
void free_cuda(void* p, size_t, Device d) noexcept {
  if (const detail::CudaModuleApi* m = detail::cuda_module(nullptr)) m->deallocate(d.index, p);
}
}  // namespace

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device, Layout layout) {
  EMBER_CHECK(layout == Layout::RowMajor || shape.rank() == 4, ShapeError,
              "NHWC layout needs a 4-D shape, got " + shape.str());
  Tensor t;
  // A shape changed through operator[] is not checked: its product and bytes are, here.
  int64_t n = 1;
  for (int64_t d : shape)
    EMBER_CHECK(d >= 0 && !__builtin_mul_overflow(n, d, &n), ShapeError, "tensor " + shape.str() + " is too large");
  EMBER_CHECK(n <= Shape::kMaxElements, ShapeError, "tensor " + shape.str() + " is too large");
  const size_t bytes = static_cast<size_t>(n) * dtype_size(dtype);
  if (device.is_cpu()) {
    void* p = cpu::host_alloc(bytes);
    try {
      t.storage_ = std::make_shared<Storage>(p, bytes, device, &free_host);
    } catch (...) {
      cpu::host_free(p, bytes);
      throw;
    }
  } else {
    const auto& cuda = detail::require_cuda_module([&] { return "cannot allocate a tensor on " + device.str(); });
    void* p = cuda.allocate(device.index, bytes);
    try {
      t.storage_ = std::make_shared<Storage>(p, bytes, device, &free_cuda);
    } catch (...) {
      cuda.deallocate(device.index, p);
      throw;
    }
  }
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.layout_ = layout;
  t.device_ = device;
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.zero();  // on a GPU a cudaMemsetAsync on its stream: no upload, no host wait
  return t;
}

Tensor Tensor::uniform(const Shape& shape, float lo, float hi, uint64_t seed, Device device) {
  EMBER_CHECK(lo < hi, ArgumentError,
              "Tensor::uniform: needs lo < hi, got [" + std::to_string(lo) + ", " + std::to_string(hi) + ")");
  Tensor t = empty(shape, DType::F32, Device::cpu());
  Rng rng(seed);
  float* p = t.f32();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = rng.uniform(lo, hi);
  return device.is_cpu() ? t : t.to(device);
}

Tensor Tensor::normal(const Shape& shape, float mean, float stddev, uint64_t seed, Device device) {
  EMBER_CHECK(stddev >= 0, ArgumentError, "Tensor::normal: stddev must be >= 0, got " + std::to_string(stddev));
  Tensor t = empty(shape, DType::F32, Device::cpu());
  Rng rng(seed);
  float* p = t.f32();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = mean + stddev * rng.normal();
  return device.is_cpu() ? t : t.to(device);
}

Tensor Tensor::from_vector(const Shape& shape, std::span<const float> values) {
  EMBER_CHECK(static_cast<int64_t>(values.size()) == shape.numel(), ShapeError,
              "from_vector: " + std::to_string(values.size()) + " values for shape " + shape.str());
  Tensor t = empty(shape, DType::F32, Device::cpu());
  if (!values.empty()) std::memcpy(t.raw(), values.data(), values.size() * sizeof(float));
  const Device d = current_device();  // a DeviceScope's device
  return d.is_cpu() ? t : t.to(d);
}

template <typename T>
static constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>)
    return DType::F32;
  else if constexpr (std::is_same_v<T, int32_t>)
    return DType::I32;
  else if constexpr (std::is_same_v<T, double>)
    return DType::F64;
  else
    return DType::U8;
}

template <typename T>
T* Tensor::data() {
  EMBER_CHECK(defined(), Error, "access to an undefined tensor");
  EMBER_CHECK(dtype_ == dtype_of<T>(), ShapeError,
              std::string("tensor holds ") + dtype_name(dtype_) + ", accessed as " + dtype_name(dtype_of<T>()));
  EMBER_CHECK(device_.is_cpu(), DeviceError,
              "host access to a tensor on " + device_.str() + ": copy it with to(Device::cpu()) first");
  return static_cast<T*>(storage_->data()) + offset_;
}
template <typename T>
const T* Tensor::data() const {
  return const_cast<Tensor*>(this)->data<T>();
}
template float* Tensor::data<float>();
template int32_t* Tensor::data<int32_t>();
template uint8_t* Tensor::data<uint8_t>();
template double* Tensor::data<double>();
template const float* Tensor::data<float>() const;
template const int32_t* Tensor::data<int32_t>() const;
template const uint8_t* Tensor::data<uint8_t>() const;
template const double* Tensor::data<double>() const;

void* Tensor::raw() const {
  EMBER_CHECK(defined(), Error, "access to an undefined tensor");
  return static_cast<char*>(storage_->data()) + offset_ * static_cast<int64_t>(dtype_size(dtype_));
}

Tensor Tensor::view(int64_t offset, const Shape& shape) const {
  EMBER_CHECK(defined(), Error, "view of an undefined tensor");
  EMBER_CHECK(layout_ == Layout::RowMajor, ShapeError, "views are taken of row-major tensors only");
  EMBER_CHECK(offset >= 0 && offset + shape.numel() <= numel(), ShapeError,
              "view of " + std::to_string(shape.numel()) + " elements at offset " + std::to_string(offset) +
                  " exceeds a tensor of " + std::to_string(numel()));
  Tensor t = *this;
  t.offset_ = offset_ + offset;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::rows(int64_t begin, int64_t count) const {
  EMBER_CHECK(defined() && rank() >= 1 && begin >= 0 && count >= 0 && begin + count <= dim(0), ShapeError,
              "rows [" + std::to_string(begin) + ", " + std::to_string(begin + count) + ") of " + str());
  const Shape sample = shape_.without_batch();
  return view(begin * sample.numel(), sample.with_batch(count));
}

Tensor Tensor::reshape(const Shape& shape) const {
  EMBER_CHECK(shape.numel() == numel(), ShapeError, "cannot reshape " + shape_.str() + " to " + shape.str());
  EMBER_CHECK(layout_ == Layout::RowMajor, ShapeError, "reshape needs a row-major tensor");
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::relabel(Layout layout) const {
  if (layout == layout_) return *this;
  EMBER_CHECK(rank() == 4 && (shape_[1] == 1 || shape_[2] * shape_[3] == 1), ShapeError,
              "relabel: " + str() + " has different bytes in " + layout_name(layout));
  Tensor t = *this;
  t.layout_ = layout;
  return t;
}

Tensor Tensor::to(Device device) const {
  EMBER_CHECK(defined(), Error, "to(): undefined tensor");
  if (device == device_ && device.is_cpu()) return clone();
  const auto& cuda =
      detail::require_cuda_module([&] { return "cannot copy a tensor from " + device_.str() + " to " + device.str(); });
  Tensor t = empty(shape_, dtype_, device, layout_);
  cuda.copy(t.raw(), device.is_cpu() ? -1 : device.index, raw(), device_.is_cpu() ? -1 : device_.index, nbytes());
  return t;
}

namespace {
// NCHW <-> NHWC permutation of one 4-D float/int tensor; `to_nhwc` picks the direction.
template <typename T>
void permute_4d(const T* src, T* dst, int64_t n, int64_t c, int64_t h, int64_t w, bool to_nhwc) {
  const int64_t hw = h * w;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t in = 0; in < n; ++in) {
    for (int64_t p = 0; p < hw; ++p) {
      const T* s = src + in * c * hw;
      T* d = dst + in * c * hw;
      for (int64_t ic = 0; ic < c; ++ic) {
        if (to_nhwc)
          d[p * c + ic] = s[ic * hw + p];
        else
          d[ic * hw + p] = s[p * c + ic];
      }
    }
  }
}
}  // namespace

void Tensor::copy_from(const Tensor& src) {
  EMBER_CHECK(src.shape_ == shape_ && src.dtype_ == dtype_, ShapeError, "copy_from: " + src.str() + " into " + str());
  if (src.layout_ == layout_ && !(device_.is_cpu() && src.device_.is_cpu())) {
    const auto& cuda =
        detail::require_cuda_module([&] { return "copy_from " + src.device_.str() + " to " + device_.str(); });
    cuda.copy(raw(), device_.is_cpu() ? -1 : device_.index, src.raw(), src.device_.is_cpu() ? -1 : src.device_.index,
              nbytes());
    return;
  }
  if (device_.is_cuda() && src.device_ == device_) {  // a layout change within one GPU: a kernel there
    detail::require_cuda_module([&] { return "copy_from between layouts on " + device_.str(); }).relayout(*this, src);
    return;
  }
  EMBER_CHECK(device_.is_cpu() && src.device_.is_cpu(), DeviceError,
              "copy_from " + src.device_.str() + " to " + device_.str() +
                  " with a layout change: copy first, then convert on one device");
  if (src.layout_ == layout_) {
    std::memmove(raw(), src.raw(), nbytes());
    return;
  }
  const bool to_nhwc = layout_ == Layout::NHWC;
  const int64_t n = shape_[0], c = shape_[1], h = shape_[2], w = shape_[3];
  switch (dtype_) {
    case DType::F32:
      permute_4d(src.data<float>(), data<float>(), n, c, h, w, to_nhwc);
      break;
    case DType::I32:
      permute_4d(src.data<int32_t>(), data<int32_t>(), n, c, h, w, to_nhwc);
      break;
    case DType::U8:
      permute_4d(src.data<uint8_t>(), data<uint8_t>(), n, c, h, w, to_nhwc);
      break;
    case DType::F64:
      permute_4d(src.data<double>(), data<double>(), n, c, h, w, to_nhwc);
      break;
  }
}

Tensor Tensor::to_layout(Layout layout) const {
  Tensor t = empty(shape_, dtype_, device_, layout);
  t.copy_from(*this);
  return t;
}

Tensor Tensor::clone() const { return to_layout(layout_); }

void Tensor::fill(float value) {
  if (device_.is_cuda()) {
    detail::require_cuda_module([&] { return "fill a tensor on " + device_.str(); }).fill(*this, value);
    return;
  }
  EMBER_CHECK(dtype_ == DType::F32 || dtype_ == DType::F64, ArgumentError, "fill: f32 or f64 only, got " + str());
  const int64_t n = numel();
  if (dtype_ == DType::F64) {  // the f64 sums buffers (MetricSums)
    double* d = static_cast<double*>(raw());
    for (int64_t i = 0; i < n; ++i) d[i] = static_cast<double>(value);
    return;
  }
  float* p = f32();
  for (int64_t i = 0; i < n; ++i) p[i] = value;
}

void Tensor::zero() {
  const size_t bytes = static_cast<size_t>(numel()) * dtype_size(dtype_);
  if (device_.is_cuda()) {
    detail::require_cuda_module([&] { return "zero a tensor on " + device_.str(); }).zero(*this);
    return;
  }
  if (bytes > 0) std::memset(raw(), 0, bytes);
}

std::vector<float> Tensor::to_vector() const {
  if (!device_.is_cpu()) return to(Device::cpu()).to_vector();
  const Tensor rm = layout_ == Layout::RowMajor ? *this : to_layout(Layout::RowMajor);
  const float* p = rm.f32();
  return std::vector<float>(p, p + numel());
}

std::string Tensor::str() const {
  return std::string("Tensor(") + dtype_name(dtype_) + ", " + shape_.str() + ", " + layout_name(layout_) + ", " +
         device_.str() + ")";
}

const Tensor& as_layout(const Tensor& t, Layout layout, Tensor& scratch) {
  if (t.layout() == layout) return t;
  // Same bytes in both orders: alias instead of copying. (A scratch that aliases never meets the
  // copy path below with the same shape, since that path needs C > 1 and H*W > 1.)
  if (t.rank() == 4 && (t.dim(1) == 1 || t.dim(2) * t.dim(3) == 1)) {
    scratch = t.relabel(layout);
    return scratch;
  }
  ensure(scratch, t.shape(), t.dtype(), t.device(), layout);
  scratch.copy_from(t);
  return scratch;
}

void ensure(Tensor& t, const Shape& shape, DType dtype, Device device, Layout layout) {
  if (t.defined() && t.shape() == shape && t.dtype() == dtype && t.device() == device && t.layout() == layout) return;
  t = Tensor::empty(shape, dtype, device, layout);
}

}  // namespace ember
