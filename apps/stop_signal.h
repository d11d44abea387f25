// The apps' stop on SIGINT/SIGTERM: the first signal asks the run to stop after the current step
// (the app then saves what it has and says where); a second one exits at once. Only
// async-signal-safe calls in the handler.
#pragma once

#include <unistd.h>

#include <atomic>
#include <csignal>

namespace ember::apps {

// Lock-free, so safe to touch in the handler; read by any thread (the signal may land on one of
// OpenMP's).
inline std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);
inline const char* g_second_signal_note = "\nsecond signal: exiting at once, nothing saved\n";
inline size_t g_second_signal_note_size = 0;

inline void on_stop_signal(int sig) {
  if (g_stop_signal != 0) {
    [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, g_second_signal_note, g_second_signal_note_size);
    ::_exit(128 + sig);
  }
  g_stop_signal = sig;
}

// `second_note`: the line a second signal prints (a string literal: it must outlive the process).
template <size_t N>
void install_stop_handlers(const char (&second_note)[N]) {
  g_second_signal_note = second_note;
  g_second_signal_note_size = N - 1;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaddset(&sa.sa_mask, SIGINT);  // one handler at a time: a SIGTERM waits for a SIGINT's
  sigaddset(&sa.sa_mask, SIGTERM);
  sa.sa_flags = SA_RESTART;  // the libraries' blocking calls (MPI, file I/O) carry on
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

inline const char* signal_name(int sig) { return sig == SIGTERM ? "SIGTERM" : "SIGINT"; }

}  // namespace ember::apps
