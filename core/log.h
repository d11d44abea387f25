// Logging through spdlog. Library code logs through ember::log(); apps choose the level.
// Progress bars are not logs: they go to stdout from rank 0 only (layers/progress.h).
#pragma once

#include <spdlog/spdlog.h>

#include <string_view>

namespace ember {

// The "ember" logger (stderr, "[ember] [warning] ..." pattern), created on first use.
spdlog::logger& log();
// "trace", "debug", "info", "warn", "error", "off"; throws ArgumentError for anything else.
void set_log_level(std::string_view level);

}  // namespace ember
