/// @file
/// What this process can run on, decided at run time: a build with CUDA must still run, and say
/// why, on a machine with no driver or no GPU. Also the CPU threading and floating-point setup.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "caching_allocator.h"
#include "device.h"

namespace ember {

/// One GPU as the CUDA runtime describes it.
struct GpuInfo {
  int index = 0;     ///< the CUDA device index
  std::string name;  ///< the device's name ("NVIDIA H100 ...")
  /// The compute capability, major and minor (8.0 for an A100).
  ///@{
  int cc_major = 0, cc_minor = 0;
  ///@}
  size_t total_memory = 0;  ///< bytes of device memory
  int multiprocessors = 0;  ///< streaming multiprocessors
};

/// Whether this process can run on CUDA, and why not (cuda_status()).
struct CudaStatus {
  bool built = false;         ///< Ember was compiled with the CUDA backend
  bool usable = false;        ///< a driver and at least one GPU the build has code for
  std::string reason;         ///< why not usable, in words ("no CUDA driver: ...")
  int device_count = 0;       ///< GPUs the driver reports
  int driver_version = 0;     ///< e.g. 13000 (0 when no driver)
  int runtime_version = 0;    ///< the CUDA runtime loaded
  std::vector<GpuInfo> gpus;  ///< each GPU the driver reports
};

/// Probes once and caches the answer; never throws.
const CudaStatus& cuda_status();
bool cuda_available();  ///< cuda_status().usable

/// Ember's own version ("0.1.0"), as built.
const char* version();

/// A library Ember uses, with the version it was compiled against and the one loaded now.
struct LibraryVersion {
  std::string name;      ///< "oneDNN", "cuDNN", ...
  std::string compiled;  ///< "" when not compiled in
  std::string loaded;    ///< "" when it could not be queried
};
/// oneDNN, then (CUDA builds) CUDA driver, CUDA runtime, cuBLAS, cuDNN, NCCL. Never throws.
std::vector<LibraryVersion> library_versions();
std::vector<LibraryVersion> cuda_library_versions();  ///< the CUDA part ({} without CUDA)

/// Resolves a requested device under soft placement: a CUDA device that is missing becomes CPU
/// with one warning saying why; with `strict`, it throws DeviceError instead.
Device resolve_device(Device requested, bool strict);

/// GPU memory, TensorFlow's two policies: grow on demand (default) or a cap. Set before the
/// first tensor on that GPU. Throws DeviceError without a usable GPU.
void set_gpu_memory_policy(int device, const MemoryPolicy& policy);
void set_gpu_memory_fraction(int device, double fraction);  ///< a cap of fraction * the card's memory
/// The caching allocator's statistics for GPU `device`; DeviceError without a usable GPU.
CachingAllocator::Stats gpu_memory_stats(int device);

/// Host memory held by tensors (the CPU's side of gpu_memory_stats; TensorFlow's
/// get_memory_info("CPU:0")): bytes of tensor storage in use now, and the most in use since the
/// last reset_host_memory_peak() (or the process start). Never throws.
struct HostMemoryStats {
  /// Bytes of tensor storage in use now, and the most in use since the last reset.
  ///@{
  size_t in_use = 0, peak_in_use = 0;
  ///@}
};
HostMemoryStats host_memory_stats();  ///< The host memory held by tensors now (see HostMemoryStats).
void reset_host_memory_peak();        ///< the peak becomes what is in use now

/// Waits until all work queued on `device` is done (a no-op for the CPU), and reports an
/// asynchronous GPU error: what a timing must call before it stops the clock.
void synchronize(Device device);

/// How many times the host has waited for the GPU `device` so far in this process: every
/// synchronize() and every copy that involves host memory (reading a loss, uploading data).
/// The training step makes none: `fit` waits only where it reads its totals (progress, epoch
/// end). 0 for the CPU; DeviceError without a usable GPU.
int64_t gpu_host_syncs(Device device);

/// @name GPU math
/// Read by the GPU ops when they pick a kernel (set them before training).
/// @{

/// TF32 (on by default, as TensorFlow does): lets cuBLAS GEMMs and cuDNN convolutions on
/// Ampere and newer round their inputs to TF32 on tensor cores (~10-bit mantissa, ~1e-3
/// relative; several times the FP32 throughput; no effect on older GPUs). Turn it off to
/// compare with the CPU path to ~1e-6 (every parity test does), or for FP32 benchmarks.
void set_allow_tf32(bool on);
bool allow_tf32();  ///< Whether TF32 is allowed (set_allow_tf32).
/// Deterministic (off by default): cuDNN backward algorithms that give the same bits run to
/// run (the default ones may sum with atomics in any order).
void set_gpu_deterministic(bool on);
bool gpu_deterministic();  ///< Whether only deterministic cuDNN algorithms run (set_gpu_deterministic).
/// cuDNN find (off by default, as PyTorch's cudnn.benchmark): the first use of each
/// convolution shape times every algorithm (cudnnFind*, a few ms and a host wait once per
/// shape) instead of taking cuDNN's heuristic guess; the same selection rules apply.
void set_cudnn_find(bool on);
bool cudnn_find();  ///< Whether convolution algorithms are timed (set_cudnn_find).
/// Fused convolutions (off by default until verified on a GPU): Conv2D's forward as one cuDNN
/// call (cudnnConvolutionBiasActivationForward: convolution, bias and ReLU) instead of three
/// launches; it uses the IMPLICIT_PRECOMP_GEMM algorithm, the only one cuDNN fuses ReLU with.
void set_fused_conv(bool on);
bool fused_conv();  ///< Whether Conv2D's GPU forward is one fused cuDNN call (set_fused_conv).
/// NHWC activations (off by default): Conv2D keeps its activations channels-last on the GPU,
/// the layout cuDNN's tensor-core kernels prefer (the filters go to cuDNN as a KRSC copy), and
/// the layers after it (pools, BatchNormalization, activations) keep the layout they are given;
/// Flatten converts back to the public order. Convolutions with asymmetric SAME padding stay
/// NCHW. Measured on an H200 with cuDNN 9.19, FP32 (TF32 allowed) NHWC took the reference CNN's
/// step from 0.52 to 19.3 ms: the algorithms cuDNN offers Ember's rules there are slow, so keep
/// FP32 NCHW; whether NHWC beats NCHW under mixed_bf16 has not been measured yet.
void set_gpu_nhwc(bool on);
bool gpu_nhwc();  ///< Whether GPU activations are kept channels-last (set_gpu_nhwc).
/// Fused dense, one of the "fewer launches" switches (each off by default until a GPU has shown
/// it equal to the path it replaces; docs/plans/gpu-fewer-launches.md): Dense's forward as one
/// cuBLASLt call with the bias (+ ReLU) epilogue instead of a GEMM and a bias kernel, and its
/// weight gradient with the bias-gradient epilogue instead of a GEMM and a column-sum kernel,
/// where cuBLASLt offers them (else the unfused calls, for good, with a warning); not bit-equal
/// to the unfused path (cuBLASLt may order the sums otherwise), within the parity tests'
/// tolerances of it.
void set_fused_dense(bool on);
bool fused_dense();  ///< Whether Dense runs fused cuBLASLt calls on a GPU (set_fused_dense).
/// Fused loss (a "fewer launches" switch, see set_fused_dense): SparseCategoricalCrossentropy's
/// training step (softmax, the loss and hit sums, the gradient) as one single-block kernel for
/// batches of up to 4096 rows instead of three launches; the same bits as the three kernels (same
/// row order, same sums, same tree).
void set_fused_loss(bool on);
bool fused_loss();  ///< Whether the fused loss kernel runs on a GPU (set_fused_loss).
/// Fused advance (a "fewer launches" switch, see set_fused_dense): the one-thread kernels that
/// advance a device-side counter (the data loader's cursor, Adam's step and step size, each
/// Dropout layer's counter) folded into the kernel that reads the counter, whose last block
/// advances it; the same bits.
void set_fused_advance(bool on);
bool fused_advance();  ///< Whether device-side counters advance inside their readers (set_fused_advance).
/// @}

/// Convolution algorithms on both backends (as PyTorch's torch.backends.cudnn.deterministic or
/// TensorFlow's op determinism), read when a convolution shape's plan is made and by Model on
/// every CPU training batch (Exact's slices): set it before training, never during a step. Under both, structural zeros
/// are exact (an output whose inputs are all zero equals what the direct sum gives, so ReLU and max-pool decide on
/// exact values).
///  - Fast (default): the fastest algorithm Ember has for the shape. On the CPU, Ember's own
///    Winograd F(4x4, 3x3) for 3x3 stride-1 convolutions where it fits (AVX-512), which masks
///    structural zeros; on the GPU, cuDNN's fastest algorithm among the direct / GEMM / implicit
///    GEMM ones (its Winograd and FFT algorithms are never chosen: their transforms turn structural
///    zeros into rounding residue, and Ember cannot mask them inside cuDNN).
///  - Exact: direct sums only. On the CPU, oneDNN's direct kernels and Ember's direct weight
///    gradient, and a CPU training batch in 16-row slices (Model::kExactSliceRows: every
///    kernel sees the same shapes however the batch is split among replicas; under both policies
///    the weight gradients sum the batch in 16-row groups as a pairwise tree, core/pairwise_sum.h,
///    so that aligned data-parallel replicas equal one model bit for bit); on
///    the GPU, as Fast but deterministic algorithms only (no atomics), as set_gpu_deterministic.
///    Exact does not turn TF32 off (set_allow_tf32(false); train_mnist does with exact). What this
///    buys, measured, is in docs/architecture.md ("Numerics").
enum class ConvAlgorithms { Fast, Exact };
/// Sets the convolution policy (see ConvAlgorithms); before training, never during a step.
void set_conv_algorithms(ConvAlgorithms policy);
ConvAlgorithms conv_algorithms();  ///< The convolution policy now (Fast by default).
/// A count of changes to the kernel settings above (TF32, deterministic, find, fused convolutions,
/// NHWC, fused dense, fused loss, fused advance, the convolution policy): what a cached choice made under them is
/// checked against (a kept cuDNN plan, fit's captured CUDA graph). Setting a value it already has is no change.
uint64_t kernel_settings_version();
/// "fast" / "exact" (parse_conv_algorithms reads them back).
const char* to_string(ConvAlgorithms policy);
/// The policy named "fast" or "exact" (ArgumentError naming the choices otherwise).
ConvAlgorithms parse_conv_algorithms(const std::string& name);

/// Mixed precision, Keras' `mixed_bfloat16` policy (torch.autocast with dtype bfloat16):
///  - Float32 (default): every op in fp32.
///  - MixedBFloat16: on the CPU, Conv2D and Dense (and with them the projections of attention)
///    multiply in bfloat16 with fp32 accumulation: their inputs, weights and output gradients are
///    rounded to bf16 (round to nearest even) as they enter oneDNN's bf16 kernels (AMX-BF16 where
///    the CPU has it, else AVX512-BF16), and their outputs and gradients come out in fp32. The
///    parameters (master weights), the optimizer's state, the loss, softmax, normalisation, pooling
///    and every reduction stay fp32; checkpoints hold fp32 and load under either policy. Left in
///    fp32, because bf16 gives them nothing: a convolution of at most 27 multiply-adds per output
///    (C x R x S: a first layer on one channel, or three with 3x3 windows; bound by memory), the attention's
///    score and value products (per head, small). What it promises (docs/numerics.md): each
///    bf16 product within 2^-7 of its fp32 value, so an op's result within 2^-7 (plus fp32's own
///    rounding) of sum |a| |b| of the fp32 result; structural zeros exact. It does not keep the
///    batch's sum order: a weight gradient is one oneDNN call over the batch, so micro-batches and
///    data-parallel replicas equal one batch only to rounding, and ConvAlgorithms::Exact's
///    thread-count independence does not cover the bf16 ops. On a CPU without bf16 instructions
///    the policy runs fp32 and says so once (cpu_bf16()). On a GPU (compute capability 8.0 or
///    later: bf16 tensor cores; else fp32, said once) the same ops run on cuBLAS's and cuDNN's bf16
///    paths: Dense as on the CPU (bf16 operands, fp32 accumulation and results); a convolution's
///    output, data and weight gradients come out of cuDNN in bf16 (one more rounding, 2^-8 of
///    each value) before they turn fp32 (docs/numerics.md).
enum class Precision { Float32, MixedBFloat16 };
/// The process's precision policy (a model's own, Model::set_precision, comes first); set it
/// before training, never during a step.
void set_precision(Precision policy);
Precision precision();  ///< The process's precision policy (Float32 by default).
/// "fp32" / "mixed_bf16" (parse_precision reads them back).
const char* to_string(Precision policy);
/// The policy named "fp32" or "mixed_bf16" (ArgumentError naming the choices otherwise).
Precision parse_precision(const std::string& name);

/// What this CPU offers for bf16 math, as oneDNN sees it (ONEDNN_MAX_CPU_ISA respected).
struct CpuBf16 {
  bool available = false;  ///< AVX512-BF16 or AMX-BF16: MixedBFloat16 runs bf16 kernels
  bool amx = false;        ///< AMX-BF16: the convolutions run bf16 too (without it, fp32: docs/numerics.md)
  std::string isa;         ///< "AMX-BF16", "AVX512-BF16", or why not ("no AVX512-BF16 (oneDNN's ISA: avx2)")
};
const CpuBf16& cpu_bf16();  ///< Probed once; never throws.

/// Resolves a requested precision for `device` as soft placement resolves a device: where it
/// cannot run (a CPU without bf16 instructions; a GPU before compute capability 8.0, or none) it
/// returns Float32 with one warning saying why, or with `strict` throws DeviceError. Float32
/// comes back as it is.
Precision resolve_precision(Precision requested, Device device, bool strict);

/// Throws DeviceError when this CPU lacks the instruction set Ember's kernels were compiled for
/// (EMBER_CPU_ARCH, AVX2 + FMA by default), instead of dying on an illegal instruction.
/// Model::build and the apps call it.
void check_cpu_support();

/// set_num_threads(kFreeCores) (and Model::set_num_threads): as many threads as there are cores that
/// other processes do not keep busy (at least 1), counted from /proc (the system's runnable tasks less
/// this process's running threads, a median of a few readings) when a fit or an evaluate starts, and
/// for other calls (train_step, predict, ...) at most every 2 seconds; a fit keeps its count to its
/// end (changing the count between steps made a busy machine's pool threads slow to wake). On a
/// machine shared with other work it runs one thread where two would wait for each other's parked
/// thread at every barrier (docs/benchmarks.md, "A shared machine"). The price: where a kernel's
/// rounding depends on the thread count (oneDNN's weight gradients under Fast), two runs of a seed
/// give the same bits only when they got the same count. Where this process may use only some of
/// the machine's CPUs (taskset, a container's cpuset), the other processes' tasks are counted in
/// proportion (the system's count covers every CPU). This process's own threads are never counted
/// as load: two models of one process trained at once need their counts set (docs/usage.md).
inline constexpr int kFreeCores = -1;

/// CPU threads for Ember's kernels and oneDNN (both run on the OpenMP pool), for the whole process:
/// 0 = all cores, kFreeCores = the cores other processes leave free (above). OpenMP's own omp_set_num_threads acts on
/// the calling thread only (a new std::thread starts with OpenMP's initial default: OMP_NUM_THREADS, or one thread per
/// core); this one also applies to the calling thread at once, and every model call (fit, train_step, predict, ...)
/// applies it to the thread it runs on, unless the model has a setting of its own (Model::set_num_threads). Until it is
/// first called, model calls leave each thread's OpenMP setting as it is. ArgumentError for n < 0 other than
/// kFreeCores. How long a waiting pool thread spins before it sleeps is libgomp's GOMP_SPINCOUNT, read once when the
/// program loads: set it in the environment (docs/usage.md, "Threads"; Ember's apps set 10000 themselves).
void set_num_threads(int n);
/// The process's setting (set_num_threads: 0 resolved to the cores, kFreeCores to the free cores now), or before any,
/// the calling thread's OpenMP thread count.
int num_threads();

namespace detail {
/// The process's set_num_threads value (kFreeCores as it is), 0 when never set.
int process_threads();
/// A thread-count setting resolved: kFreeCores to a count of free cores (taken afresh with `fresh`,
/// else the last one while it is under 2 s old), any other value as it is.
int resolve_threads(int setting, bool fresh);
/// For the scope of one model call: the calling thread's OpenMP thread count set to `n` (> 0;
/// 0: left as it is), restored after. Inside the outermost scope on a thread, resolve_threads
/// gives kFreeCores that scope's count (a fit's steps and validation keep the fit's).
class ThreadScope {
 public:
  explicit ThreadScope(int n);
  ~ThreadScope();
  ThreadScope(const ThreadScope&) = delete;
  ThreadScope& operator=(const ThreadScope&) = delete;

 private:
  int saved_ = 0;  // 0: nothing changed
};
}  // namespace detail
namespace detail {
/// The precision the CPU ops run in now: the innermost PrecisionScope's, else the process's,
/// MixedBFloat16 only where cpu_bf16().available (else Float32, warned once).
Precision cpu_precision();
/// The same for the GPU cuda:device: MixedBFloat16 only where it has bf16 tensor cores (compute
/// capability 8.0 or later; else Float32, warned once).
Precision gpu_precision(int device);
/// For the scope of one model call: the calling thread's precision set to `p` (nullopt: the
/// process's), restored after.
class PrecisionScope {
 public:
  explicit PrecisionScope(std::optional<Precision> p);
  ~PrecisionScope();
  PrecisionScope(const PrecisionScope&) = delete;
  PrecisionScope& operator=(const PrecisionScope&) = delete;

 private:
  int saved_;
};
}  // namespace detail
/// Flush denormals to zero on every pool thread: denormal gradients once made Adam 10x slower.
void enable_flush_to_zero();

}  // namespace ember
