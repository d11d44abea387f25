// Command-line handling shared by the apps: one line and exit code 2 for a bad command line.
#pragma once

#include <cstdio>

#include <CLI/CLI.hpp>

namespace ember::apps {

// Parses argv. Returns -1 to go on, or the exit code to return from main: 0 after --help,
// 2 after a bad command line (reported in one line, "<app>: <what> (see --help)").
inline int parse_command_line(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "%s: %s (see --help)\n", app.get_name().c_str(), e.what());
    return 2;
  }
  return -1;
}

}  // namespace ember::apps
