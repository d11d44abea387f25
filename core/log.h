/// @file
/// Logging. The library writes warnings (soft placement, ...) to stderr as "[ember] [warning] ...";
/// apps and users choose the level. Progress bars are not logs: they go to stdout from rank 0
/// only (layers/model/progress.h). spdlog does the work but stays out of this header (core/logger.h is
/// the library's own formatted access to it), so including Ember does not compile spdlog.
#pragma once

#include <string_view>

namespace ember {

/// Log levels, from the most verbose; `off` drops every message.
enum class LogLevel { trace, debug, info, warn, error, off };

/// Sets the level by name: "trace", "debug", "info", "warn", "error", "off"; throws ArgumentError
/// for anything else.
void set_log_level(std::string_view level);
/// Sets the level below which messages are dropped.
void set_log_level(LogLevel level);
/// Writes one message at `level` through the "ember" logger (dropped below the set level).
void log(LogLevel level, std::string_view message);

}  // namespace ember
