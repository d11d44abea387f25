// Device resolution (soft placement), CPU threads and flush-to-zero.
#include "runtime.h"

#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <pmmintrin.h>
#include <xmmintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>

#include "cpu/cpu_load.h"
#include "cpu/host_allocator.h"
#include "cuda_module.h"
#include "error.h"
#include "logger.h"

namespace ember {

bool cuda_available() { return cuda_status().usable; }

std::vector<LibraryVersion> library_versions() {
  const dnnl_version_t* v = dnnl_version();
  const std::string loaded = std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
  const std::string compiled = std::to_string(DNNL_VERSION_MAJOR) + "." + std::to_string(DNNL_VERSION_MINOR) + "." +
                               std::to_string(DNNL_VERSION_PATCH);
  std::vector<LibraryVersion> out{{"oneDNN", compiled, loaded}};
  for (auto& l : cuda_library_versions()) out.push_back(std::move(l));
  return out;
}

Device resolve_device(Device requested, bool strict) {
  if (requested.is_cpu()) return requested;
  const CudaStatus& st = cuda_status();
  std::string why;
  if (!st.usable) {
    why = st.reason;
  } else if (std::none_of(st.gpus.begin(), st.gpus.end(),
                          [&](const GpuInfo& g) { return g.index == requested.index; })) {
    why = "there is no usable " + requested.str() + " (this machine has " + std::to_string(st.device_count) +
          " usable GPU" + (st.device_count == 1 ? "" : "s") + ")";
  } else {
    // Opened here, so that a GPU another process holds (exclusive mode) or one this build has no
    // code for falls back (or fails, strict) now, not at the first op.
    try {
      detail::require_cuda_module([&] { return "place on " + requested.str(); }).open(requested.index);
      return requested;
    } catch (const DeviceError& e) {
      why = e.what();
    }
  }
  if (strict) throw DeviceError("cannot place on " + requested.str() + ": " + why);
  detail::logger().warn(
      "{} requested but {}; running on cpu (soft placement; strict placement makes this an error: --strict-placement "
      "in the apps)",
      requested.str(), why);
  return Device::cpu();
}

// core/device.h; here, next to the soft placement it applies.
DeviceScope::DeviceScope(Device device, bool strict)
    : device_(resolve_device(device, strict)), previous_(detail::exchange_current_device(device_)) {}

void set_gpu_memory_policy(int device, const MemoryPolicy& policy) {
  detail::require_cuda_module([&] {
    return "cannot set the memory policy of cuda:" + std::to_string(device);
  }).set_memory_policy(device, policy);
}

void set_gpu_memory_fraction(int device, double fraction) {
  const CudaStatus& st = cuda_status();
  for (const GpuInfo& g : st.gpus)
    if (g.index == device) return set_gpu_memory_policy(device, MemoryPolicy::fraction(fraction, g.total_memory));
  throw DeviceError("there is no usable cuda:" + std::to_string(device) + (st.usable ? "" : ": " + st.reason));
}

HostMemoryStats host_memory_stats() {
  const cpu::HostMemoryCounts c = cpu::host_memory_counts();
  return {.in_use = c.in_use, .peak_in_use = c.peak_in_use};
}

void reset_host_memory_peak() { cpu::reset_host_memory_peak(); }

CachingAllocator::Stats gpu_memory_stats(int device) {
  return detail::require_cuda_module([&] { return "no memory statistics for cuda:" + std::to_string(device); })
      .memory_stats(device);
}

namespace {
std::atomic<bool> g_allow_tf32{true};  // as TensorFlow on Ampere and newer
std::atomic<bool> g_gpu_deterministic{false};
std::atomic<bool> g_cudnn_find{false};
std::atomic<bool> g_fused_conv{false};
std::atomic<bool> g_gpu_nhwc{false};
std::atomic<bool> g_fused_dense{false};
std::atomic<bool> g_fused_loss{false};
std::atomic<bool> g_fused_advance{false};
std::atomic<ConvAlgorithms> g_conv_algorithms{ConvAlgorithms::Fast};
}  // namespace

void synchronize(Device device) {
  if (device.is_cpu()) return;
  detail::require_cuda_module([&] { return "synchronize " + device.str(); }).synchronize(device.index);
}

int64_t gpu_host_syncs(Device device) {
  if (device.is_cpu()) return 0;
  return detail::require_cuda_module([&] { return "host syncs of " + device.str(); }).host_syncs(device.index);
}

namespace {
std::atomic<uint64_t> g_kernel_settings_version{0};
// Sets `setting` and counts a change (a setting set to what it was changes nothing).
template <typename T>
void set_kernel_setting(std::atomic<T>& setting, T value) {
  if (setting.exchange(value) != value) g_kernel_settings_version.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

void set_allow_tf32(bool on) { set_kernel_setting(g_allow_tf32, on); }
bool allow_tf32() { return g_allow_tf32; }
void set_gpu_deterministic(bool on) { set_kernel_setting(g_gpu_deterministic, on); }
bool gpu_deterministic() { return g_gpu_deterministic; }
void set_cudnn_find(bool on) { set_kernel_setting(g_cudnn_find, on); }
bool cudnn_find() { return g_cudnn_find; }
void set_fused_conv(bool on) { set_kernel_setting(g_fused_conv, on); }
bool fused_conv() { return g_fused_conv; }
void set_gpu_nhwc(bool on) { set_kernel_setting(g_gpu_nhwc, on); }
bool gpu_nhwc() { return g_gpu_nhwc; }
void set_fused_dense(bool on) { set_kernel_setting(g_fused_dense, on); }
bool fused_dense() { return g_fused_dense; }
void set_fused_loss(bool on) { set_kernel_setting(g_fused_loss, on); }
bool fused_loss() { return g_fused_loss; }
void set_fused_advance(bool on) { set_kernel_setting(g_fused_advance, on); }
bool fused_advance() { return g_fused_advance; }
void set_conv_algorithms(ConvAlgorithms policy) { set_kernel_setting(g_conv_algorithms, policy); }
ConvAlgorithms conv_algorithms() { return g_conv_algorithms; }
uint64_t kernel_settings_version() { return g_kernel_settings_version.load(std::memory_order_relaxed); }
const char* to_string(ConvAlgorithms policy) { return policy == ConvAlgorithms::Exact ? "exact" : "fast"; }
ConvAlgorithms parse_conv_algorithms(const std::string& name) {
  if (name == "fast") return ConvAlgorithms::Fast;
  if (name == "exact") return ConvAlgorithms::Exact;
  throw ArgumentError("convolution algorithms must be fast or exact, got '" + name + "'");
}

namespace {
std::atomic<Precision> g_precision{Precision::Float32};
// A model call's precision on this thread: -1 none (the process's), else the Precision's value.
thread_local int t_precision = -1;
}  // namespace

void set_precision(Precision policy) { set_kernel_setting(g_precision, policy); }
Precision precision() { return g_precision; }
const char* to_string(Precision policy) { return policy == Precision::MixedBFloat16 ? "mixed_bf16" : "fp32"; }
Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::Float32;
  if (name == "mixed_bf16") return Precision::MixedBFloat16;
  throw ArgumentError("precision must be fp32 or mixed_bf16, got '" + name + "'");
}

const CpuBf16& cpu_bf16() {
  static const CpuBf16 probe = [] {
    CpuBf16 r;
    const unsigned isa = static_cast<unsigned>(dnnl_get_effective_cpu_isa());
    const auto has = [isa](dnnl_cpu_isa_t want) {
      return (isa & static_cast<unsigned>(want)) == static_cast<unsigned>(want);
    };
    if (has(dnnl_cpu_isa_avx512_core_amx)) {
      r = {true, true, "AMX-BF16"};
    } else if (has(dnnl_cpu_isa_avx512_core_bf16)) {
      r = {true, false, "AVX512-BF16"};
    } else {
      const char* name = has(dnnl_cpu_isa_avx512_core) ? "avx512_core" : has(dnnl_cpu_isa_avx2) ? "avx2" : "below avx2";
      r = {false, false, std::string("no AVX512-BF16 (oneDNN's ISA here: ") + name + ")"};
    }
    return r;
  }();
  return probe;
}

namespace {
// Why cuda:index cannot run the bf16 path ("" when it can).
std::string gpu_bf16_missing(int index) {
  const CudaStatus& st = cuda_status();
  if (!st.usable) return "no usable GPU (" + st.reason + ")";
  for (const GpuInfo& g : st.gpus)
    if (g.index == index)
      return g.cc_major >= 8 ? std::string()
                             : "cuda:" + std::to_string(index) + " is sm_" + std::to_string(g.cc_major) +
                                   std::to_string(g.cc_minor) +
                                   ", without bf16 tensor cores (compute capability 8.0 or later has them)";
  return "no GPU cuda:" + std::to_string(index);
}
}  // namespace

Precision resolve_precision(Precision requested, Device device, bool strict) {
  if (requested == Precision::Float32) return requested;
  std::string why;
  if (device.is_cuda())
    why = gpu_bf16_missing(device.index);
  else if (!cpu_bf16().available)
    why = "this CPU has " + cpu_bf16().isa;
  if (why.empty()) return requested;
  if (strict) throw DeviceError(std::string("cannot run ") + to_string(requested) + " on " + device.str() + ": " + why);
  detail::logger().warn(
      "{} requested on {} but {}; running fp32 (strict placement makes this an error: --strict-placement in the apps)",
      to_string(requested), device.str(), why);
  return Precision::Float32;
}

namespace detail {
Precision cpu_precision() {
  const Precision p = t_precision >= 0 ? static_cast<Precision>(t_precision) : g_precision.load();
  if (p == Precision::Float32 || cpu_bf16().available) return p;
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true)) logger().warn("mixed_bf16 requested but this CPU has {}; running fp32", cpu_bf16().isa);
  return Precision::Float32;
}

Precision gpu_precision(int device) {
  const Precision p = t_precision >= 0 ? static_cast<Precision>(t_precision) : g_precision.load();
  if (p == Precision::Float32) return p;
  // Asked per op call: the answer for a device is fixed once cuda_status() has probed.
  static std::atomic<uint64_t> unable{0}, known{0};  // bit d: cuda:d (d < 64) lacks bf16 / was checked
  const uint64_t bit = device >= 0 && device < 64 ? uint64_t{1} << device : 0;
  if (bit && (known.load(std::memory_order_acquire) & bit))
    return unable.load(std::memory_order_relaxed) & bit ? Precision::Float32 : p;
  const std::string why = gpu_bf16_missing(device);
  if (bit) {
    if (!why.empty()) unable.fetch_or(bit);
    known.fetch_or(bit);
  }
  if (why.empty()) return p;
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true)) logger().warn("mixed_bf16 requested but {}; the GPU runs fp32", why);
  return Precision::Float32;
}

PrecisionScope::PrecisionScope(std::optional<Precision> p) : saved_(t_precision) {
  if (p) t_precision = static_cast<int>(*p);
}
PrecisionScope::~PrecisionScope() { t_precision = saved_; }
}  // namespace detail

namespace {
std::atomic<int> g_process_threads{0};            // set_num_threads' value, resolved (kFreeCores kept); 0: never set
std::atomic<int> g_free_cores{0};                 // the last free_cores() count
std::atomic<int64_t> g_free_cores_at{0};          // when it was taken (steady clock, ns; 0: never)
constexpr int64_t kFreeCoresFor = 2'000'000'000;  // ns a count serves a call that does not ask afresh

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

void set_num_threads(int n) {
  if (n < 0 && n != kFreeCores)
    throw ArgumentError("thread count must be >= 0 or kFreeCores (-1), got " + std::to_string(n));
  const int resolved = n == 0 ? omp_get_num_procs() : n;
  g_process_threads.store(resolved, std::memory_order_relaxed);
  omp_set_num_threads(detail::resolve_threads(resolved, true));
}

int num_threads() {
  const int n = g_process_threads.load(std::memory_order_relaxed);
  return n == kFreeCores ? detail::resolve_threads(n, false) : n > 0 ? n : omp_get_max_threads();
}

namespace detail {
int process_threads() { return g_process_threads.load(std::memory_order_relaxed); }

namespace {
// The model calls open on this thread (ThreadScope), and the count the outermost set: a call inside
// another (fit's steps and validation) keeps that count, so a fit never changes it midway.
thread_local int t_scope_depth = 0;
thread_local int t_outer_threads = 0;
}  // namespace

int resolve_threads(int setting, bool fresh) {
  if (setting != kFreeCores) return setting;
  if (t_scope_depth > 0 && t_outer_threads > 0) return t_outer_threads;
  const int64_t now = now_ns(), at = g_free_cores_at.load(std::memory_order_relaxed);
  if (fresh || at == 0 || now - at > kFreeCoresFor) {
    g_free_cores.store(free_cores(fresh ? 5 : 3), std::memory_order_relaxed);
    g_free_cores_at.store(now, std::memory_order_relaxed);
  }
  return g_free_cores.load(std::memory_order_relaxed);
}

ThreadScope::ThreadScope(int n) {
  if (t_scope_depth++ == 0) t_outer_threads = n;
  if (n <= 0 || omp_in_parallel()) return;
  const int current = omp_get_max_threads();
  if (current == n) return;
  saved_ = current;
  omp_set_num_threads(n);
}

ThreadScope::~ThreadScope() {
  --t_scope_depth;
  if (saved_ > 0) omp_set_num_threads(saved_);
}
}  // namespace detail

void enable_flush_to_zero() {
#pragma omp parallel
  {
    _MM_SET_FLUSH_ZERO_MODE(_MM_FLUSH_ZERO_ON);
    _MM_SET_DENORMALS_ZERO_MODE(_MM_DENORMALS_ZERO_ON);
  }
  _MM_SET_FLUSH_ZERO_MODE(_MM_FLUSH_ZERO_ON);
  _MM_SET_DENORMALS_ZERO_MODE(_MM_DENORMALS_ZERO_ON);
}

const char* version() { return EMBER_VERSION; }

}  // namespace ember
