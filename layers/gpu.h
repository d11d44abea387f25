// Where a layer's tensors are on a GPU, its work goes to the CUDA module's ops (one dispatch
// point per op: `if (on_gpu(x)) gpu().op(...) else cpu::op(...)`). Private to the library.
#pragma once

#include "../core/cuda_module.h"

namespace ember::detail {

inline bool on_gpu(const Tensor& t) { return t.device().is_cuda(); }
// The module, or DeviceError saying why it is not there.
inline const CudaModuleApi& gpu() { return require_cuda_module("a layer's tensors are on a GPU"); }

}  // namespace ember::detail
