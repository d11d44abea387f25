// libFuzzer target for the IDX reader: any byte string must decode or throw IoError, never
// crash, read out of bounds or allocate without bound (ASan/UBSan catch the rest).
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/error.h"
#include "data/idx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    // A small decompression cap keeps gzip inputs from spending the run on inflating.
    const ember::IdxArray a = ember::decode_idx(std::span<const uint8_t>(data, size), "fuzz", size_t{1} << 24);
    size_t count = 1;
    for (int64_t d : a.dims) count *= static_cast<size_t>(d);
    if (count != a.data.size()) __builtin_trap();  // decode_idx promised dims match the data
  } catch (const ember::IoError&) {
  }
  return 0;
}
