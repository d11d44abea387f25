// The library logger (see log.h).
#include "core/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include "core/error.h"

namespace ember {

spdlog::logger& log() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto l = spdlog::get("ember");
    if (!l) l = spdlog::stderr_color_mt("ember");
    l->set_pattern("[%n] [%^%l%$] %v");
    return l;
  }();
  return *logger;
}

void set_log_level(std::string_view level) {
  const auto lv = spdlog::level::from_str(std::string(level));
  if (lv == spdlog::level::off && level != "off")
    throw ArgumentError("unknown log level '" + std::string(level) + "' (trace, debug, info, warn, error, off)");
  log().set_level(lv);
}

}  // namespace ember
