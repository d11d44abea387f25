/// @file
/// Tensor: a shape (logical order), a dtype, a memory layout tag, a device, and a shared handle to
/// storage plus an element offset (so a tensor can be a view into a larger buffer, e.g. one
/// layer's weights inside the model's flat parameter buffer).
///
/// Layouts. RowMajor stores the logical dims in order (NCHW for images): it is what crosses the
/// public API. NHWC (4-D only) is what the CPU convolution kernels run fastest in; a model may keep
/// activations in it internally. The layout is always a tag on the tensor, never implied.
///
/// Copies between devices are explicit (to()); nothing migrates implicitly.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "device.h"
#include "shape.h"

namespace ember {

/// A tensor's element type. F64: metric sums (exact counts), not activations.
enum class DType { F32, I32, U8, F64 };
/// A tensor's memory layout: RowMajor (the logical order, NCHW for images) or NHWC (4-D only).
enum class Layout { RowMajor, NHWC };

/// Bytes per element of `t` (4, 4, 1, 8).
size_t dtype_size(DType t);
/// "f32", "i32", "u8" or "f64".
const char* dtype_name(DType t);
/// "row-major" or "nhwc".
const char* layout_name(Layout l);

/// Owns one allocation on one device. Move-only; freed by its deleter, which never throws.
class Storage {
 public:
  /// Frees `data` (`bytes` long, on `device`); must not throw.
  using Deleter = void (*)(void* data, size_t bytes, Device device) noexcept;
  /// Takes ownership of `data` (`bytes` long, on `device`), to be freed by `deleter`.
  Storage(void* data, size_t bytes, Device device, Deleter deleter)
      : data_(data), bytes_(bytes), device_(device), deleter_(deleter) {}
  ~Storage() {
    if (data_ && deleter_) deleter_(data_, bytes_, device_);
  }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }       ///< The allocation's address (on its device).
  size_t bytes() const { return bytes_; }    ///< The allocation's size in bytes.
  Device device() const { return device_; }  ///< The device that holds the allocation.

 private:
  void* data_;
  size_t bytes_;
  Device device_;
  Deleter deleter_;
};

/// An n-dimensional array on one device: a shape, a dtype, a layout tag and a view into shared
/// storage (see tensor.h). Copying a Tensor is shallow: both share the storage.
class Tensor {
 public:
  /// An undefined tensor (no storage; defined() is false).
  Tensor() = default;

  /// Uninitialised tensor on `device`.
  /// Without a device: current_device() (the CPU, or the innermost DeviceScope's device).
  static Tensor empty(const Shape& shape, DType dtype = DType::F32, Device device = current_device(),
                      Layout layout = Layout::RowMajor);
  /// A row-major tensor of zeros on `device` (current_device() without one).
  static Tensor zeros(const Shape& shape, DType dtype = DType::F32, Device device = current_device());
  /// Seeded random f32 tensors on `device` (drawn on the CPU, so the same seed gives the same
  /// values on every device): uniform in [lo, hi), or normal with mean and stddev. For inputs
  /// of experiments (the tutorials' tf.random.uniform / tf.random.normal).
  static Tensor uniform(const Shape& shape, float lo, float hi, uint64_t seed, Device device = current_device());
  /// A seeded normal f32 tensor with `mean` and `stddev` on `device` (see uniform()).
  static Tensor normal(const Shape& shape, float mean, float stddev, uint64_t seed, Device device = current_device());
  /// A float tensor holding `values` (row-major) on current_device(); sizes must match.
  static Tensor from_vector(const Shape& shape, std::span<const float> values);

  bool defined() const { return storage_ != nullptr; }                                 ///< Whether it has storage.
  const Shape& shape() const { return shape_; }                                        ///< The logical shape.
  int rank() const { return shape_.rank(); }                                           ///< The number of dimensions.
  int64_t dim(int i) const { return shape_[i]; }                                       ///< Dimension `i` of the shape.
  int64_t numel() const { return shape_.numel(); }                                     ///< The number of elements.
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }  ///< numel() * dtype size.
  DType dtype() const { return dtype_; }                                               ///< The element type.
  Layout layout() const { return layout_; }                                            ///< The memory layout tag.
  Device device() const { return device_; }                                            ///< The device that holds it.

  /// Typed access to CPU tensors; throws if the dtype does not match T or the tensor is not on
  /// the CPU (a device pointer dereferenced on the host would crash: use to(Device::cpu())).
  template <typename T>
  T* data();
  /// The const form of data().
  template <typename T>
  const T* data() const;
  float* f32() { return data<float>(); }              ///< data<float>().
  const float* f32() const { return data<float>(); }  ///< data<float>().
  /// The address of the first element on whatever device holds it (for backend kernels).
  void* raw() const;

  /// A view of `shape.numel()` elements starting `offset` elements into this tensor (row-major).
  Tensor view(int64_t offset, const Shape& shape) const;
  /// Rows [begin, begin + count) of a row-major tensor (N, ...), as a view of shape (count, ...):
  /// a batch's slice, a replica's shard, a data set's part. ShapeError for rows outside [0, N).
  Tensor rows(int64_t begin, int64_t count) const;
  /// Same storage, new logical shape with the same number of elements (row-major only).
  Tensor reshape(const Shape& shape) const;

  /// Same storage under another layout tag; only where both orders are the same bytes
  /// (4-D with C == 1 or H*W == 1, e.g. MNIST images), else ShapeError.
  Tensor relabel(Layout layout) const;

  /// A deep copy on `device` (host <-> GPU and GPU <-> GPU copies go through the CUDA module;
  /// synchronous). The layout is kept.
  Tensor to(Device device) const;
  /// A deep copy with the requested memory layout (CPU, 4-D for NHWC).
  Tensor to_layout(Layout layout) const;
  /// Copies the values of `src` (same shape and dtype, any layout) into this tensor's layout.
  void copy_from(const Tensor& src);
  /// A deep copy on the same device, in the same layout.
  Tensor clone() const;

  void fill(float value);                ///< F32 or F64; on a GPU queued on its stream (no wait)
  void zero();                           ///< every element 0, any dtype; on a GPU queued (no wait)
  std::vector<float> to_vector() const;  ///< F32, returned in row-major logical order
  std::string str() const;               ///< "Tensor(f32, (64, 10), row-major, cpu)"

 private:
  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;  // in elements
  Shape shape_;
  DType dtype_ = DType::F32;
  Layout layout_ = Layout::RowMajor;
  Device device_;
};

/// Returns `t` if it already has `layout`, else converts it into `scratch` (reallocated only
/// when its shape changes) and returns that. Lets ops accept any layout without allocating
/// in the steady state.
const Tensor& as_layout(const Tensor& t, Layout layout, Tensor& scratch);

/// Makes `t` a tensor of `shape`/`dtype`/`layout` on `device`, reusing its storage when the
/// shape, dtype, layout and device already match (the steady state of a training loop).
void ensure(Tensor& t, const Shape& shape, DType dtype, Device device, Layout layout = Layout::RowMajor);

}  // namespace ember
