// The apps' OpenMP wait: how long a thread that waits at a parallel region's barrier spins before
// it sleeps. libgomp reads it once, from GOMP_SPINCOUNT (or OMP_WAIT_POLICY), when the program
// loads, before main: so an app that finds neither set (nor a thread binding: OMP_PROC_BIND,
// OMP_PLACES, GOMP_CPU_AFFINITY) sets GOMP_SPINCOUNT and starts itself again (the same process
// id, arguments and environment otherwise). The measurements behind the value
// are in docs/benchmarks.md ("A shared machine"); docs/usage.md ("Threads") says how a program of
// your own gets the same.
#pragma once

#include <unistd.h>

#include <climits>
#include <cstdlib>

namespace ember::apps {

// libgomp's spin count for the apps: about 0.1 ms by libgomp's own estimate (100,000 spins per
// ms), against its default of 300,000 (about 3 ms). Long enough to cover the waits inside a
// training step on a quiet machine; short enough that a thread waiting for one that the OS has
// parked gives its core back to the other process's threads instead of spinning its slice away.
inline constexpr const char* kOpenmpSpinCount = "10000";

// Called first in main (before any thread or file is opened): unless GOMP_SPINCOUNT or
// OMP_WAIT_POLICY is set, sets GOMP_SPINCOUNT to kOpenmpSpinCount and runs this program again
// with the same arguments (its file, as /proc/self/exe names it: a symlink's target). Returns
// only where it did not: a setting was there; OMP_PROC_BIND, OMP_PLACES or GOMP_CPU_AFFINITY is
// set (libgomp has then bound this thread to its first place before main, and the program started
// again would inherit that one place as all it may use); or the exec failed (then the program
// carries on with libgomp's default and the variable unset). Setting GOMP_SPINCOUNT (300000 is
// libgomp's default) keeps the program to one start, as a debugger or valgrind expects.
inline void restart_with_bounded_openmp_spin(char** argv) {
  for (const char* name : {"GOMP_SPINCOUNT", "OMP_WAIT_POLICY", "OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY"})
    if (std::getenv(name)) return;
  char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof path);
  if (n <= 0 || n >= static_cast<ssize_t>(sizeof path)) return;  // none, or cut short
  path[n] = '\0';
  if (setenv("GOMP_SPINCOUNT", kOpenmpSpinCount, 1) != 0) return;
  // The file's path rather than /proc/self/exe: a process's name (ps, top, /proc/PID/comm) is the
  // basename of the path it was started from.
  execv(path, argv);
  unsetenv("GOMP_SPINCOUNT");
}

}  // namespace ember::apps
