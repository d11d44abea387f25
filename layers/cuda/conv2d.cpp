// Conv2D on cuDNN (legacy descriptor API, supported through cuDNN 9). One Plan per shape, device
// and setting: descriptors, each direction's runnable algorithms in order, the fused forward's
// availability. The op's GpuPlanSlot finds it again without a lock; workspaces come from the
// device context's shared buffer (Context::workspace).
#include "conv2d.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "../../core/cuda/check.h"
#include "../../core/cuda/elementwise.h"
#include "../../core/cuda_graph.h"
#include "../../core/log.h"
#include "../../core/runtime.h"
#include "algo_choice.h"
#include "bf16.h"
#include "cudnn_desc.h"
#include "pad.h"
#include "plan_cache.h"
#include "relu.h"

namespace ember::cuda {

namespace {

// One direction's algorithms: every candidate that the rule allows (algo_choice.h) and that
// cuDNN can size a workspace for with these descriptors, fastest first, and the one in use. A
// candidate that fails when it runs gives way to the next (run_with_fallback), for every later
// call too: cuDNN's list is a prediction, and PyTorch likewise tries the next one.
template <class Perf>
struct Choice {
  std::vector<Perf> candidates;
  std::vector<size_t> workspace;  // bytes, per candidate
  std::atomic<size_t> at{0};
  const Perf& current() const { return candidates[at.load(std::memory_order_relaxed)]; }
  size_t current_workspace() const { return workspace[at.load(std::memory_order_relaxed)]; }
};

struct Plan {
  Conv2dShape g;
  // The mixed_bf16 plan: x, y and the filter in bf16 (cuDNN's BFLOAT16 configuration: fp32
  // accumulation, tensor-core math), the bias and its gradient in fp32 (y_bias, bias).
  bool bf16 = false;
  TensorDesc x, y, bias;
  // y for the bias add and the bias gradient: y itself in NCHW; in NHWC the same bytes seen as
  // NCHW (N*P*Q, K, 1, 1), which cuDNN's NCHW broadcast and reduction handle best.
  TensorDesc y_bias;
  FilterDesc w;
  // One convolution descriptor per direction: each carries the math type its algorithm was
  // listed with (cuDNN's perf result says which; TF32 only where allowed).
  ConvDesc fwd_conv, data_conv, filter_conv;
  Choice<cudnnConvolutionFwdAlgoPerf_t> fwd;
  Choice<cudnnConvolutionBwdDataAlgoPerf_t> data;
  Choice<cudnnConvolutionBwdFilterAlgoPerf_t> filter;
  bool found = false;  // listed by cudnnFind's timings (else the heuristics' guess)
  // The fused forward (fused_conv()): convolution + bias + activation in one call, with the one
  // algorithm cuDNN fuses ReLU with. Checked when the plan is made (cuDNN must list and size it for
  // these descriptors); off for good, with a warning, if it fails when it runs.
  std::atomic<bool> fused{false};
  std::string fused_note;  // why it is off although asked for ("" otherwise)
  ActivationDesc relu, identity;
  size_t fused_workspace = 0;
  std::mutex retry_mu;  // moving to the next candidate (the failure path only)
};

int i32(int64_t v) { return static_cast<int>(v); }

// cuDNN pads symmetrically; SAME with an even window or a stride pads one more at the
// bottom/right. Such convolutions run as a VALID one on an explicitly padded input (pad.h).
bool asymmetric(const Conv2dShape& g) { return g.pad_top != g.pad_bottom || g.pad_left != g.pad_right; }

// The workspace a convolution may take: at most 512 MiB, half of what the GPU has free, and
// half of what the allocator may still hand out under a memory cap (it serves the workspace).
size_t workspace_budget(int device) {
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
    (void)cudaGetLastError();
    free = size_t{1} << 30;
  }
  return std::min({size_t{512} << 20, free / 2, allocator_headroom(device) / 2});
}

// Deterministic algorithms only: set_gpu_deterministic, or the Exact convolution policy.
bool deterministic_algorithms() { return gpu_deterministic() || conv_algorithms() == ConvAlgorithms::Exact; }

const char* direction_name(const cudnnConvolutionFwdAlgoPerf_t*) { return "forward"; }
const char* direction_name(const cudnnConvolutionBwdDataAlgoPerf_t*) { return "backward-data"; }
const char* direction_name(const cudnnConvolutionBwdFilterAlgoPerf_t*) { return "backward-filter"; }

// Sets a direction's descriptor to its algorithm's math type (math_type_for, algo_choice.h): the
// listed one for bf16 data (tensor cores are its point), else FP32 FMA unless TF32 is allowed.
template <class Perf>
void set_math(const Plan& p, ConvDesc& conv, const Perf& perf) {
  EMBER_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, math_type_for(perf.mathType, allow_tf32() || p.bf16)));
}

// The workspace `perf`'s algorithm needs with these descriptors, or nullopt when cuDNN says it
// cannot run it (the up-front check: some algorithms take no NHWC filters, say).
std::optional<size_t> workspace_size(Context& ctx, Plan& p, const cudnnConvolutionFwdAlgoPerf_t& a) {
  set_math(p, p.fwd_conv, a);
  size_t bytes = 0;
  if (cudnnGetConvolutionForwardWorkspaceSize(ctx.dnn(), p.x, p.w, p.fwd_conv, p.y, a.algo, &bytes) !=
      CUDNN_STATUS_SUCCESS)
    return std::nullopt;
  return bytes;
}
std::optional<size_t> workspace_size(Context& ctx, Plan& p, const cudnnConvolutionBwdDataAlgoPerf_t& a) {
  set_math(p, p.data_conv, a);
  size_t bytes = 0;
  if (cudnnGetConvolutionBackwardDataWorkspaceSize(ctx.dnn(), p.w, p.y, p.data_conv, p.x, a.algo, &bytes) !=
      CUDNN_STATUS_SUCCESS)
    return std::nullopt;
  return bytes;
}
std::optional<size_t> workspace_size(Context& ctx, Plan& p, const cudnnConvolutionBwdFilterAlgoPerf_t& a) {
  set_math(p, p.filter_conv, a);
  size_t bytes = 0;
  if (cudnnGetConvolutionBackwardFilterWorkspaceSize(ctx.dnn(), p.x, p.y, p.filter_conv, p.w, a.algo, &bytes) !=
      CUDNN_STATUS_SUCCESS)
    return std::nullopt;
  return bytes;
}
ConvDesc& conv_of(Plan& p, const cudnnConvolutionFwdAlgoPerf_t*) { return p.fwd_conv; }
ConvDesc& conv_of(Plan& p, const cudnnConvolutionBwdDataAlgoPerf_t*) { return p.data_conv; }
ConvDesc& conv_of(Plan& p, const cudnnConvolutionBwdFilterAlgoPerf_t*) { return p.filter_conv; }

// Fills `c` from cuDNN's list: the rule's candidates (choose_candidates), each sized; an error
// naming the shape when none is left (never a silent fall back to one that sums with atomics).
template <class Perf>
void choose(Context& ctx, Plan& p, Choice<Perf>& c, const Perf* listed, int found, bool nhwc, size_t budget) {
  const bool deterministic = deterministic_algorithms();
  for (const Perf& perf : choose_candidates(listed, found, deterministic, budget)) {
    const auto bytes = workspace_size(ctx, p, perf);
    if (!bytes) continue;
    c.candidates.push_back(perf);
    c.workspace.push_back(*bytes);
  }
  EMBER_CHECK(!c.candidates.empty(), CudnnError,
              std::string("conv2d (cuda): no ") + (deterministic ? "deterministic " : "") +
                  direction_name(static_cast<const Perf*>(nullptr)) +
                  " algorithm that cuDNN can run within the workspace budget and that sums directly (not "
                  "Winograd or FFT) for " +
                  p.g.str() + " (of " + std::to_string(found) + " listed)" +
                  (nhwc ? "; NHWC activations: set_gpu_nhwc(false) runs this shape NCHW" : ""));
  set_math(p, conv_of(p, static_cast<const Perf*>(nullptr)), c.candidates.front());
}

// cudnnFind's buffers: inputs and outputs of the plan's shape and data type (fp32, or bf16's two
// bytes) and a workspace of the budget, all from the caching allocator (counted under a memory
// cap; cuDNN allocates nothing itself), returned to it once the timings are made.
struct FindBuffers {
  Tensor x, w, y, ws;
  size_t ws_bytes = 0;
  FindBuffers(const Conv2dShape& g, int device, size_t budget, bool bf16) {
    const Device d = Device::cuda(device);
    const auto zeros = [&](int64_t count) {
      return bf16 ? Tensor::zeros(Shape{2 * count}, DType::U8, d) : Tensor::zeros(Shape{count}, DType::F32, d);
    };
    x = zeros(g.n * g.c * g.h * g.w);
    w = zeros(g.k * g.c * g.r * g.s);
    y = zeros(g.n * g.k * g.p * g.q);
    // The plan's budget, or less when x, w and y took what a memory cap had left.
    ws_bytes = std::min(budget, allocator_headroom(device) / 2);
    if (ws_bytes > 0) ws = Tensor::empty(Shape{static_cast<int64_t>(ws_bytes)}, DType::U8, d);
  }
  void* workspace() { return ws_bytes > 0 ? ws.raw() : nullptr; }
};

// The fused forward (fused_conv()): cuDNN fuses ReLU with IMPLICIT_PRECOMP_GEMM only, used when
// cuDNN lists it as runnable for these descriptors (`listed`: the forward's list) and sizes its
// workspace within the budget; else the three-call forward, and kernel_info says why. Not for a
// bf16 plan, whose bias and ReLU are added as its output is converted.
void choose_fused(Context& ctx, Plan& p, const std::vector<cudnnConvolutionFwdAlgoPerf_t>& listed, size_t budget) {
  if (!fused_conv()) return;
  if (p.bf16) {
    p.fused_note = "the bf16 path adds the bias (and ReLU) as it converts the output to fp32";
    return;
  }
  const auto precomp = std::find_if(listed.begin(), listed.end(), [](const auto& a) {
    return a.algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM && a.status == CUDNN_STATUS_SUCCESS;
  });
  size_t bytes = 0;
  if (precomp == listed.end()) {
    p.fused_note = "cuDNN does not list implicit precomp GEMM as runnable for these descriptors";
  } else if (cudnnGetConvolutionForwardWorkspaceSize(ctx.dnn(), p.x, p.w, p.fwd_conv, p.y,
                                                     CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
                                                     &bytes) != CUDNN_STATUS_SUCCESS ||
             bytes > budget) {
    p.fused_note = "cuDNN cannot size implicit precomp GEMM's workspace within the budget";
  } else {
    EMBER_CUDNN_CHECK(cudnnSetActivationDescriptor(p.relu, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0));
    EMBER_CUDNN_CHECK(
        cudnnSetActivationDescriptor(p.identity, CUDNN_ACTIVATION_IDENTITY, CUDNN_NOT_PROPAGATE_NAN, 0.0));
    p.fused_workspace = bytes;
    p.fused = true;
  }
}

std::unique_ptr<Plan> make_plan(Context& ctx, const Conv2dShape& g, bool nhwc, bool bf16) {
  EMBER_CHECK(!asymmetric(g), Error, "conv2d (cuda): internal: an asymmetric plan for " + g.str());
  auto p = std::make_unique<Plan>();
  p->g = g;
  p->bf16 = bf16;
  const cudnnDataType_t data = bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
  // Activations NCHW or channels-last (gpu_nhwc).
  p->x = nchw_desc(i32(g.n), i32(g.c), i32(g.h), i32(g.w), nhwc, data);
  p->y = nchw_desc(i32(g.n), i32(g.k), i32(g.p), i32(g.q), nhwc, data);
  p->y_bias =
      nhwc ? nchw_desc(i32(g.n * g.p * g.q), i32(g.k), 1, 1) : nchw_desc(i32(g.n), i32(g.k), i32(g.p), i32(g.q));
  p->bias = nchw_desc(1, i32(g.k), 1, 1);
  // Filters in the activations' layout: KCRS (the parameters' own) beside NCHW, KRSC beside NHWC
  // (a transposed copy each call, dw transposed back). cuDNN 9.19 lists no backward-data algorithm
  // that sums directly for NHWC activations with KCRS filters in FP32 (seen on an H200), and its
  // bf16 tensor-core kernels for NHWC want KRSC.
  EMBER_CUDNN_CHECK(cudnnSetFilter4dDescriptor(p->w, data, nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, i32(g.k),
                                               i32(g.c), i32(g.r), i32(g.s)));
  // Cross-correlation, as every framework's "convolution"; FP32 math (no TF32) to match the CPU
  // unless TF32 is allowed (core/runtime.h). The math type asked for while listing; each
  // direction then takes its algorithm's.
  for (ConvDesc* conv : {&p->fwd_conv, &p->data_conv, &p->filter_conv}) {
    EMBER_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(*conv, i32(g.pad_top), i32(g.pad_left), i32(g.stride_h),
                                                      i32(g.stride_w), 1, 1, CUDNN_CROSS_CORRELATION,
                                                      CUDNN_DATA_FLOAT));
    EMBER_CUDNN_CHECK(cudnnSetConvolutionMathType(*conv, bf16           ? CUDNN_TENSOR_OP_MATH
                                                         : allow_tf32() ? CUDNN_DEFAULT_MATH
                                                                        : CUDNN_FMA_MATH));
  }
  int out_n = 0, out_c = 0, out_h = 0, out_w = 0;
  EMBER_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(p->fwd_conv, p->x, p->w, &out_n, &out_c, &out_h, &out_w));
  EMBER_CHECK(out_h == g.p && out_w == g.q, ShapeError,
              "conv2d (cuda): cuDNN computes a different output size for " + g.str());

  // cuDNN's heuristics, or with cudnn_find() every algorithm timed on this GPU (once per shape,
  // with a host wait; its buffers from the caching allocator); either list goes through the same
  // rule (algo_choice.h).
  constexpr int kMax = 8;
  const bool find = cudnn_find();
  // One budget for the plan, taken before cudnnFind's own buffers are (they would halve it): what
  // Find timed is what the rule then allows.
  const size_t budget = workspace_budget(ctx.device());
  std::optional<FindBuffers> fb;
  if (find) fb.emplace(g, ctx.device(), budget, bf16);
  int found = 0;
  cudnnConvolutionFwdAlgoPerf_t fwd[kMax];
  if (find)
    EMBER_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(ctx.dnn(), p->x, fb->x.raw(), p->w, fb->w.raw(),
                                                             p->fwd_conv, p->y, fb->y.raw(), kMax, &found, fwd,
                                                             fb->workspace(), fb->ws_bytes));
  else
    EMBER_CUDNN_CHECK(
        cudnnGetConvolutionForwardAlgorithm_v7(ctx.dnn(), p->x, p->w, p->fwd_conv, p->y, kMax, &found, fwd));
  const std::vector<cudnnConvolutionFwdAlgoPerf_t> fwd_listed(fwd, fwd + found);
  choose(ctx, *p, p->fwd, fwd, found, nhwc, budget);
  cudnnConvolutionBwdDataAlgoPerf_t bd[kMax];
  if (find)
    EMBER_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(ctx.dnn(), p->w, fb->w.raw(), p->y, fb->y.raw(),
                                                                  p->data_conv, p->x, fb->x.raw(), kMax, &found, bd,
                                                                  fb->workspace(), fb->ws_bytes));
  else
    EMBER_CUDNN_CHECK(
        cudnnGetConvolutionBackwardDataAlgorithm_v7(ctx.dnn(), p->w, p->y, p->data_conv, p->x, kMax, &found, bd));
  choose(ctx, *p, p->data, bd, found, nhwc, budget);
  cudnnConvolutionBwdFilterAlgoPerf_t bf[kMax];
  if (find)
    EMBER_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(ctx.dnn(), p->x, fb->x.raw(), p->y, fb->y.raw(),
                                                                    p->filter_conv, p->w, fb->w.raw(), kMax, &found, bf,
                                                                    fb->workspace(), fb->ws_bytes));
  else
    EMBER_CUDNN_CHECK(
        cudnnGetConvolutionBackwardFilterAlgorithm_v7(ctx.dnn(), p->x, p->y, p->filter_conv, p->w, kMax, &found, bf));
  choose(ctx, *p, p->filter, bf, found, nhwc, budget);
  p->found = find;

  choose_fused(ctx, *p, fwd_listed, budget);
  return p;
}

// Found through the op's slot (plan_cache.h): no lock or map lookup in the steady state. The key
// holds everything the plan's choices depend on.
Plan& plan_for(Context& ctx, const Conv2dShape& g, bool nhwc, bool bf16, ::ember::detail::GpuPlanSlot* slot) {
  static auto* cache = new PlanCache<18, Plan>();
  const PlanCache<18, Plan>::Key key{ctx.device(),
                                     g.n,
                                     g.c,
                                     g.h,
                                     g.w,
                                     g.k,
                                     g.r,
                                     g.s,
                                     g.stride_h,
                                     g.stride_w,
                                     g.pad_top,
                                     g.pad_left,
                                     deterministic_algorithms(),
                                     allow_tf32(),
                                     cudnn_find(),
                                     fused_conv(),
                                     nhwc,
                                     bf16};
  const auto make = [&] { return make_plan(ctx, g, nhwc, bf16); };
  return slot ? cache->get(*slot, key, make) : cache->get(key, make);
}

// Runs `call(perf, workspace, bytes)` with the direction's current algorithm; when it fails in a
// way another algorithm may not, the next candidate becomes the current one (with a warning; its
// math type on the descriptor) and runs (run_candidates, algo_choice.h); an error naming the
// shape, the algorithm and how many were tried when none is left.
template <class Perf, class Call>
void run_with_fallback(Context& ctx, Plan& p, Choice<Perf>& c, Call&& call) {
  const char* dir = direction_name(static_cast<const Perf*>(nullptr));
  const auto failed = [&](size_t i, cudnnStatus_t status) {
    return std::string("conv2d (cuda): ") + dir + " algorithm " +
           std::to_string(static_cast<int>(c.candidates[i].algo)) + " failed for " + p.g.str() + ": " +
           cudnnGetErrorString(status);
  };
  size_t tried = 0;
  // Inside a CUDA graph capture nothing moves on: the eager steps before it ran these algorithms,
  // so a failure here is the capture's, and a choice changed now would outlive it.
  const bool capturing = CudaGraph::capturing(Device::cuda(ctx.device()));
  const size_t count = capturing ? c.at.load(std::memory_order_acquire) + 1 : c.candidates.size();
  const cudnnStatus_t status = run_candidates(
      c.at, count,
      [&](size_t i) {
        ++tried;
        const Context::Workspace ws = ctx.workspace(c.workspace[i]);
        const cudnnStatus_t s = call(c.candidates[i], ws.ptr, c.workspace[i]);
        if (s != CUDNN_STATUS_SUCCESS) (void)cudaGetLastError();  // a non-sticky error the failed call left
        return s;
      },
      [&](size_t next, cudnnStatus_t why) {
        std::lock_guard lock(p.retry_mu);
        set_math(p, conv_of(p, static_cast<const Perf*>(nullptr)), c.candidates[next]);
        ::ember::log(LogLevel::warn, failed(next - 1, why) + "; using algorithm " +
                                         std::to_string(static_cast<int>(c.candidates[next].algo)) + " from now on");
      });
  if (status != CUDNN_STATUS_SUCCESS) {
    const size_t at = c.at.load(std::memory_order_relaxed);
    throw CudnnError(failed(at, status) + (tried > 1 ? " (" + std::to_string(tried) + " algorithms tried)" : "") +
                     (capturing ? " (inside a CUDA graph capture)" : ""));
  }
}

// Activations come in the input's layout (NCHW, or NHWC with gpu_nhwc and symmetric padding),
// all alike; weights and biases are row-major.
void check(const Context& ctx, const Tensor& t, const Shape& s, const char* what, const Conv2dShape& g,
           Layout layout = Layout::RowMajor) {
  // The message (a shape's str(), ~20 allocations) is built only when the check fails: this runs
  // several times per op per step.
  if (!is_nchw(ctx, t, s, layout)) check_nchw(ctx, t, s, "conv2d (cuda) for " + g.str(), what, layout);
}

void check_layout_fits(const Conv2dShape& g, Layout layout) {
  EMBER_CHECK(layout == Layout::RowMajor || !asymmetric(g), ShapeError,
              "conv2d (cuda): asymmetric SAME padding runs NCHW only, got NHWC activations for " + g.str());
}

const float* cp(const Tensor& t) { return static_cast<const float*>(t.raw()); }
float* mp(Tensor& t) { return static_cast<float*>(t.raw()); }

// The fp32 filters in the plan's layout: w itself (KCRS), or a KRSC copy beside NHWC activations.
Tensor filters_f32(Context& ctx, const Conv2dShape& g, const Tensor& w, bool nhwc) {
  if (!nhwc) return w;
  Tensor r = Tensor::empty(Shape{w.numel()}, DType::F32, w.device());
  permute_nchw(ctx, w.raw(), r.raw(), g.k, g.c, g.r, g.s, 4, true);
  return r;
}

// The filters rounded to bf16 in the plan's layout: KCRS, or KRSC beside NHWC activations.
Tensor filters_bf16(Context& ctx, const Conv2dShape& g, const Tensor& w, bool nhwc) {
  if (!nhwc) return rounded_bf16(ctx, w);
  Tensor r = bf16_scratch(w.numel(), w.device());
  kcrs_to_krsc_bf16(ctx, cp(w), r.raw(), g.k, g.c, g.r * g.s);
  return r;
}

// The mixed_bf16 forward: x and w rounded to bf16, cuDNN's bf16 convolution (fp32 accumulation)
// into a bf16 output, which the bias (+ ReLU: the caller's g, as a plan serves layers with and
// without it) kernel turns into y in fp32.
void forward_bf16(Context& ctx, Plan& p, const Conv2dShape& g, const Tensor& x, const Tensor& w, const Tensor& b,
                  Tensor& y, bool nhwc) {
  const Tensor xb = rounded_bf16(ctx, x), wb = filters_bf16(ctx, g, w, nhwc);
  Tensor yb = bf16_scratch(y.numel(), y.device());
  const float one = 1.0f, zero = 0.0f;
  run_with_fallback(ctx, p, p.fwd, [&](const cudnnConvolutionFwdAlgoPerf_t& a, void* ws, size_t bytes) {
    return cudnnConvolutionForward(ctx.dnn(), &one, p.x, xb.raw(), p.w, wb.raw(), p.fwd_conv, a.algo, ws, bytes, &zero,
                                   p.y, yb.raw());
  });
  from_bf16_bias(ctx, yb.raw(), cp(b), mp(y), y.numel(), g.k, nhwc ? 1 : g.p * g.q, g.relu);
}

// The mixed_bf16 backward from the (masked) fp32 output gradient: db from its fp32 values; dw and
// dx from its bf16 rounding, with x and w rounded likewise, through bf16 results.
void backward_bf16(Context& ctx, Plan& p, const Tensor& x, const Tensor& w, const Tensor& grad, Tensor* dx, Tensor& dw,
                   Tensor& db, bool nhwc) {
  const Conv2dShape& g = p.g;  // its shape only (not its ReLU)
  const float one = 1.0f, zero = 0.0f;
  EMBER_CUDNN_CHECK(cudnnConvolutionBackwardBias(ctx.dnn(), &one, p.y_bias, cp(grad), &zero, p.bias, mp(db)));
  const Tensor gb = rounded_bf16(ctx, grad), xb = rounded_bf16(ctx, x);
  Tensor dwb = bf16_scratch(dw.numel(), dw.device());
  run_with_fallback(ctx, p, p.filter, [&](const cudnnConvolutionBwdFilterAlgoPerf_t& a, void* ws, size_t bytes) {
    return cudnnConvolutionBackwardFilter(ctx.dnn(), &one, p.x, xb.raw(), p.y, gb.raw(), p.filter_conv, a.algo, ws,
                                          bytes, &zero, p.w, dwb.raw());
  });
  if (nhwc)
    krsc_bf16_to_kcrs(ctx, dwb.raw(), mp(dw), g.k, g.c, g.r * g.s);
  else
    from_bf16(ctx, dwb.raw(), mp(dw), dw.numel());
  if (!dx) return;
  const Tensor wb = filters_bf16(ctx, g, w, nhwc);
  Tensor dxb = bf16_scratch(dx->numel(), dx->device());
  run_with_fallback(ctx, p, p.data, [&](const cudnnConvolutionBwdDataAlgoPerf_t& a, void* ws, size_t bytes) {
    return cudnnConvolutionBackwardData(ctx.dnn(), &one, p.w, wb.raw(), p.y, gb.raw(), p.data_conv, a.algo, ws, bytes,
                                        &zero, p.x, dxb.raw());
  });
  from_bf16(ctx, dxb.raw(), mp(*dx), dx->numel());
}
}  // namespace

void conv2d_forward(Context& ctx, const Conv2dShape& g, const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y,
                    ::ember::detail::GpuPlanSlot& slot, bool bf16) {
  const Layout layout = x.layout();
  check_layout_fits(g, layout);
  check(ctx, x, {g.n, g.c, g.h, g.w}, "input", g, layout);
  check(ctx, w, {g.k, g.c, g.r, g.s}, "weights", g);
  check(ctx, b, {g.k}, "bias", g);
  check(ctx, y, {g.n, g.k, g.p, g.q}, "output", g, layout);
  if (asymmetric(g)) {
    conv2d_forward(ctx, padded_valid(g), pad_input(ctx, g, x, 0.0f), w, b, y, slot, bf16);
    return;
  }
  Plan& p = plan_for(ctx, g, layout == Layout::NHWC, bf16, &slot);
  if (bf16) {
    forward_bf16(ctx, p, g, x, w, b, y, layout == Layout::NHWC);
    return;
  }
  const float one = 1.0f, zero = 0.0f;
  const Tensor wf = filters_f32(ctx, g, w, layout == Layout::NHWC);
  if (p.fused.load(std::memory_order_relaxed)) {  // y = act(conv(x) + 0 * y + bias): z is y itself, weighted 0
    // cuDNN documents that beta = 0 leaves the output unread, but says nothing of alpha2 = 0 and z:
    // z is zeroed first, so that a NaN left in y (a fresh buffer, a test's sentinel) cannot reach
    // the result as 0 * NaN. One memset on this path only; it is captured with the step.
    EMBER_CUDA_CHECK(cudaMemsetAsync(y.raw(), 0, y.nbytes(), ctx.stream()));
    const Context::Workspace ws = ctx.workspace(p.fused_workspace);
    const cudnnStatus_t status = cudnnConvolutionBiasActivationForward(
        ctx.dnn(), &one, p.x, cp(x), p.w, cp(wf), p.fwd_conv, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, ws.ptr,
        p.fused_workspace, &zero, p.y, mp(y), p.bias, cp(b), g.relu ? p.relu : p.identity, p.y, mp(y));
    if (status == CUDNN_STATUS_SUCCESS) return;
    (void)cudaGetLastError();  // a non-sticky error the failed call left
    const std::string what =
        "conv2d (cuda): the fused forward failed for " + g.str() + ": " + cudnnGetErrorString(status);
    // Not switched off for a failure that is not its own, nor inside a capture (see run_with_fallback).
    if (!retry_with_next(status) || CudaGraph::capturing(Device::cuda(ctx.device()))) throw CudnnError(what);
    // Off for this plan from now on; this call runs the three-call forward below.
    std::lock_guard lock(p.retry_mu);
    if (p.fused.exchange(false)) {
      p.fused_note = "it failed when it ran";
      ::ember::log(LogLevel::warn, what + "; convolution, bias and ReLU run as three calls from now on");
    }
  }
  run_with_fallback(ctx, p, p.fwd, [&](const cudnnConvolutionFwdAlgoPerf_t& a, void* ws, size_t bytes) {
    return cudnnConvolutionForward(ctx.dnn(), &one, p.x, cp(x), p.w, cp(wf), p.fwd_conv, a.algo, ws, bytes, &zero, p.y,
                                   mp(y));
  });
  EMBER_CUDNN_CHECK(cudnnAddTensor(ctx.dnn(), &one, p.bias, cp(b), &one, p.y_bias, mp(y)));
  if (g.relu) relu_forward(ctx, y, y);
}

void conv2d_backward(Context& ctx, const Conv2dShape& g, const Tensor& x, const Tensor& w, const Tensor& y,
                     const Tensor& dy, Tensor* dx, Tensor& dw, Tensor& db, bool dy_premasked,
                     ::ember::detail::GpuPlanSlot& slot, bool bf16) {
  const Layout layout = x.layout();
  check_layout_fits(g, layout);
  check(ctx, x, {g.n, g.c, g.h, g.w}, "input", g, layout);
  check(ctx, y, {g.n, g.k, g.p, g.q}, "output", g, layout);
  check(ctx, dy, {g.n, g.k, g.p, g.q}, "output gradient", g, layout);
  check(ctx, dw, {g.k, g.c, g.r, g.s}, "weight gradient", g);
  check(ctx, db, {g.k}, "bias gradient", g);
  if (dx) check(ctx, *dx, {g.n, g.c, g.h, g.w}, "input gradient", g, layout);
  if (asymmetric(g)) {  // the padded input again (cheap), the gradient of it, then cropped
    const Conv2dShape v = padded_valid(g);
    Tensor dxp = dx ? Tensor::empty(Shape{v.n, v.c, v.h, v.w}, DType::F32, x.device()) : Tensor();
    conv2d_backward(ctx, v, pad_input(ctx, g, x, 0.0f), w, y, dy, dx ? &dxp : nullptr, dw, db, dy_premasked, slot,
                    bf16);
    if (dx)
      shift2d(ctx, static_cast<const float*>(dxp.raw()), g.n * g.c, v.h, v.w, static_cast<float*>(dx->raw()), g.h, g.w,
              -g.pad_top, -g.pad_left, 0.0f);
    return;
  }
  Plan& p = plan_for(ctx, g, layout == Layout::NHWC, bf16, &slot);
  const Tensor* grad = &dy;
  Tensor masked;
  if (g.relu && !dy_premasked) {
    masked = Tensor::empty(dy.shape(), DType::F32, dy.device(), layout);
    relu_backward(ctx, y, dy, masked);
    grad = &masked;
  }
  if (bf16) {
    backward_bf16(ctx, p, x, w, *grad, dx, dw, db, layout == Layout::NHWC);
    return;
  }
  const float one = 1.0f, zero = 0.0f;
  EMBER_CUDNN_CHECK(cudnnConvolutionBackwardBias(ctx.dnn(), &one, p.y_bias, cp(*grad), &zero, p.bias, mp(db)));
  const bool nhwc = layout == Layout::NHWC;
  Tensor dw_krsc = nhwc ? Tensor::empty(Shape{dw.numel()}, DType::F32, dw.device()) : Tensor();
  run_with_fallback(ctx, p, p.filter, [&](const cudnnConvolutionBwdFilterAlgoPerf_t& a, void* ws, size_t bytes) {
    return cudnnConvolutionBackwardFilter(ctx.dnn(), &one, p.x, cp(x), p.y, cp(*grad), p.filter_conv, a.algo, ws, bytes,
                                          &zero, p.w, nhwc ? mp(dw_krsc) : mp(dw));
  });
  if (nhwc) permute_nchw(ctx, dw_krsc.raw(), dw.raw(), g.k, g.c, g.r, g.s, 4, false);
  if (!dx) return;
  const Tensor wf = filters_f32(ctx, g, w, nhwc);
  run_with_fallback(ctx, p, p.data, [&](const cudnnConvolutionBwdDataAlgoPerf_t& a, void* ws, size_t bytes) {
    return cudnnConvolutionBackwardData(ctx.dnn(), &one, p.w, cp(wf), p.y, cp(*grad), p.data_conv, a.algo, ws, bytes,
                                        &zero, p.x, mp(*dx));
  });
}

std::string conv2d_kernel_info(Context& ctx, const Conv2dShape& g, bool bf16) {
  const bool nhwc = gpu_nhwc() && !asymmetric(g);  // as the dispatch (layers/ops/conv2d.cpp) decides
  Plan& p = plan_for(ctx, asymmetric(g) ? padded_valid(g) : g, nhwc, bf16, nullptr);
  const bool deterministic = p.fwd.current().determinism == CUDNN_DETERMINISTIC &&
                             p.data.current().determinism == CUDNN_DETERMINISTIC &&
                             p.filter.current().determinism == CUDNN_DETERMINISTIC;
  const size_t workspace =
      std::max({p.fwd.current_workspace(), p.data.current_workspace(), p.filter.current_workspace()});
  std::string fused_note;
  {
    std::lock_guard lock(p.retry_mu);  // written there when the fused forward fails
    fused_note = p.fused_note;
  }
  return std::string(asymmetric(g) ? "explicit asymmetric padding + " : "") + (nhwc ? "NHWC, " : "NCHW, ") +
         (bf16 ? "bf16 (fp32 accumulation, tensor-core math), " : "") + "cuDNN fwd algo " +
         std::to_string(static_cast<int>(p.fwd.current().algo)) + ", bwd-data algo " +
         std::to_string(static_cast<int>(p.data.current().algo)) + ", bwd-filter algo " +
         std::to_string(static_cast<int>(p.filter.current().algo)) + ", workspace " + std::to_string(workspace) +
         " bytes" + (deterministic ? ", deterministic" : ", not deterministic") +
         (p.found ? ", timed by cudnnFind" : ", by cuDNN's heuristics") +
         (p.fused ? ", forward fused (conv + bias + activation, implicit precomp GEMM)"
                  : (fused_note.empty() ? "" : ", forward not fused: " + fused_note));
}

}  // namespace ember::cuda
