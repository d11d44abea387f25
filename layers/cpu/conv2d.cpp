// Conv2D on oneDNN and Ember's own kernels: Winograd (conv2d_winograd.h: 3x3 stride-1 shapes with
// vector channel counts) and a direct weight gradient (conv2d_direct.h). The convolution policy
// (core/runtime.h) picks among them: Fast takes Winograd where it fits and oneDNN's or Ember's
// direct kernels elsewhere; Exact takes direct sums only. oneDNN's own Winograd is never used: it
// does not keep structural zeros exact (an output whose 3x3 window is all zero comes out as
// rounding residue), so every oneDNN primitive is asked for convolution_direct (convolution_auto
// may pick its Winograd). One Plan per shape, thread and policy holds the oneDNN primitives, the memory
// objects they run on (their data handles are pointed at the caller's tensors on each call),
// the reorders between Ember's (K,C,R,S) weights and the format each primitive prefers, and
// which passes run on Ember's kernels instead.
#include "conv2d.h"

#include <omp.h>

#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <vector>

#include "../../core/cpu/dnnl_context.h"
#include "../../core/pairwise_sum.h"
#include "../../core/runtime.h"
#include "conv2d_direct.h"
#include "conv2d_winograd.h"
#include "relu.h"

namespace ember::cpu {

namespace {
using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

struct Plan {
  bool exact = false;  // made under ConvAlgorithms::Exact (the cache key holds the policy)
  // forward
  dnnl::convolution_forward::primitive_desc fwd_pd;
  dnnl::convolution_forward fwd;
  memory src, dst, bias, wei_user, wei_fwd;  // wei_fwd == wei_user when no reorder is needed
  std::optional<dnnl::reorder> wei_to_fwd;
  // Ember's Winograd forward and backward-data (conv2d_winograd.h) where they fit, under Fast.
  bool own_winograd = false;
  WinogradConvScratch own_winograd_scratch;
  // Weight gradient in the layout oneDNN prefers for it (see blocked_weight_gradient): x and dy
  // reordered into it where that differs from NHWC.
  memory bwd_src_blk, bwd_diff_dst_blk;
  std::optional<dnnl::reorder> bwd_src_to_blk, bwd_diff_dst_to_blk;
  // backward (built on first use)
  bool bwd_ready = false;
  dnnl::convolution_backward_data::primitive_desc bwd_data_pd;
  dnnl::convolution_backward_data bwd_data;
  dnnl::convolution_backward_weights::primitive_desc bwd_w_pd;
  dnnl::convolution_backward_weights bwd_w;
  memory diff_dst, diff_src, diff_bias, diff_wei_user, diff_wei_bwd, wei_bwd;
  bool winograd_bwd_w = false;  // the weight gradient by conv2d_winograd.h instead of bwd_w
  WinogradScratch winograd_scratch;
  bool direct_bwd_w = false;  // else by conv2d_direct.h where it fits
  std::vector<float> direct_scratch;
  std::optional<dnnl::reorder> wei_to_bwd, diff_wei_to_user;
  Tensor masked_dy;               // dy * (y > 0) when ReLU is fused
  std::vector<float> group_sums;  // oneDNN's weight gradient per group of the batch (conv2d_backward)
};

memory::dims dims4(int64_t a, int64_t b, int64_t c, int64_t d) { return {a, b, c, d}; }

struct Descs {
  memory::desc src, dst, bias, wei_user, wei_any;
  memory::dims strides, pad_l, pad_r;
};

Descs descs(const Conv2dShape& g) {
  Descs d;
  d.src = memory::desc(dims4(g.n, g.c, g.h, g.w), dt::f32, tag::nhwc);
  d.dst = memory::desc(dims4(g.n, g.k, g.p, g.q), dt::f32, tag::nhwc);
  d.bias = memory::desc({g.k}, dt::f32, tag::x);
  d.wei_user = memory::desc(dims4(g.k, g.c, g.r, g.s), dt::f32, tag::oihw);
  d.wei_any = memory::desc(dims4(g.k, g.c, g.r, g.s), dt::f32, tag::any);
  d.strides = {g.stride_h, g.stride_w};
  d.pad_l = {g.pad_top, g.pad_left};
  d.pad_r = {g.pad_bottom, g.pad_right};
  return d;
}

// A memory in `want` format: the user memory itself when formats agree, else a new buffer.
memory maybe_own(const memory::desc& want, const memory& user) {
  return want == user.get_desc() ? user : memory(want, dnnl_engine());
}

// A one-channel input (the first layer on grey images): oneDNN's weight gradient runs ~2x faster
// with dy in its blocked layout (nChw16c) than in NHWC, the reorder included (0.57 -> 0.45 ms in
// the reference CNN's step, docs/benchmarks.md). With 32 or 64 input channels the NHWC kernels
// win (measured: 0.59 -> 0.65 ms and 2.15 -> 2.23 ms), so they keep them.
bool blocked_weight_gradient(const Conv2dShape& g) { return g.c == 1; }

// Ember's direct weight gradient (conv2d_direct.h) for 3x3 stride-1 kernels with at most 16 output
// positions per image (3x3, 4x4): oneDNN 2.6's NHWC weight gradient parallelises them poorly
// (measured at batch 64, 2 cores: 64 -> 64 channels with 3x3 outputs 0.43 -> 0.22 ms, 64 -> 128
// with 4x4 0.89 -> 0.77 ms). From 7x7 outputs up the two ran within 10% of each other either way,
// so larger ones keep oneDNN's; other kernels and strides were not measured, so they keep it too.
// Under Exact it takes every shape it fits, whatever the speed: its sums are in the same order at
// any thread count, oneDNN's are not.
bool direct_weight_gradient_shape(const Conv2dShape& g, bool exact) {
  return exact || (g.r == 3 && g.s == 3 && g.stride_h == 1 && g.stride_w == 1 && g.p * g.q <= 16);
}

Plan& plan_for(const Conv2dShape& g) {
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                         int64_t, int64_t, int64_t, bool, int, ConvAlgorithms>;
  thread_local std::map<Key, std::unique_ptr<Plan>> cache;
  // oneDNN splits the work for the thread count at creation and expects the same count when it
  // runs: a change of set_num_threads() needs new primitives (found by a test whose results
  // depended on the thread count of an earlier test in the same process).
  const Key key{g.n,
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
                g.pad_bottom,
                g.pad_right,
                g.relu,
                omp_get_max_threads(),
                conv_algorithms()};
  auto it = cache.find(key);
  if (it != cache.end()) return *it->second;

  auto plan = std::make_unique<Plan>();
  plan->exact = conv_algorithms() == ConvAlgorithms::Exact;
  const Descs d = descs(g);
  auto& eng = dnnl_engine();
  dnnl::convolution_forward::desc fd(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, d.src,
                                     d.wei_any, d.bias, d.dst, d.strides, d.pad_l, d.pad_r);
  dnnl::primitive_attr attr;
  if (g.relu) {
    dnnl::post_ops ops;
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    attr.set_post_ops(ops);
  }
  plan->fwd_pd = dnnl::convolution_forward::primitive_desc(fd, attr, eng);
  plan->src = memory(d.src, eng, DNNL_MEMORY_NONE);
  plan->dst = memory(d.dst, eng, DNNL_MEMORY_NONE);
  plan->bias = memory(d.bias, eng, DNNL_MEMORY_NONE);
  plan->wei_user = memory(d.wei_user, eng, DNNL_MEMORY_NONE);
  plan->own_winograd = !plan->exact && conv2d_winograd_forward_fits(g) && conv2d_winograd_backward_data_fits(g);
  plan->fwd = dnnl::convolution_forward(plan->fwd_pd);
  plan->wei_fwd = maybe_own(plan->fwd_pd.weights_desc(), plan->wei_user);
  if (plan->wei_fwd != plan->wei_user) plan->wei_to_fwd = dnnl::reorder(plan->wei_user, plan->wei_fwd);
  return *cache.emplace(key, std::move(plan)).first->second;
}

void ensure_backward(Plan& plan, const Conv2dShape& g) {
  if (plan.bwd_ready) return;
  const Descs d = descs(g);
  auto& eng = dnnl_engine();
  dnnl::convolution_backward_data::desc bdd(dnnl::algorithm::convolution_direct, d.src, d.wei_any, d.dst, d.strides,
                                            d.pad_l, d.pad_r);
  plan.bwd_data_pd = dnnl::convolution_backward_data::primitive_desc(bdd, eng, plan.fwd_pd);
  plan.bwd_data = dnnl::convolution_backward_data(plan.bwd_data_pd);
  if (blocked_weight_gradient(g)) {
    const memory::desc any_src(dims4(g.n, g.c, g.h, g.w), dt::f32, tag::any),
        any_dst(dims4(g.n, g.k, g.p, g.q), dt::f32, tag::any);
    dnnl::convolution_forward::desc hint_d(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                           any_src, d.wei_any, d.bias, any_dst, d.strides, d.pad_l, d.pad_r);
    dnnl::convolution_backward_weights::desc bwd(dnnl::algorithm::convolution_direct, any_src, d.wei_any, d.bias,
                                                 any_dst, d.strides, d.pad_l, d.pad_r);
    plan.bwd_w_pd = dnnl::convolution_backward_weights::primitive_desc(
        bwd, eng, dnnl::convolution_forward::primitive_desc(hint_d, eng));
    if (plan.bwd_w_pd.src_desc() != d.src) {
      plan.bwd_src_blk = memory(plan.bwd_w_pd.src_desc(), eng);
      plan.bwd_src_to_blk = dnnl::reorder(memory(d.src, eng, DNNL_MEMORY_NONE), plan.bwd_src_blk);
    }
    if (plan.bwd_w_pd.diff_dst_desc() != d.dst) {
      plan.bwd_diff_dst_blk = memory(plan.bwd_w_pd.diff_dst_desc(), eng);
      plan.bwd_diff_dst_to_blk = dnnl::reorder(memory(d.dst, eng, DNNL_MEMORY_NONE), plan.bwd_diff_dst_blk);
    }
  } else {
    dnnl::convolution_backward_weights::desc bwd(dnnl::algorithm::convolution_direct, d.src, d.wei_any, d.bias, d.dst,
                                                 d.strides, d.pad_l, d.pad_r);
    plan.bwd_w_pd = dnnl::convolution_backward_weights::primitive_desc(bwd, eng, plan.fwd_pd);
  }
  plan.bwd_w = dnnl::convolution_backward_weights(plan.bwd_w_pd);
  plan.winograd_bwd_w = !plan.exact && conv2d_winograd_weight_gradient_fits(g);
  plan.direct_bwd_w =
      !plan.winograd_bwd_w && direct_weight_gradient_shape(g, plan.exact) && conv2d_direct_weight_gradient_fits(g);

  plan.diff_dst = memory(d.dst, eng, DNNL_MEMORY_NONE);
  plan.diff_src = memory(d.src, eng, DNNL_MEMORY_NONE);
  plan.diff_bias = memory(d.bias, eng, DNNL_MEMORY_NONE);
  plan.diff_wei_user = memory(d.wei_user, eng, DNNL_MEMORY_NONE);
  plan.wei_bwd = maybe_own(plan.bwd_data_pd.weights_desc(), plan.wei_user);
  if (plan.wei_bwd != plan.wei_user) plan.wei_to_bwd = dnnl::reorder(plan.wei_user, plan.wei_bwd);
  plan.diff_wei_bwd = maybe_own(plan.bwd_w_pd.diff_weights_desc(), plan.diff_wei_user);
  if (plan.diff_wei_bwd != plan.diff_wei_user)
    plan.diff_wei_to_user = dnnl::reorder(plan.diff_wei_bwd, plan.diff_wei_user);
  plan.bwd_ready = true;
}

// oneDNN's weight gradient of one plan's batch: dw (K, C, R, S) and db (K), written (=).
void onednn_weight_gradient(Plan& plan, const float* x, const float* dy, float* dw, float* db) {
  auto& strm = dnnl_stream();
  plan.src.set_data_handle(const_cast<float*>(x));
  plan.diff_dst.set_data_handle(const_cast<float*>(dy));
  plan.diff_bias.set_data_handle(db);
  plan.diff_wei_user.set_data_handle(dw);
  if (plan.bwd_src_to_blk) plan.bwd_src_to_blk->execute(strm, plan.src, plan.bwd_src_blk);
  if (plan.bwd_diff_dst_to_blk) plan.bwd_diff_dst_to_blk->execute(strm, plan.diff_dst, plan.bwd_diff_dst_blk);
  plan.bwd_w.execute(strm, {{DNNL_ARG_SRC, plan.bwd_src_to_blk ? plan.bwd_src_blk : plan.src},
                            {DNNL_ARG_DIFF_DST, plan.bwd_diff_dst_to_blk ? plan.bwd_diff_dst_blk : plan.diff_dst},
                            {DNNL_ARG_DIFF_WEIGHTS, plan.diff_wei_bwd},
                            {DNNL_ARG_DIFF_BIAS, plan.diff_bias}});
  if (plan.diff_wei_to_user) plan.diff_wei_to_user->execute(strm, plan.diff_wei_bwd, plan.diff_wei_user);
  strm.wait();
}

void check_tensor(const Tensor& t, int64_t n, int64_t c, int64_t h, int64_t w, const char* what, const Conv2dShape& g) {
  const Shape want{n, c, h, w};
  EMBER_CHECK(t.shape() == want && t.layout() == Layout::NHWC && t.dtype() == DType::F32 && t.device().is_cpu(),
              ShapeError,
              std::string("conv2d (cpu): ") + what + " must be an f32 NHWC cpu tensor of shape " + want.str() +
                  " for " + g.str() + ", got " + t.str());
}

void check_params(const Conv2dShape& g, const Tensor& w, const Tensor& b, const char* what) {
  const Shape ws{g.k, g.c, g.r, g.s};
  EMBER_CHECK(
      w.shape() == ws && w.layout() == Layout::RowMajor && w.dtype() == DType::F32, ShapeError,
      std::string("conv2d (cpu): ") + what + " weights must be f32 (K, C, R, S) = " + ws.str() + ", got " + w.str());
  EMBER_CHECK(
      b.shape() == Shape{g.k} && b.dtype() == DType::F32, ShapeError,
      std::string("conv2d (cpu): ") + what + " bias must be f32 (" + std::to_string(g.k) + ",), got " + b.str());
}
}  // namespace

void conv2d_forward(const Conv2dShape& g, const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
  check_tensor(x, g.n, g.c, g.h, g.w, "input", g);
  check_tensor(y, g.n, g.k, g.p, g.q, "output", g);
  check_params(g, w, b, "the");
  Plan& plan = plan_for(g);
  if (plan.own_winograd) {
    conv2d_winograd_forward(g, x.f32(), w.f32(), b.f32(), y.f32(), plan.own_winograd_scratch);
    return;
  }
  auto& strm = dnnl_stream();
  plan.wei_user.set_data_handle(const_cast<float*>(w.f32()));
  if (plan.wei_to_fwd) plan.wei_to_fwd->execute(strm, plan.wei_user, plan.wei_fwd);
  plan.src.set_data_handle(const_cast<float*>(x.f32()));
  plan.bias.set_data_handle(const_cast<float*>(b.f32()));
  plan.dst.set_data_handle(y.f32());
  plan.fwd.execute(strm, {{DNNL_ARG_SRC, plan.src},
                          {DNNL_ARG_WEIGHTS, plan.wei_fwd},
                          {DNNL_ARG_BIAS, plan.bias},
                          {DNNL_ARG_DST, plan.dst}});
  strm.wait();
}

void conv2d_backward(const Conv2dShape& g, const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& dy,
                     Tensor* dx, Tensor& dw, Tensor& db, bool dy_premasked) {
  check_tensor(x, g.n, g.c, g.h, g.w, "input", g);
  check_tensor(y, g.n, g.k, g.p, g.q, "output", g);
  check_tensor(dy, g.n, g.k, g.p, g.q, "output gradient", g);
  if (dx) check_tensor(*dx, g.n, g.c, g.h, g.w, "input gradient", g);
  const bool params = dw.defined();  // undefined: a frozen layer, dx alone
  if (params) check_params(g, dw, db, "the gradient of the");
  const Shape ws{g.k, g.c, g.r, g.s};
  EMBER_CHECK(w.shape() == ws && w.layout() == Layout::RowMajor, ShapeError,
              "conv2d (cpu): weights must be " + ws.str() + ", got " + w.str());
  Plan& plan = plan_for(g);
  ensure_backward(plan, g);
  auto& strm = dnnl_stream();

  const Tensor* grad = &dy;
  if (g.relu && !dy_premasked) {
    ensure(plan.masked_dy, dy.shape(), DType::F32, dy.device(), Layout::NHWC);
    relu_backward(y, dy, plan.masked_dy);
    grad = &plan.masked_dy;
  }
  plan.diff_dst.set_data_handle(const_cast<float*>(grad->f32()));
  plan.src.set_data_handle(const_cast<float*>(x.f32()));

  if (!params) {
    // a frozen layer: no parameter gradient
  } else if (plan.winograd_bwd_w) {
    conv2d_winograd_weight_gradient(g, x.f32(), grad->f32(), dw.f32(), db.f32(), plan.winograd_scratch);
  } else if (plan.direct_bwd_w) {
    conv2d_direct_weight_gradient(g, x.f32(), grad->f32(), dw.f32(), db.f32(), plan.direct_scratch);
  } else if (batch_groups(g.n) <= 1) {
    onednn_weight_gradient(plan, x.f32(), grad->f32(), dw.f32(), db.f32());
  } else {
    // The batch's sum order (core/pairwise_sum.h): each group of 16 images by its own plan (the
    // shape with the group's rows), the groups' dw and db added as the pairwise tree.
    const int64_t groups = batch_groups(g.n), wsize = dw.numel(), part = wsize + g.k;
    plan.group_sums.resize(size_t(groups * part));
    for (int64_t j = 0; j < groups; ++j) {
      Conv2dShape gs = g;
      gs.n = std::min(kBatchGroupRows, g.n - j * kBatchGroupRows);
      Plan& gp = plan_for(gs);
      ensure_backward(gp, gs);
      float* const out = plan.group_sums.data() + j * part;
      onednn_weight_gradient(gp, x.f32() + j * kBatchGroupRows * g.h * g.w * g.c,
                             grad->f32() + j * kBatchGroupRows * g.p * g.q * g.k, out, out + wsize);
    }
    pairwise_reduce(plan.group_sums.data(), groups, part, part);
    std::copy_n(plan.group_sums.data(), wsize, dw.f32());
    std::copy_n(plan.group_sums.data() + wsize, g.k, db.f32());
  }

  if (dx && plan.own_winograd) {
    conv2d_winograd_backward_data(g, grad->f32(), w.f32(), dx->f32(), plan.own_winograd_scratch);
  } else if (dx) {
    plan.wei_user.set_data_handle(const_cast<float*>(w.f32()));
    if (plan.wei_to_bwd) plan.wei_to_bwd->execute(strm, plan.wei_user, plan.wei_bwd);
    plan.diff_src.set_data_handle(dx->f32());
    plan.bwd_data.execute(
        strm,
        {{DNNL_ARG_DIFF_DST, plan.diff_dst}, {DNNL_ARG_WEIGHTS, plan.wei_bwd}, {DNNL_ARG_DIFF_SRC, plan.diff_src}});
  }
  strm.wait();
}

std::string conv2d_kernel_info(const Conv2dShape& g) {
  Plan& plan = plan_for(g);
  ensure_backward(plan, g);
  const size_t scratch = plan.fwd_pd.scratchpad_desc().get_size() + plan.bwd_data_pd.scratchpad_desc().get_size() +
                         plan.bwd_w_pd.scratchpad_desc().get_size();
  const std::string own = "ember winograd F(4x4,3x3)";
  return std::string("fwd ") + (plan.own_winograd ? own : "oneDNN " + std::string(plan.fwd_pd.impl_info_str())) +
         ", bwd-data " + (plan.own_winograd ? own : "oneDNN " + std::string(plan.bwd_data_pd.impl_info_str())) +
         ", bwd-weights " +
         (plan.winograd_bwd_w ? own
          : plan.direct_bwd_w ? std::string("ember direct")
                              : "oneDNN " + std::string(plan.bwd_w_pd.impl_info_str())) +
         ", workspace " + std::to_string(scratch) + " bytes (N=" + std::to_string(g.n) + ")";
}

}  // namespace ember::cpu
