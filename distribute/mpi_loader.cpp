// make_mpi_communicator (see mpi_communicator.h): loads libember_mpi on first use, first next to
// libember (found with dladdr), then through the normal library search path, as the CUDA module.
#include <dlfcn.h>

#include <filesystem>
#include <vector>

#include "mpi_communicator.h"

namespace ember::detail {

namespace {
using Factory = Communicator* (*)(int64_t timeout_ms);

struct Loaded {
  Factory make = nullptr;
  std::string why;
};

Loaded load() {
  Loaded l;
#ifndef EMBER_MPI_MODULE
  l.why =
      "this Ember build has no MPI (configured with EMBER_MPI=OFF or MPI not found): --strategy multiworker needs it";
  return l;
#else
  const std::string file = EMBER_MPI_MODULE;  // e.g. "libember_mpi.so.0"
  std::vector<std::string> candidates;
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&make_mpi_communicator), &info) && info.dli_fname)
    candidates.push_back((std::filesystem::path(info.dli_fname).parent_path() / file).string());
  candidates.push_back(file);
  std::string errors;
  for (const auto& c : candidates) {
    // RTLD_GLOBAL: Open MPI's own plugins, loaded later by libmpi, resolve against its symbols.
    void* h = dlopen(c.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
      const char* e = dlerror();
      errors += std::string(errors.empty() ? "" : "; ") + (e ? e : c);
      continue;
    }
    const auto abi = reinterpret_cast<uint32_t (*)()>(dlsym(h, "ember_mpi_abi_v1"));
    const auto version = reinterpret_cast<const char* (*)()>(dlsym(h, "ember_mpi_version_v1"));
    const auto make = reinterpret_cast<Factory>(dlsym(h, "ember_mpi_communicator_v1"));
    // The module uses libember's types beyond the communicator: the same Ember version only.
    if (abi && version && make && abi() == kMpiModuleAbi && std::string(version()) == EMBER_VERSION) {
      l.make = make;  // the module stays loaded for the life of the process
      return l;
    }
    errors += std::string(errors.empty() ? "" : "; ") + c +
              (abi && version
                   ? " is from Ember " + std::string(version()) + " (interface " + std::to_string(abi()) +
                         "), this libember is " + EMBER_VERSION + " (interface " + std::to_string(kMpiModuleAbi) + ")"
                   : std::string(" lacks the entry points (a mismatched Ember version?)"));
    dlclose(h);
  }
  l.why = "the MPI module could not be loaded (" + errors + "): --strategy multiworker needs it and Open MPI";
  return l;
#endif
}
}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(std::chrono::milliseconds timeout) {
  static const Loaded loaded = load();
  if (!loaded.make) throw DeviceError(loaded.why);
  return std::unique_ptr<Communicator>(loaded.make(static_cast<int64_t>(timeout.count())));
}

}  // namespace ember::detail
