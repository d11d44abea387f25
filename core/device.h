/// @file
/// Device: where a tensor lives and an op runs. Parsed from "cpu", "gpu", "gpu:1", "cuda:0".
/// Whether CUDA is usable is decided at run time (core/runtime.h), never assumed from the build.
#pragma once

#include <string>
#include <string_view>

namespace ember {

/// The kind of a Device: the CPU or a CUDA GPU.
enum class DeviceKind { CPU, CUDA };

/// A device: its kind and, for a GPU, its CUDA index.
struct Device {
  DeviceKind kind = DeviceKind::CPU;  ///< CPU or CUDA
  int index = 0;                      ///< the CUDA device index (0 for the CPU)

  static Device cpu() { return {DeviceKind::CPU, 0}; }             ///< The CPU.
  static Device cuda(int i = 0) { return {DeviceKind::CUDA, i}; }  ///< CUDA device `i`.
  /// Accepts cpu, gpu, gpu:N, cuda, cuda:N (case-insensitive); throws ArgumentError otherwise.
  static Device parse(std::string_view text);

  bool is_cpu() const { return kind == DeviceKind::CPU; }          ///< Whether it is the CPU.
  bool is_cuda() const { return kind == DeviceKind::CUDA; }        ///< Whether it is a CUDA GPU.
  std::string str() const;                                         ///< "cpu" or "cuda:N"
  friend bool operator==(const Device&, const Device&) = default;  ///< Same kind and index.
};

/// The device that tensors and models land on when none is named: the innermost DeviceScope of
/// this thread, else the CPU.
Device current_device();

namespace detail {
Device exchange_current_device(Device d);  // sets this thread's current device, returns the old one
}  // namespace detail

/// TensorFlow's `with tf.device('/GPU:0'):` in C++. For the scope's lifetime, on this thread,
/// tensors created without a device (Tensor::empty, zeros, uniform, normal, from_vector) and models being built
/// (Model::build, and so fit() of an unbuilt model) land on `device`:
///
/// @code
///   {
///     DeviceScope gpu(Device::parse("gpu:0"));
///     Tensor a = Tensor::zeros(Shape{1000, 1000});   // on cuda:0
///     Sequential model; ...; model.build(Shape{1, 28, 28});  // parameters on cuda:0
///   }                                                 // back to the previous device
/// @endcode
///
/// Soft placement applies as everywhere: a missing GPU gives the CPU with one warning saying
/// why, or DeviceError with `strict`. Scopes nest and each restores the device before it;
/// library internals (data loading, checkpoints, host scratch) name their devices and are not
/// affected.
class DeviceScope {
 public:
  /// Makes `device` (after soft placement; DeviceError instead with `strict`) this thread's current
  /// device until the scope ends.
  explicit DeviceScope(Device device, bool strict = false);
  /// Restores the device that was current before the scope.
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  Device device() const { return device_; }  ///< after soft placement

 private:
  Device device_, previous_;
};

}  // namespace ember
