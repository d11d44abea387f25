// How many cores other processes leave free: what set_num_threads(kFreeCores) runs on.
#pragma once

#include <string_view>

namespace ember::detail {

// The cores this process may use (omp_get_num_procs) minus the runnable tasks of other processes
// now: /proc/stat's procs_running minus this process's threads in state R (/proc/self/task/*/stat),
// scaled by the share of the machine's online CPUs this process may use (the system's count covers
// them all), the median of `samples` readings half a millisecond apart; at least 1. All cores where
// /proc cannot be read.
int free_cores(int samples);
// The arithmetic alone: cores - (running - ours) * cores / online (rounded to nearest), clamped to
// [1, cores].
int free_cores_from(int cores, int running, int ours, int online);
// procs_running from /proc/stat's text; -1 when it has none.
int procs_running_of(std::string_view proc_stat);

}  // namespace ember::detail
