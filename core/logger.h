// The library's "ember" spdlog logger, for formatted messages: logger().warn("{} ...", x).
// Private to the library and its apps (not installed): public code logs through core/log.h.
#pragma once

#include <spdlog/spdlog.h>

namespace ember::detail {

// The "ember" logger (stderr, "[ember] [warning] ..." pattern), created on first use.
spdlog::logger& logger();

}  // namespace ember::detail
