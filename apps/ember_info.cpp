// ember_info: what Ember sees on this machine: devices, library versions (compiled against and
// loaded), CPU threads. --doctor explains what is wrong and what to do; --version prints the
// Ember version.
#include <cstdio>
#include <cstdlib>

#include "apps/cli.h"
#include "ember.h"

namespace {

void print_info() {
  using namespace ember;
  std::printf("Ember %s\n\nDevices:\n", ember::version());
  std::printf("  cpu       %d OpenMP thread%s\n", num_threads(), num_threads() == 1 ? "" : "s");
  const CudaStatus& st = cuda_status();
  for (const GpuInfo& g : st.gpus)
    std::printf("  cuda:%-4d %s, compute capability %d.%d, %.1f GiB, %d SMs\n", g.index, g.name.c_str(), g.cc_major,
                g.cc_minor, static_cast<double>(g.total_memory) / (1 << 30), g.multiprocessors);
  if (!st.usable) std::printf("  (no GPU: %s)\n", st.reason.c_str());
  std::printf("\nLibraries:            compiled   loaded\n");
  for (const LibraryVersion& l : library_versions())
    std::printf("  %-18s  %-9s  %s\n", l.name.c_str(), l.compiled.empty() ? "-" : l.compiled.c_str(),
                l.loaded.empty() ? "?" : l.loaded.c_str());
}

// Returns the number of problems found.
int doctor() {
  using namespace ember;
  int problems = 0;
  const CudaStatus& st = cuda_status();
  std::printf("Ember doctor\n");
  if (!st.built) {
    std::printf(
        "- This build has no CUDA backend. To train on a GPU, install the CUDA toolkit with cuBLAS and\n"
        "  cuDNN and rebuild with -DEMBER_CUDA=ON (CPU training works as it is).\n");
    return 0;
  }
  auto major_of = [](const std::string& v) { return v.substr(0, v.find('.')); };
  auto minor_of = [](const std::string& v) {  // "9.19.0" -> 19; -1 when there is none
    const size_t a = v.find('.');
    return a == std::string::npos ? -1 : std::atoi(v.c_str() + a + 1);
  };
  for (const LibraryVersion& l : library_versions()) {
    if (l.name == "CUDA driver" || l.compiled.empty()) continue;
    if (l.loaded.empty() || l.loaded == "?") {
      std::printf("- %s: could not be queried; is the library on LD_LIBRARY_PATH?\n", l.name.c_str());
      ++problems;
    } else if (major_of(l.compiled) != major_of(l.loaded)) {
      std::printf(
          "- %s: compiled against %s but %s is loaded. Major versions must match: point\n"
          "  LD_LIBRARY_PATH at a %s.x installation or rebuild Ember against %s.\n",
          l.name.c_str(), l.compiled.c_str(), l.loaded.c_str(), major_of(l.compiled).c_str(), l.loaded.c_str());
      ++problems;
    } else if (minor_of(l.loaded) < minor_of(l.compiled)) {
      // Same major: newer libraries run older builds, the reverse is not promised.
      std::printf(
          "- %s: compiled against %s but the older %s is loaded. It may work (Ember uses\n"
          "  long-standing entry points) but is not promised: prefer a %s or newer library.\n",
          l.name.c_str(), l.compiled.c_str(), l.loaded.c_str(), l.compiled.c_str());
    }
  }
  if (!st.usable) {
    std::printf("- No usable GPU: %s.\n", st.reason.c_str());
    if (st.driver_version == 0)
      std::printf("  Install the NVIDIA driver (nvidia-smi must work) or run with --device cpu.\n");
    else if (st.driver_version < st.runtime_version)
      std::printf("  Update the NVIDIA driver to one that supports CUDA %d.%d, or rebuild with an older toolkit.\n",
                  st.runtime_version / 1000, st.runtime_version % 1000 / 10);
    ++problems;
  }
  if (problems == 0) std::printf("- No problems found: %d GPU(s) usable.\n", st.device_count);
  return problems;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Show the devices and library versions Ember sees.", "ember_info"};
  ember::apps::set_up_help(app,
                           "  0  success (with --doctor: no problems found)\n"
                           "  1  --doctor found a problem\n"
                           "  2  bad command line");
  bool version = false, run_doctor = false;
  app.add_flag("--version", version, "Print the Ember version and exit");
  app.add_flag("--doctor", run_doctor, "Diagnose GPU set-up problems and say what to do (exit 1 if any)");
  if (const int code = ember::apps::parse_command_line(app, argc, argv); code >= 0) return code;
  if (version) {
    std::printf("Ember %s\n", ember::version());
    return 0;
  }
  if (run_doctor) return doctor() == 0 ? 0 : 1;
  print_info();
  return 0;
}
