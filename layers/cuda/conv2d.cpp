// Conv2D on cuDNN (legacy descriptor API, supported through cuDNN 9). One Plan per shape and
// device: descriptors, the three algorithms and the workspace size.
#include "conv2d.h"

#include <algorithm>
#include <memory>
#include <tuple>

#include "../../core/cuda/check.h"
#include "../../core/runtime.h"
#include "algo_choice.h"
#include "cudnn_desc.h"
#include "pad.h"
#include "plan_cache.h"
#include "relu.h"

namespace ember::cuda {

namespace {

struct Plan {
  TensorDesc x, y, bias;
  // y for the bias add and the bias gradient: y itself in NCHW; in NHWC the same bytes seen as
  // NCHW (N*P*Q, K, 1, 1), which cuDNN's NCHW broadcast and reduction handle best.
  TensorDesc y_bias;
  FilterDesc w;
  ConvDesc conv;
  cudnnConvolutionFwdAlgo_t fwd{};
  cudnnConvolutionBwdDataAlgo_t bwd_data{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter{};
  size_t workspace = 0;
  bool deterministic = false;  // all three algorithms give the same bits run to run
  bool found = false;          // chosen from cudnnFind's timings (else the heuristics' guess)
  // The fused forward (fused_conv()): convolution + bias + activation in one call, with the one
  // algorithm cuDNN fuses ReLU with, and its workspace.
  bool fused = false;
  ActivationDesc relu, identity;
  size_t fused_workspace = 0;
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

// The fastest algorithm that works, fits and sums directly (algo_choice.h); when deterministic
// the fastest deterministic one, and an error naming the shape when there is none (never a silent
// fall back to one that sums with atomics).
template <class Perf>
Perf pick_algo(const Perf* perf, int found, const char* what, const Conv2dShape& g, int device) {
  const bool deterministic = deterministic_algorithms();
  const auto chosen = choose_algo(perf, found, deterministic, workspace_budget(device));
  EMBER_CHECK(chosen.has_value(), CudnnError,
              std::string("conv2d (cuda): no ") + (deterministic ? "deterministic " : "") + what +
                  " algorithm that cuDNN can run within the workspace budget and that sums directly (not "
                  "Winograd or FFT) for " +
                  g.str() + " (of " + std::to_string(found) + " listed)");
  return *chosen;
}

std::unique_ptr<Plan> make_plan(Context& ctx, const Conv2dShape& g, bool nhwc) {
  EMBER_CHECK(!asymmetric(g), Error, "conv2d (cuda): internal: an asymmetric plan for " + g.str());
  auto p = std::make_unique<Plan>();
  // Activations NCHW or channels-last (gpu_nhwc); weights always KCRS, as the parameters are.
  p->x = nchw_desc(i32(g.n), i32(g.c), i32(g.h), i32(g.w), nhwc);
  p->y = nchw_desc(i32(g.n), i32(g.k), i32(g.p), i32(g.q), nhwc);
  p->y_bias =
      nhwc ? nchw_desc(i32(g.n * g.p * g.q), i32(g.k), 1, 1) : nchw_desc(i32(g.n), i32(g.k), i32(g.p), i32(g.q));
  p->bias = nchw_desc(1, i32(g.k), 1, 1);
  EMBER_CUDNN_CHECK(
      cudnnSetFilter4dDescriptor(p->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, i32(g.k), i32(g.c), i32(g.r), i32(g.s)));
  // Cross-correlation, as every framework's "convolution"; FP32 math (no TF32) to match the CPU
  // unless TF32 is allowed (core/runtime.h).
  EMBER_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(p->conv, i32(g.pad_top), i32(g.pad_left), i32(g.stride_h),
                                                    i32(g.stride_w), 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  EMBER_CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv, allow_tf32() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH));
  int out_n = 0, out_c = 0, out_h = 0, out_w = 0;
  EMBER_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(p->conv, p->x, p->w, &out_n, &out_c, &out_h, &out_w));
  EMBER_CHECK(out_h == g.p && out_w == g.q, ShapeError,
              "conv2d (cuda): cuDNN computes a different output size for " + g.str());

  // cuDNN's heuristics, or with cudnn_find() every algorithm timed on this GPU (once per shape:
  // it allocates its own buffers and waits for the device); either list goes through the same
  // rule (algo_choice.h).
  constexpr int kMax = 8;
  const bool find = cudnn_find();
  int found = 0;
  cudnnConvolutionFwdAlgoPerf_t fwd[kMax];
  if (find)
    EMBER_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithm(ctx.dnn(), p->x, p->w, p->conv, p->y, kMax, &found, fwd));
  else
    EMBER_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(ctx.dnn(), p->x, p->w, p->conv, p->y, kMax, &found, fwd));
  const auto f = pick_algo(fwd, found, "forward", g, ctx.device());
  p->fwd = f.algo;
  cudnnConvolutionBwdDataAlgoPerf_t bd[kMax];
  if (find)
    EMBER_CUDNN_CHECK(
        cudnnFindConvolutionBackwardDataAlgorithm(ctx.dnn(), p->w, p->y, p->conv, p->x, kMax, &found, bd));
  else
    EMBER_CUDNN_CHECK(
        cudnnGetConvolutionBackwardDataAlgorithm_v7(ctx.dnn(), p->w, p->y, p->conv, p->x, kMax, &found, bd));
  const auto d = pick_algo(bd, found, "backward-data", g, ctx.device());
  p->bwd_data = d.algo;
  cudnnConvolutionBwdFilterAlgoPerf_t bf[kMax];
  if (find)
    EMBER_CUDNN_CHECK(
        cudnnFindConvolutionBackwardFilterAlgorithm(ctx.dnn(), p->x, p->y, p->conv, p->w, kMax, &found, bf));
  else
    EMBER_CUDNN_CHECK(
        cudnnGetConvolutionBackwardFilterAlgorithm_v7(ctx.dnn(), p->x, p->y, p->conv, p->w, kMax, &found, bf));
  const auto w = pick_algo(bf, found, "backward-filter", g, ctx.device());
  p->bwd_filter = w.algo;
  p->found = find;
  p->deterministic = f.determinism == CUDNN_DETERMINISTIC && d.determinism == CUDNN_DETERMINISTIC &&
                     w.determinism == CUDNN_DETERMINISTIC;
  size_t a = 0, b = 0, c = 0;
  EMBER_CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(ctx.dnn(), p->x, p->w, p->conv, p->y, p->fwd, &a));
  EMBER_CUDNN_CHECK(
      cudnnGetConvolutionBackwardDataWorkspaceSize(ctx.dnn(), p->w, p->y, p->conv, p->x, p->bwd_data, &b));
  EMBER_CUDNN_CHECK(
      cudnnGetConvolutionBackwardFilterWorkspaceSize(ctx.dnn(), p->x, p->y, p->conv, p->w, p->bwd_filter, &c));
  p->workspace = std::max({a, b, c});
  p->fused = fused_conv();
  if (p->fused) {
    EMBER_CUDNN_CHECK(cudnnSetActivationDescriptor(p->relu, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0));
    EMBER_CUDNN_CHECK(
        cudnnSetActivationDescriptor(p->identity, CUDNN_ACTIVATION_IDENTITY, CUDNN_NOT_PROPAGATE_NAN, 0.0));
    EMBER_CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(
        ctx.dnn(), p->x, p->w, p->conv, p->y, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, &p->fused_workspace));
  }
  return p;
}

Plan& plan_for(Context& ctx, const Conv2dShape& g, bool nhwc) {
  using Key = std::tuple<int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                         int64_t, bool, bool, bool, bool, bool>;
  static auto* cache = new PlanCache<Key, Plan>();
  const Key key{ctx.device(),
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
                nhwc};
  return cache->get(key, [&] { return make_plan(ctx, g, nhwc); });
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

// Workspace from the caching allocator (reused after the first step); empty when none is needed.
Tensor workspace(const Plan& p, int device) {
  return p.workspace
             ? Tensor::empty(Shape{static_cast<int64_t>((p.workspace + 3) / 4)}, DType::F32, Device::cuda(device))
             : Tensor();
}
const float* cp(const Tensor& t) { return static_cast<const float*>(t.raw()); }
float* mp(Tensor& t) { return static_cast<float*>(t.raw()); }
}  // namespace

void conv2d_forward(Context& ctx, const Conv2dShape& g, const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
  const Layout layout = x.layout();
  check_layout_fits(g, layout);
  check(ctx, x, {g.n, g.c, g.h, g.w}, "input", g, layout);
  check(ctx, w, {g.k, g.c, g.r, g.s}, "weights", g);
  check(ctx, b, {g.k}, "bias", g);
  check(ctx, y, {g.n, g.k, g.p, g.q}, "output", g, layout);
  if (asymmetric(g)) {
    conv2d_forward(ctx, padded_valid(g), pad_input(ctx, g, x, 0.0f), w, b, y);
    return;
  }
  Plan& p = plan_for(ctx, g, layout == Layout::NHWC);
  const float one = 1.0f, zero = 0.0f;
  if (p.fused) {  // y = act(conv(x) + 0 * y + bias): z is y itself, weighted 0
    Tensor ws = p.fused_workspace ? Tensor::empty(Shape{static_cast<int64_t>((p.fused_workspace + 3) / 4)}, DType::F32,
                                                  Device::cuda(ctx.device()))
                                  : Tensor();
    EMBER_CUDNN_CHECK(cudnnConvolutionBiasActivationForward(
        ctx.dnn(), &one, p.x, cp(x), p.w, cp(w), p.conv, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
        ws.defined() ? ws.raw() : nullptr, p.fused_workspace, &zero, p.y, mp(y), p.bias, cp(b),
        g.relu ? p.relu : p.identity, p.y, mp(y)));
    return;
  }
  Tensor ws = workspace(p, ctx.device());
  EMBER_CUDNN_CHECK(cudnnConvolutionForward(ctx.dnn(), &one, p.x, cp(x), p.w, cp(w), p.conv, p.fwd,
                                            ws.defined() ? ws.raw() : nullptr, p.workspace, &zero, p.y, mp(y)));
  EMBER_CUDNN_CHECK(cudnnAddTensor(ctx.dnn(), &one, p.bias, cp(b), &one, p.y_bias, mp(y)));
  if (g.relu) relu_forward(ctx, y, y);
  // The workspace returns to the allocator's cache now but is reused only by later work on the
  // same stream, which runs after this convolution: stream order keeps it safe.
}

void conv2d_backward(Context& ctx, const Conv2dShape& g, const Tensor& x, const Tensor& w, const Tensor& y,
                     const Tensor& dy, Tensor* dx, Tensor& dw, Tensor& db, bool dy_premasked) {
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
    conv2d_backward(ctx, v, pad_input(ctx, g, x, 0.0f), w, y, dy, dx ? &dxp : nullptr, dw, db, dy_premasked);
    if (dx)
      shift2d(ctx, static_cast<const float*>(dxp.raw()), g.n * g.c, v.h, v.w, static_cast<float*>(dx->raw()), g.h, g.w,
              -g.pad_top, -g.pad_left, 0.0f);
    return;
  }
  Plan& p = plan_for(ctx, g, layout == Layout::NHWC);
  const Tensor* grad = &dy;
  Tensor masked;
  if (g.relu && !dy_premasked) {
    masked = Tensor::empty(dy.shape(), DType::F32, dy.device(), layout);
    relu_backward(ctx, y, dy, masked);
    grad = &masked;
  }
  Tensor ws = workspace(p, ctx.device());
  void* wsp = ws.defined() ? ws.raw() : nullptr;
  const float one = 1.0f, zero = 0.0f;
  EMBER_CUDNN_CHECK(cudnnConvolutionBackwardBias(ctx.dnn(), &one, p.y_bias, cp(*grad), &zero, p.bias, mp(db)));
  EMBER_CUDNN_CHECK(cudnnConvolutionBackwardFilter(ctx.dnn(), &one, p.x, cp(x), p.y, cp(*grad), p.conv, p.bwd_filter,
                                                   wsp, p.workspace, &zero, p.w, mp(dw)));
  if (dx)
    EMBER_CUDNN_CHECK(cudnnConvolutionBackwardData(ctx.dnn(), &one, p.w, cp(w), p.y, cp(*grad), p.conv, p.bwd_data, wsp,
                                                   p.workspace, &zero, p.x, mp(*dx)));
}

std::string conv2d_kernel_info(Context& ctx, const Conv2dShape& g) {
  const bool nhwc = gpu_nhwc() && !asymmetric(g);  // as the dispatch (layers/ops/conv2d.cpp) decides
  const Plan& p = plan_for(ctx, asymmetric(g) ? padded_valid(g) : g, nhwc);
  return std::string(asymmetric(g) ? "explicit asymmetric padding + " : "") + (nhwc ? "NHWC, " : "NCHW, ") +
         "cuDNN fwd algo " + std::to_string(static_cast<int>(p.fwd)) + ", bwd-data algo " +
         std::to_string(static_cast<int>(p.bwd_data)) + ", bwd-filter algo " +
         std::to_string(static_cast<int>(p.bwd_filter)) + ", workspace " + std::to_string(p.workspace) + " bytes" +
         (p.deterministic ? ", deterministic" : ", not deterministic") +
         (p.found ? ", timed by cudnnFind" : ", by cuDNN's heuristics") +
         (p.fused ? ", forward fused (conv + bias + activation, implicit precomp GEMM)" : "");
}

}  // namespace ember::cuda
