// Dense with cuBLAS. cuBLAS is column-major: a row-major (r x c) matrix is its column-major
// (c x r) transpose, so each row-major product below is written as the transposed product.
// Under set_fused_dense the forward and the weight gradient are cuBLASLt calls whose epilogues
// add the bias (+ ReLU) and write the bias gradient (docs/plans/gpu-fewer-launches.md, 2a).
#include "dense.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "../../core/cuda/check.h"
#include "../../core/cuda_graph.h"
#include "../../core/log.h"
#include "../../core/runtime.h"
#include "bf16.h"
#include "dense_kernels.h"
#include "plan_cache.h"
#include "relu.h"

namespace ember::cuda {

namespace {
void check(const Context& ctx, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) {
  const Device d = Device::cuda(ctx.device());
  EMBER_CHECK(x.rank() == 2 && w.rank() == 2 && x.dim(1) == w.dim(1) && b.shape() == Shape{w.dim(0)} &&
                  y.shape() == (Shape{x.dim(0), w.dim(0)}),
              ShapeError,
              "dense (cuda): x " + x.shape().str() + ", w " + w.shape().str() + ", b " + b.shape().str() + ", y " +
                  y.shape().str() + " do not fit");
  for (const Tensor* t : {&x, &w, &b, &y})
    EMBER_CHECK(t->dtype() == DType::F32 && t->device() == d && t->layout() == Layout::RowMajor, ShapeError,
                "dense (cuda): expects f32 row-major tensors on " + d.str() + ", got " + t->str());
}
const float* cp(const Tensor& t) { return static_cast<const float*>(t.raw()); }
float* mp(Tensor& t) { return static_cast<float*>(t.raw()); }

// --- cuBLASLt epilogues --------------------------------------------------------------------------

// The largest power of two <= 256 that divides the address (cuBLASLt's alignment preferences:
// an algorithm chosen for the real alignment cannot meet a misaligned pointer).
int64_t alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  int64_t al = 256;
  while (al > 1 && a % static_cast<uintptr_t>(al) != 0) al /= 2;
  return al;
}

// One epilogue-fused GEMM, made once per key: the descriptor (compute type, transposes,
// epilogue), the layouts and the heuristic's algorithm. `ok` false: cuBLASLt offers no
// algorithm for it, or one failed when it ran; the unfused calls run instead, for good.
enum class LtGemm : int64_t { Forward = 1, WeightGrad = 2 };
struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
  std::atomic<bool> ok{false};
  std::string why;  // why not ok (for dense_kernel_info and the warning)
  std::mutex mu;    // guards `why` and the switch-off
  LtPlan() = default;
  LtPlan(const LtPlan&) = delete;
  LtPlan& operator=(const LtPlan&) = delete;
  // Runs only when making the plan threw (a kept plan lives as long as the process: PlanCache).
  ~LtPlan() {
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

// The attributes set below are documented as 32-bit values (cublasLt.h: TRANSA/TRANSB int32_t,
// EPILOGUE uint32_t, BIAS_DATA_TYPE int32_t); set_desc passes sizeof the value given.
static_assert(sizeof(cublasOperation_t) == 4 && sizeof(cublasLtEpilogue_t) == 4 && sizeof(cudaDataType_t) == 4);
template <typename T>
void set_desc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const T& v) {
  EMBER_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof v));
}

// Key: {gemm, device, n, in, out, relu, tf32, alignments of the three matrices and the bias}.
using LtKey = std::array<int64_t, 11>;
PlanCache<11, LtPlan>& lt_cache() {
  static auto* cache = new PlanCache<11, LtPlan>();  // never destroyed (plan_cache.h)
  return *cache;
}

// The plan of the forward (D = Y^T (out x n) = op(W) X^T with the bias over D's rows, + ReLU) or
// of the weight gradient (D = dW^T (in x out) = X^T op(G) with the bias gradient over D's
// columns: the sums of G's rows' values per output, what column_sums computes).
// `bias` is set before the heuristic, which reads its alignment (cublasLt.h, BIAS_POINTER).
std::unique_ptr<LtPlan> make_lt_plan(Context& ctx, const LtKey& k, const void* bias) {
  auto p = std::make_unique<LtPlan>();
  const auto gemm = static_cast<LtGemm>(k[0]);
  const uint64_t n = static_cast<uint64_t>(k[2]), in = static_cast<uint64_t>(k[3]), out = static_cast<uint64_t>(k[4]);
  const bool relu = k[5] != 0, tf32 = k[6] != 0;
  // TF32 is part of the descriptor (cuBLASLt ignores the cuBLAS handle's math mode): FP32 FMA
  // unless allowed, as the cuBLAS path.
  EMBER_CUBLAS_CHECK(
      cublasLtMatmulDescCreate(&p->desc, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cudaDataType_t bias_type = CUDA_R_32F;
  set_desc(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bias_type);
  set_desc(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  if (gemm == LtGemm::Forward) {
    // Y^T(out, n) = W(out, in) X^T(in, n): A = W stored (in x out, ld in) transposed, B = X^T (in x n, ld in).
    set_desc(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
    set_desc(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
    set_desc(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS);
    EMBER_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_32F, in, out, static_cast<int64_t>(in)));
    EMBER_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_32F, in, n, static_cast<int64_t>(in)));
    EMBER_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->d, CUDA_R_32F, out, n, static_cast<int64_t>(out)));
  } else {
    // dW^T(in, out) = X^T(in, n) G(n, out): A = X^T (in x n, ld in), B = G^T stored (out x n, ld out) transposed.
    set_desc(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_N);
    set_desc(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_T);
    set_desc(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BGRADB);
    EMBER_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_32F, in, n, static_cast<int64_t>(in)));
    EMBER_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_32F, out, n, static_cast<int64_t>(out)));
    EMBER_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->d, CUDA_R_32F, in, out, static_cast<int64_t>(in)));
  }
  cublasLtMatmulPreference_t pref = nullptr;
  EMBER_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const Context::BlasWorkspace ws = ctx.blas_workspace();
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  try {
    const uint64_t max_ws = ws.bytes;
    EMBER_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws, sizeof max_ws));
    const cublasLtMatmulPreferenceAttributes_t align_attr[] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    const uint32_t aligns[] = {static_cast<uint32_t>(k[7]), static_cast<uint32_t>(k[8]), static_cast<uint32_t>(k[9]),
                               static_cast<uint32_t>(k[9])};
    for (int i = 0; i < 4; ++i)
      EMBER_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, align_attr[i], &aligns[i], sizeof aligns[i]));
    status = cublasLtMatmulAlgoGetHeuristic(ctx.blas_lt(), p->desc, p->a, p->b, p->d, p->d, pref, 1, &result, &found);
  } catch (...) {
    cublasLtMatmulPreferenceDestroy(pref);
    throw;
  }
  cublasLtMatmulPreferenceDestroy(pref);
  if (status == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS) {
    p->algo = result.algo;
    p->workspace = result.workspaceSize;
    p->ok = true;
  } else {
    p->why = std::string("cuBLASLt offers no algorithm (") +
             (status == CUBLAS_STATUS_SUCCESS ? "none found" : detail::cublas_status_name(status)) + ")";
    ::ember::log(LogLevel::warn, std::string("dense (cuda): ") +
                                     (gemm == LtGemm::Forward ? "the fused forward" : "the fused weight gradient") +
                                     " of " + std::to_string(n) + "x" + std::to_string(in) + " -> " +
                                     std::to_string(out) + ": " + p->why +
                                     "; the GEMM and its bias kernel run apart for this shape");
  }
  return p;
}

// The plan for this GEMM (made the first time), or null where none applies: the switch is off,
// a dimension is 0, or the bias pointer is not 16-byte aligned (cuBLASLt's alignment preferences
// do not cover it).
LtPlan* find_lt_plan(Context& ctx, ::ember::detail::GpuPlanSlot* slot, LtGemm gemm, int64_t n, int64_t in, int64_t out,
                     bool relu, const void* a, const void* b, const void* d, const void* bias) {
  if (!fused_dense() || n == 0 || in == 0 || out == 0 || alignment(bias) < 16) return nullptr;
  const LtKey key{static_cast<int64_t>(gemm),
                  ctx.device(),
                  n,
                  in,
                  out,
                  relu ? 1 : 0,
                  allow_tf32() ? 1 : 0,
                  alignment(a),
                  alignment(b),
                  alignment(d),
                  alignment(bias)};
  // Inside a CUDA graph capture no plan is made (cuBLASLt's handle and heuristic belong to eager
  // steps): the call runs fused only with the plan its op state found before the capture.
  if (CudaGraph::capturing(Device::cuda(ctx.device()))) return slot ? lt_cache().in_slot(*slot, key) : nullptr;
  const auto make = [&] { return make_lt_plan(ctx, key, bias); };
  return slot ? &lt_cache().get(*slot, key, make) : &lt_cache().get(key, make);
}

// The same, null also when the plan cannot run (no algorithm, or it failed when it ran).
LtPlan* lt_plan(Context& ctx, ::ember::detail::GpuPlanSlot* slot, LtGemm gemm, int64_t n, int64_t in, int64_t out,
                bool relu, const void* a, const void* b, const void* d, const void* bias) {
  LtPlan* p = find_lt_plan(ctx, slot, gemm, n, in, out, relu, a, b, d, bias);
  return p && p->ok.load(std::memory_order_relaxed) ? p : nullptr;
}

// Runs a plan's GEMM with `bias` as the epilogue's bias (forward) or bias-gradient (weight
// gradient) pointer. False when it failed in a way that is the algorithm's ("not supported",
// invalid value, misaligned): the plan is switched off for good with a warning and the caller
// runs the unfused calls. Any other failure, or any failure inside a CUDA graph capture (the
// eager steps before it ran this plan), throws.
bool run_lt(Context& ctx, LtPlan& p, const char* what, const void* a, const void* b, void* d, const void* bias) {
  set_desc(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);  // a host value copied into the launch
  const Context::BlasWorkspace ws = ctx.blas_workspace();
  const float one = 1.0f, zero = 0.0f;
  const cublasStatus_t status = cublasLtMatmul(ctx.blas_lt(), p.desc, &one, a, p.a, b, p.b, &zero, d, p.d, d, p.d,
                                               &p.algo, ws.ptr, std::min(p.workspace, ws.bytes), ctx.stream());
  if (status == CUBLAS_STATUS_SUCCESS) return true;
  (void)cudaGetLastError();  // a non-sticky error the failed call left
  const std::string why =
      std::string("dense (cuda): the cuBLASLt ") + what + " failed: " + detail::cublas_status_name(status);
  const bool its_own = status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE ||
                       status == CUBLAS_STATUS_ARCH_MISMATCH;
  if (!its_own || CudaGraph::capturing(Device::cuda(ctx.device()))) throw CublasError(why);
  std::lock_guard lock(p.mu);
  if (p.ok.exchange(false)) {
    p.why = "it failed when it ran (" + std::string(detail::cublas_status_name(status)) + ")";
    ::ember::log(LogLevel::warn, why + "; the GEMM and its bias kernel run apart from now on");
  }
  return false;
}

// --- mixed_bf16 -------------------------------------------------------------------------------

// c (fp32) = op(a) op(b) with a and b bf16 (column-major, as cublasSgemm's arguments): cuBLAS's
// bf16 GEMM with fp32 accumulation (tensor cores; the handle's default math allows them for
// 16-bit inputs) and an fp32 result, as the CPU's matmul_bf16.
void gemm_bf16(Context& ctx, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void* a, int lda,
               const void* b, int ldb, float* c, int ldc) {
  const float one = 1.0f, zero = 0.0f;
  EMBER_CUBLAS_CHECK(cublasGemmEx(ctx.blas(), ta, tb, m, n, k, &one, a, CUDA_R_16BF, lda, b, CUDA_R_16BF, ldb, &zero, c,
                                  CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace

void dense_forward(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& b, bool relu, Tensor& y,
                   ::ember::detail::GpuPlanSlot* slot, bool bf16) {
  check(ctx, x, w, b, y);
  const int n = static_cast<int>(x.dim(0)), in = static_cast<int>(x.dim(1)), out = static_cast<int>(w.dim(0));
  if (bf16) {
    const Tensor xb = rounded_bf16(ctx, x), wb = rounded_bf16(ctx, w);
    gemm_bf16(ctx, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, wb.raw(), in, xb.raw(), in, mp(y), out);  // as below
    bias_activation(ctx, mp(y), cp(b), n, out, relu);
    return;
  }
  if (LtPlan* p = lt_plan(ctx, slot, LtGemm::Forward, n, in, out, relu, w.raw(), x.raw(), y.raw(), b.raw()))
    if (run_lt(ctx, *p, "forward", w.raw(), x.raw(), y.raw(), b.raw())) return;
  const float one = 1.0f, zero = 0.0f;
  // Y(N,O) = X(N,I) W(O,I)^T  <=>  col-major Y^T(O,N) = W(O,I) X^T(I,N)
  EMBER_CUBLAS_CHECK(
      cublasSgemm(ctx.blas(), CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &one, cp(w), in, cp(x), in, &zero, mp(y), out));
  bias_activation(ctx, mp(y), cp(b), n, out, relu);
}

void dense_backward(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& dy, bool relu,
                    Tensor& dz, Tensor* dx, Tensor& dw, Tensor& db, ::ember::detail::GpuPlanSlot* slot, bool bf16) {
  check(ctx, x, w, db, dy);
  EMBER_CHECK(dw.shape() == w.shape() && y.shape() == dy.shape(), ShapeError,
              "dense (cuda): gradient shapes do not match");
  if (dx) EMBER_CHECK(dx->shape() == x.shape(), ShapeError, "dense (cuda): dx must be " + x.shape().str());
  const int n = static_cast<int>(x.dim(0)), in = static_cast<int>(x.dim(1)), out = static_cast<int>(w.dim(0));
  if (relu) relu_backward(ctx, y, dy, dz);  // checks dz: f32, dy's shape, this device
  const Tensor& g = relu ? dz : dy;
  if (bf16) {  // the gradient rounded to bf16 for both products; db from its fp32 values
    const Tensor gb = rounded_bf16(ctx, g), xb = rounded_bf16(ctx, x);
    gemm_bf16(ctx, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, xb.raw(), in, gb.raw(), out, mp(dw), in);  // as below
    column_sums(ctx, cp(g), mp(db), n, out);
    if (dx) {
      const Tensor wb = rounded_bf16(ctx, w);
      gemm_bf16(ctx, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, wb.raw(), in, gb.raw(), out, mp(*dx), in);
    }
    return;
  }
  const float one = 1.0f, zero = 0.0f;
  bool fused = false;
  if (LtPlan* p = lt_plan(ctx, slot, LtGemm::WeightGrad, n, in, out, false, x.raw(), g.raw(), dw.raw(), db.raw()))
    fused = run_lt(ctx, *p, "weight gradient", x.raw(), g.raw(), dw.raw(), db.raw());
  if (!fused) {
    // dW(O,I) = dY(N,O)^T X(N,I)  <=>  col-major dW^T(I,O) = X^T(I,N) dY(N,O)
    EMBER_CUBLAS_CHECK(
        cublasSgemm(ctx.blas(), CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, &one, cp(x), in, cp(g), out, &zero, mp(dw), in));
    column_sums(ctx, cp(g), mp(db), n, out);
  }
  if (dx) {
    // dX(N,I) = dY(N,O) W(O,I)  <=>  col-major dX^T(I,N) = W^T(I,O) dY^T(O,N)
    EMBER_CUBLAS_CHECK(
        cublasSgemm(ctx.blas(), CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, &one, cp(w), in, cp(g), out, &zero, mp(*dx), in));
  }
}

std::string dense_kernel_info(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& b, bool relu,
                              const Tensor& y, const Tensor& dw) {
  check(ctx, x, w, b, y);
  if (!fused_dense()) return "unfused (set_fused_dense is off)";
  const int64_t n = x.dim(0), in = x.dim(1), out = w.dim(0);
  const auto describe = [&](LtGemm gemm, const char* epilogue, const void* a, const void* bb, const void* d) {
    LtPlan* p = find_lt_plan(ctx, nullptr, gemm, n, in, out, gemm == LtGemm::Forward && relu, a, bb, d, b.raw());
    if (!p)
      return std::string(alignment(b.raw()) < 16 ? "unfused (the bias is not 16-byte aligned)" : "unfused (empty)");
    if (p->ok.load(std::memory_order_relaxed)) return std::string("cublasLt ") + epilogue;
    std::lock_guard lock(p->mu);
    return "unfused (" + p->why + ")";
  };
  // The weight gradient reads x and dy (y's shape) and writes dw: y stands in for dy (alignment).
  return describe(LtGemm::Forward, relu ? "RELU_BIAS" : "BIAS", w.raw(), x.raw(), y.raw()) + "; " +
         describe(LtGemm::WeightGrad, "BGRADB", x.raw(), y.raw(), dw.raw());
}

void matmul(Context& ctx, const Tensor& a, const Tensor& b, Tensor& c) {
  const Device d = Device::cuda(ctx.device());
  for (const Tensor* t : {&a, &b, static_cast<const Tensor*>(&c)})
    EMBER_CHECK(t->rank() == 2 && t->dtype() == DType::F32 && t->device() == d && t->layout() == Layout::RowMajor,
                ShapeError, "matmul (cuda): expects 2-D f32 row-major tensors on " + d.str() + ", got " + t->str());
  EMBER_CHECK(a.dim(1) == b.dim(0) && c.dim(0) == a.dim(0) && c.dim(1) == b.dim(1), ShapeError,
              "matmul (cuda): " + a.shape().str() + " x " + b.shape().str() + " -> " + c.shape().str() + " do not fit");
  const int m = static_cast<int>(a.dim(0)), k = static_cast<int>(a.dim(1)), n = static_cast<int>(b.dim(1));
  if (m == 0 || n == 0) return;
  const float one = 1.0f, zero = 0.0f;
  // C(M,N) = A(M,K) B(K,N)  <=>  col-major C^T(N,M) = B^T(N,K) A^T(K,M)
  EMBER_CUBLAS_CHECK(
      cublasSgemm(ctx.blas(), CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, cp(b), n, cp(a), k, &zero, mp(c), n));
}

}  // namespace ember::cuda
