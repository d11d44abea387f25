// Device: where a tensor lives and an op runs. Parsed from "cpu", "gpu", "gpu:1", "cuda:0".
// Whether CUDA is usable is decided at run time (core/runtime.h), never assumed from the build.
#pragma once

#include <string>
#include <string_view>

namespace ember {

enum class DeviceKind { CPU, CUDA };

struct Device {
  DeviceKind kind = DeviceKind::CPU;
  int index = 0;

  static Device cpu() { return {DeviceKind::CPU, 0}; }
  static Device cuda(int i = 0) { return {DeviceKind::CUDA, i}; }
  // Accepts cpu, gpu, gpu:N, cuda, cuda:N (case-insensitive); throws ArgumentError otherwise.
  static Device parse(std::string_view text);

  bool is_cpu() const { return kind == DeviceKind::CPU; }
  bool is_cuda() const { return kind == DeviceKind::CUDA; }
  std::string str() const;  // "cpu" or "cuda:N"
  friend bool operator==(const Device&, const Device&) = default;
};

}  // namespace ember
