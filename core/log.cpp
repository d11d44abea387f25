// The library logger (see log.h and logger.h).
#include "log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include "error.h"
#include "logger.h"

namespace ember {

namespace detail {
spdlog::logger& logger() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto l = spdlog::get("ember");
    if (!l) l = spdlog::stderr_color_mt("ember");
    l->set_pattern("[%n] [%^%l%$] %v");
    return l;
  }();
  return *logger;
}
}  // namespace detail

namespace {
spdlog::level::level_enum to_spdlog(LogLevel level) {
  switch (level) {
    case LogLevel::trace:
      return spdlog::level::trace;
    case LogLevel::debug:
      return spdlog::level::debug;
    case LogLevel::info:
      return spdlog::level::info;
    case LogLevel::warn:
      return spdlog::level::warn;
    case LogLevel::error:
      return spdlog::level::err;
    case LogLevel::off:
      return spdlog::level::off;
  }
  return spdlog::level::info;
}
}  // namespace

void set_log_level(std::string_view level) {
  const auto lv = spdlog::level::from_str(std::string(level));
  if (lv == spdlog::level::off && level != "off")
    throw ArgumentError("unknown log level '" + std::string(level) + "' (trace, debug, info, warn, error, off)");
  detail::logger().set_level(lv);
}

void set_log_level(LogLevel level) { detail::logger().set_level(to_spdlog(level)); }

void log(LogLevel level, std::string_view message) { detail::logger().log(to_spdlog(level), "{}", message); }

}  // namespace ember
