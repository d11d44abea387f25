// Finding and loading libember_cuda (see cuda_module.h): first next to libember itself (found
// with dladdr), then through the normal library search path.
#include "cuda_module.h"

#include <dlfcn.h>

#include <filesystem>

#include "error.h"

namespace ember::detail {

namespace {
struct Loaded {
  const CudaModuleApi* api = nullptr;
  bool ok = false;
  std::string why;
};

Loaded load() {
  Loaded l;
#ifndef EMBER_CUDA_MODULE
  l.why = "this Ember build has no CUDA backend (configured with EMBER_CUDA=OFF or no CUDA toolkit found)";
  return l;
#else
  const std::string file = EMBER_CUDA_MODULE;  // e.g. "libember_cuda.so.0"
  std::vector<std::string> candidates;
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cuda_module), &info) && info.dli_fname)
    candidates.push_back((std::filesystem::path(info.dli_fname).parent_path() / file).string());
  candidates.push_back(file);
  std::string errors;
  for (const auto& c : candidates) {
    void* h = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* e = dlerror();
      errors += std::string(errors.empty() ? "" : "; ") + (e ? e : c);
      continue;
    }
    const auto entry = reinterpret_cast<const CudaModuleApi* (*)()>(dlsym(h, "ember_cuda_api_v1"));
    const CudaModuleApi* api = entry ? entry() : nullptr;
    if (api && api->abi == kCudaModuleAbi) {
      l.api = api;
      l.ok = true;  // the module stays loaded for the life of the process
      return l;
    }
    if (api)
      errors += "; " + c + " has table version " + std::to_string(api->abi) + ", this libember needs " +
                std::to_string(kCudaModuleAbi) + " (a module from another Ember build)";
    else
      errors += "; " + c + " lacks the entry point ember_cuda_api_v1 (a mismatched Ember version?)";
    dlclose(h);
  }
  l.why = "the CUDA backend module could not be loaded (" + errors + ")";
  return l;
#endif
}
}  // namespace

const CudaModuleApi* cuda_module(std::string* why) {
  static const Loaded loaded = load();
  if (!loaded.ok) {
    if (why) *why = loaded.why;
    return nullptr;
  }
  return loaded.api;
}

const CudaModuleApi& require_cuda_module(const std::string& what) {
  std::string why;
  const CudaModuleApi* api = cuda_module(&why);
  if (!api) throw DeviceError(what + ": " + why);
  return *api;
}

const CudaModuleApi& require_cuda_module(const char* what) {
  if (const CudaModuleApi* api = cuda_module(nullptr)) return *api;
  return require_cuda_module(std::string(what));
}

}  // namespace ember::detail

namespace ember {

const CudaStatus& cuda_status() {
  static const CudaStatus status = [] {
    std::string why;
    if (const detail::CudaModuleApi* m = detail::cuda_module(&why)) return *m->status();
    CudaStatus s;
#ifdef EMBER_CUDA_MODULE
    s.built = true;
#endif
    s.reason = why;
    return s;
  }();
  return status;
}

std::vector<LibraryVersion> cuda_library_versions() {
  std::vector<LibraryVersion> out;
  if (const detail::CudaModuleApi* m = detail::cuda_module(nullptr)) m->versions(&out);
  return out;
}

}  // namespace ember
