// Command-line handling shared by the apps: one line and exit code 2 for a bad command line,
// "did you mean" for a mistyped flag, number checks that tell "not a number" from "out of
// range", and a --help of at most 100 columns with each default at the end of its line.
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

namespace ember::apps {

// The widest line of --help.
inline constexpr size_t kHelpWidth = 100;

// `text` broken at spaces into lines of at most `width` characters (a longer word stays whole).
inline std::vector<std::string> wrap_words(const std::string& text, size_t width) {
  std::vector<std::string> lines;
  std::string line;
  std::istringstream words(text);
  for (std::string word; words >> word;) {
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      lines.push_back(line);
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
  }
  if (!line.empty()) lines.push_back(line);
  return lines;
}

// The help of every app: "  --flag TYPE" in a column, then the description wrapped to
// kHelpWidth with "(default: ...)" at its end; the default is the value the flag holds before
// parsing, or the words an app set with ->default_str() for a sentinel (-1: off, 0: all, ...).
// Flags take no value and show no default; so does an option whose default is empty.
class HelpFormatter : public CLI::Formatter {
 public:
  HelpFormatter() { column_width(30); }

  std::string make_option_opts(const CLI::Option* opt) const override {
    if (opt->get_type_size() == 0) return std::string();
    const std::string type = opt->get_type_name();  // "TEXT:{a,b}": the description names the choices
    return " " + type.substr(0, type.find(':'));
  }

  std::string make_option_desc(const CLI::Option* opt) const override {
    std::string desc = opt->get_description();
    if (opt->get_type_size() != 0 && !opt->get_default_str().empty())
      desc += " (default: " + opt->get_default_str() + ")";
    return desc;
  }

  std::string make_option(const CLI::Option* opt, bool is_positional) const override {
    const std::string name = "  " + make_option_name(opt, is_positional) + make_option_opts(opt);
    const std::vector<std::string> lines = wrap_words(make_option_desc(opt), kHelpWidth - column_width_);
    std::string out = name;
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i > 0 || out.size() >= column_width_)
        out += "\n" + std::string(column_width_, ' ');
      else
        out += std::string(column_width_ - out.size(), ' ');
      out += lines[i];
    }
    return out + "\n";
  }

  // The groups one blank line apart, the first one blank line below the usage.
  std::string make_group(std::string group, bool is_positional, std::vector<const CLI::Option*> opts) const override {
    std::string out = group + ":\n";
    for (const CLI::Option* opt : opts) out += make_option(opt, is_positional);
    return out;
  }

  std::string make_usage(const CLI::App* app, std::string name) const override {
    return CLI::Formatter::make_usage(app, std::move(name)) + "\n";
  }

  std::string make_help(const CLI::App* app, std::string name, CLI::AppFormatMode mode) const override {
    std::string help = CLI::Formatter::make_help(app, std::move(name), mode);
    for (size_t at; (at = help.find("\n\n\n")) != std::string::npos;) help.erase(at, 1);
    return help;
  }

  std::string make_description(const CLI::App* app) const override { return wrapped(app->get_description()); }

  std::string make_footer(const CLI::App* app) const override { return wrapped(app->get_footer()); }

 private:
  // Each line of `text` kept as it is when it fits, else wrapped; the wrapped lines of "  CODE  what"
  // go on under "what".
  static std::string wrapped(const std::string& text) {
    std::string out;
    std::istringstream paragraphs(text);
    for (std::string p; std::getline(paragraphs, p);) {
      if (p.size() <= kHelpWidth) {
        out += p + "\n";
        continue;
      }
      const size_t indent = std::min(p.find_first_not_of(' '), p.size());
      const size_t gap = p.find("  ", indent);
      const size_t hang = gap == std::string::npos ? indent : std::min(p.find_first_not_of(' ', gap), p.size());
      const std::vector<std::string> lines = wrap_words(p.substr(hang), kHelpWidth - hang);
      for (size_t i = 0; i < lines.size(); ++i)
        out += (i == 0 ? p.substr(0, hang) : std::string(hang, ' ')) + lines[i] + "\n";
    }
    return out;
  }
};

// Sets `app` up the way every app's help looks: the formatter above, and `exit_codes` (one
// "CODE  meaning" per line) as the footer. --help is in the group "Options"; an app that puts
// its flags in groups names --help's: app.get_help_ptr()->group("Help").
inline void set_up_help(CLI::App& app, const std::string& exit_codes) {
  app.formatter(std::make_shared<HelpFormatter>());
  app.set_help_flag("-h,--help", "Print this help and exit");
  app.footer("Exit codes:\n" + exit_codes);
}

// The edit distance of a and b, a swap of two neighbours counting as one edit.
inline size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

// The shown long flag of `app` nearest to `typed` ("--epcohs" -> "--epochs"), or "" when none is
// near: at most 1 edit for a flag of up to 4 letters, 2 up to 11, 3 beyond; failing that, the
// flag that starts with what was typed (3 letters or more; "--early" -> "--early-stopping", the
// other flags that start so starting with it too).
inline std::string nearest_flag(const CLI::App& app, const std::string& typed) {
  std::string best;
  size_t best_distance = std::numeric_limits<size_t>::max();
  std::vector<std::string> starting_with;
  const std::string bare = typed.substr(std::min(typed.find_first_not_of('-'), typed.size()));
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->get_group().empty()) continue;  // hidden
    for (const std::string& name : opt->get_lnames()) {
      const size_t distance = edit_distance(bare, name);
      const size_t allowed = name.size() <= 4 ? 1 : name.size() <= 11 ? 2 : 3;
      if (distance <= allowed && distance < best_distance) best = "--" + name, best_distance = distance;
      if (bare.size() >= 3 && name.starts_with(bare)) starting_with.push_back("--" + name);
    }
  }
  if (best.empty() && !starting_with.empty()) {  // the shortest, when the others start with it
    std::sort(starting_with.begin(), starting_with.end(), [](auto& x, auto& y) { return x.size() < y.size(); });
    if (std::all_of(starting_with.begin(), starting_with.end(),
                    [&](auto& s) { return s.starts_with(starting_with[0]); }))
      best = starting_with.front();
  }
  return best;
}

namespace detail {

inline std::string format_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

inline std::string integer_range(int64_t lo, int64_t hi) {
  return "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
}

}  // namespace detail

// A CLI11 transform for an integer flag (->transform: CLI11 runs ->check validators on a copy of
// the text): a decimal integer in [lo, hi]. The message says "not a number" for text, "not an
// integer" for 2.5 and "out of range" for one outside [lo, hi]. The value is passed on in plain
// decimal (CLI11 itself would read 010 as octal).
inline CLI::Validator integer_in(int64_t lo, int64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) {
        int64_t v = 0;
        const char* begin = text.data() + (text.starts_with('+') ? 1 : 0);
        const char* end = text.data() + text.size();
        const auto [ptr, ec] = std::from_chars(begin, end, v);
        if (ec == std::errc() && ptr == end && v >= lo && v <= hi) {
          text = std::to_string(v);
          return std::string();
        }
        if (ec == std::errc::result_out_of_range || (ec == std::errc() && ptr == end))
          return "out of range: " + detail::integer_range(lo, hi) + ", got " + text;
        char* double_end = nullptr;
        (void)std::strtod(text.c_str(), &double_end);
        if (!text.empty() && double_end == text.c_str() + text.size())
          return "not an integer: " + detail::integer_range(lo, hi) + ", got " + text;
        return "not a number: " + detail::integer_range(lo, hi) + ", got '" + text + "'";
      },
      std::string());
}

// --threads: a count in [0, 4096] (0: every core), or "free" (passed on as -1, ember::kFreeCores:
// the cores other processes leave free).
inline CLI::Validator thread_count() {
  return CLI::Validator(
      [check = integer_in(0, 4096)](std::string& text) {
        if (text == "free") {
          text = "-1";
          return std::string();
        }
        std::string error = check(text);
        return error.empty() ? error : error + " (or free)";
      },
      std::string());
}

// The same transform for an unsigned 64-bit flag over its whole range (CLI11 would wrap -5 and
// clamp 1e30).
inline CLI::Validator unsigned_64() {
  return CLI::Validator(
      [](std::string& text) {
        const std::string range = "expected an integer in [0, 18446744073709551615]";
        uint64_t v = 0;
        const char* end = text.data() + text.size();
        const auto [ptr, ec] = std::from_chars(text.data(), end, v);
        if (ec == std::errc() && ptr == end) {
          text = std::to_string(v);
          return std::string();
        }
        int64_t negative = 0;
        const auto s = std::from_chars(text.data(), end, negative);
        if (ec == std::errc::result_out_of_range || (s.ec != std::errc::invalid_argument && s.ptr == end))
          return "out of range: " + range + ", got " + text;
        char* double_end = nullptr;
        (void)std::strtod(text.c_str(), &double_end);
        if (!text.empty() && double_end == text.c_str() + text.size())
          return "not an integer: " + range + ", got " + text;
        return "not a number: " + range + ", got '" + text + "'";
      },
      std::string());
}

// A CLI11 check for a path flag: "the path is empty" for '' (which would otherwise mean "none").
inline CLI::Validator path_given() {
  return CLI::Validator(
      [](std::string& text) { return text.empty() ? std::string("the path is empty") : std::string(); }, std::string());
}

// A CLI11 check for a floating-point flag: a finite number in [lo, hi] ("not a number" for
// text, "not a finite number" for nan and inf, "out of range" outside [lo, hi]).
inline CLI::Validator finite_in(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) {
        const std::string range =
            "expected a finite number in [" + detail::format_number(lo) + ", " + detail::format_number(hi) + "]";
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || end != text.c_str() + text.size()) return "not a number: " + range + ", got '" + text + "'";
        if (std::isnan(v) || (std::isinf(v) && text.find_first_of("iI") != std::string::npos))
          return "not a finite number: " + range + ", got " + text;
        if (!(v >= lo && v <= hi)) return "out of range: " + range + ", got " + text;
        return std::string();
      },
      std::string());
}

// A CLI11 transform for a comma-separated list of integers in [lo, hi] ("20,40,60" or "20, 40"),
// each item checked as integer_in checks one flag, passed on as "20,40,60".
inline CLI::Validator integer_list_in(int64_t lo, int64_t hi) {
  return CLI::Validator(
      [check = integer_in(lo, hi)](std::string& text) {
        std::string out;
        int index = 1;
        for (size_t start = 0; start <= text.size(); ++index) {
          const size_t end = std::min(text.find(',', start), text.size());
          std::string item = text.substr(start, end - start);
          item.erase(0, std::min(item.find_first_not_of(' '), item.size()));
          item.erase(item.find_last_not_of(' ') + 1);
          if (const std::string why = check(item); !why.empty()) return "item " + std::to_string(index) + ": " + why;
          out += (out.empty() ? "" : ",") + item;
          start = end + 1;
        }
        text = out;
        return std::string();
      },
      std::string());
}

// Parses argv. Returns -1 to go on, or the exit code to return from main: 0 after --help,
// 2 after a bad command line, reported in one line, "<app>: <what> (see --help)"; an unknown
// flag near a known one adds "did you mean --<flag>?".
inline int parse_command_line(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ExtrasError& e) {
    for (const std::string& extra : app.remaining()) {
      if (extra.size() < 2 || extra[0] != '-') continue;
      const std::string flag = extra.substr(0, extra.find('='));
      const std::string near = nearest_flag(app, flag);
      std::fprintf(stderr, "%s: unknown flag %s%s (see --help)\n", app.get_name().c_str(), flag.c_str(),
                   near.empty() ? "" : ("; did you mean " + near + "?").c_str());
      return 2;
    }
    std::fprintf(stderr, "%s: %s (see --help)\n", app.get_name().c_str(), e.what());
    return 2;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "%s: %s (see --help)\n", app.get_name().c_str(), e.what());
    return 2;
  }
  return -1;
}

}  // namespace ember::apps
