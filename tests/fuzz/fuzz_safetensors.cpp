// libFuzzer target for the safetensors reader (what --resume parses): any byte string must
// decode or throw CheckpointError, never crash, read out of bounds or allocate more than the
// input holds (ASan/UBSan and -rss_limit_mb catch the rest).
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const ember::SafeTensors st = ember::decode_safetensors(std::span<const uint8_t>(data, size), "fuzz");
    size_t bytes = 0;
    for (const auto& [name, t] : st.tensors) bytes += t.nbytes();
    if (bytes > size) __builtin_trap();  // the tensors are the data section: never more than the input
  } catch (const ember::CheckpointError&) {
  }
  return 0;
}
