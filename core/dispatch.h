// One dispatch point per op: `if (on_gpu(x)) <folder>_cuda_ops().op(...) else cpu::op(...)`.
// Each folder declares its op table (layers/cuda_ops.h, ...) and gets it from the CUDA module
// with cuda_ops<Table>() below; core knows no op. Private to the library.
#pragma once

#include <string>

#include "cuda_module.h"
#include "error.h"

namespace ember::detail {

inline bool on_gpu(const Tensor& t) { return t.device().is_cuda(); }

// The op table `Table` (which names its owner as Table::kOwner) from the CUDA module, or
// DeviceError saying why it is not there; `what` names what needed it. Found once and kept (the
// module stays loaded for the process): a dispatch builds no string and takes no lock.
template <class Table>
const Table& cuda_ops(const char* what) {
  static const Table* const found = [what] {  // a throw leaves it unset: the next call asks again
    const void* table = require_cuda_module(what).ops(Table::kOwner);
    if (!table)
      throw DeviceError(std::string(what) + ": the CUDA module has no '" + Table::kOwner +
                        "' ops (built without them)");
    return static_cast<const Table*>(table);
  }();
  return *found;
}

}  // namespace ember::detail
