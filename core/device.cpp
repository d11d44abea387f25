// Device parsing and printing.
#include "device.h"

#include <algorithm>
#include <cctype>
#include <charconv>

#include "error.h"

namespace ember {

Device Device::parse(std::string_view text) {
  std::string s(text);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  const auto bad = [&] {
    return ArgumentError("invalid device '" + std::string(text) + "': expected cpu, gpu, gpu:N or cuda:N");
  };
  if (s == "cpu") return cpu();
  std::string_view rest;
  if (s.rfind("gpu", 0) == 0) {
    rest = std::string_view(s).substr(3);
  } else if (s.rfind("cuda", 0) == 0) {
    rest = std::string_view(s).substr(4);
  } else {
    throw bad();
  }
  if (rest.empty()) return cuda(0);
  if (rest.front() != ':' || rest.size() < 2) throw bad();
  rest.remove_prefix(1);
  int index = -1;
  auto [ptr, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), index);
  if (ec != std::errc() || ptr != rest.data() + rest.size() || index < 0) throw bad();
  return cuda(index);
}

std::string Device::str() const { return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index); }

namespace {
thread_local Device g_current = Device::cpu();  // this thread's innermost DeviceScope
}  // namespace

Device current_device() { return g_current; }

namespace detail {
Device exchange_current_device(Device d) {
  const Device previous = g_current;
  g_current = d;
  return previous;
}
}  // namespace detail

// The constructor (soft placement) is in core/runtime.cpp.
DeviceScope::~DeviceScope() { detail::exchange_current_device(previous_); }

}  // namespace ember
