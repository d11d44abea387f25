// The progress bar (see progress.h).
#include "progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

namespace ember {

ProgressBar::ProgressBar(int64_t total_steps, std::FILE* out)
    : ProgressBar(total_steps, out, isatty(fileno(out)) != 0) {}

ProgressBar::ProgressBar(int64_t total_steps, std::FILE* out, bool interactive)
    : total_(total_steps),
      out_(out),
      interactive_(interactive),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

namespace {
std::string fmt_metric(const std::string& name, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, " - %s: %.4f", name.c_str(), v);
  return buf;
}

std::string fmt_duration(double s) {
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%d:%02d:%02d", int(s) / 3600, int(s) / 60 % 60, int(s) % 60);
  else if (s >= 60)
    std::snprintf(buf, sizeof buf, "%d:%02d", int(s) / 60, int(s) % 60);
  else
    std::snprintf(buf, sizeof buf, "%ds", int(std::lround(s)));
  return buf;
}
}  // namespace

std::string ProgressBar::format_line(int64_t step, int64_t total, double elapsed_s, double per_step, bool done,
                                     const Metrics& metrics) {
  constexpr int kWidth = 30;
  const int digits = static_cast<int>(std::to_string(total).size());
  char head[64];
  std::snprintf(head, sizeof head, "%*lld/%lld [", digits, static_cast<long long>(step), static_cast<long long>(total));
  std::string line = head;
  // Keras' bar: '=' for the part done, '>' at its head while running, '.' for the rest.
  const int filled = total > 0 ? static_cast<int>(kWidth * std::min(step, total) / total) : kWidth;
  for (int i = 0; i < kWidth; ++i) {
    if (i < filled - 1 || (i == filled - 1 && step >= total))
      line += '=';
    else if (i == filled - 1)
      line += '>';
    else
      line += '.';
  }
  line += "] - ";
  if (done) {
    char t[64];
    if (per_step >= 1.0)
      std::snprintf(t, sizeof t, "%s %.0fs/step", fmt_duration(elapsed_s).c_str(), per_step);
    else
      std::snprintf(t, sizeof t, "%s %.0fms/step", fmt_duration(elapsed_s).c_str(), per_step * 1e3);
    line += t;
  } else {
    line += "ETA: " + fmt_duration(per_step * static_cast<double>(total - step));
  }
  for (const auto& [name, v] : metrics) line += fmt_metric(name, v);
  return line;
}

void ProgressBar::interrupt(int64_t step) {
  if (!interactive_) return;
  std::fprintf(out_, " - stopped at %lld/%lld\n", static_cast<long long>(step), static_cast<long long>(total_));
  std::fflush(out_);
}

bool ProgressBar::due(int64_t step) const {
  return interactive_ &&
         (step >= total_ || std::chrono::steady_clock::now() - last_draw_ >= std::chrono::milliseconds(50));
}

void ProgressBar::update(int64_t step, const Metrics& metrics) {
  if (!due(step)) return;
  const auto now = std::chrono::steady_clock::now();
  last_draw_ = now;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double per_step = step > first_ ? elapsed / static_cast<double>(step - first_) : 0.0;
  std::fprintf(out_, "\r%s\033[K", format_line(step, total_, elapsed, per_step, false, metrics).c_str());
  std::fflush(out_);
}

void ProgressBar::finish(int64_t steps_done, double train_seconds, const Metrics& metrics) {
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double per_step = steps_done > first_ ? train_seconds / static_cast<double>(steps_done - first_) : 0.0;
  const std::string line = format_line(steps_done, total_, elapsed, per_step, true, metrics);
  if (interactive_)
    std::fprintf(out_, "\r%s\033[K\n", line.c_str());
  else
    std::fprintf(out_, "%s\n", line.c_str());
  std::fflush(out_);
}

}  // namespace ember
