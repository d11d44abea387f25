// Dense through cuBLASLt's epilogues (set_fused_dense; issue 34, C2): the forward with the bias
// (+ ReLU) epilogue and the weight gradient with the bias-gradient epilogue, against the CPU and
// against the unfused cuBLAS path. Skips, saying why, without a usable GPU (CI here);
// scripts/gpu_check.sh runs it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "gpu_test_util.h"
#include "layers/cpu/dense.h"
#include "layers/cuda/dense.h"

namespace ember {
namespace {

using test::bits;
using test::nan_on_gpu;
using test::rel_error;

const Device kGpu = Device::cuda(0);

class FusedDense : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no usable GPU: " << cuda_status().reason;
    set_allow_tf32(false);  // parity with the CPU is checked in FP32
  }
  void TearDown() override { set_fused_dense(false); }
  cuda::Context& ctx() { return cuda::context(0); }
};

struct DenseRun {
  Tensor y, dz, dx, dw, db;
};

// One shape, ReLU or not: the unfused and the fused GPU paths, each against the CPU. The forward
// against the CPU's; the backward against the CPU's backward run with that path's own y, so that
// both apply the same ReLU mask (the GEMMs' orders of summation may put a pre-activation within
// rounding of 0 on the other side: that is counted, and allowed only there). Sums of up to 576
// products or 1024 rows in other orders: ~1e-6 relative; the tall-skinny case's dw and db sum
// 70001 rows (a float sum of that length is ~1e-5 from exact: 1e-4). A missing bias, a bias on
// the wrong axis or a transposed operand errs by O(0.1-1).
void check_shape(cuda::Context& ctx, int64_t n, int64_t in, int64_t out) {
  const double tol = n > 1024 ? 1e-4 : 1e-5;
  for (const bool relu : {true, false}) {
    const std::string what =
        std::to_string(n) + "x" + std::to_string(in) + "->" + std::to_string(out) + (relu ? " relu" : " linear");
    SCOPED_TRACE(what);
    const Tensor x = test::random_tensor(Shape{n, in}, 5), w = test::random_tensor(Shape{out, in}, 6, -0.2f, 0.2f),
                 b = test::random_tensor(Shape{out}, 7);
    const Tensor dy = test::random_tensor(Shape{n, out}, 8);
    Tensor z = Tensor::empty(Shape{n, out}), y = Tensor::empty(Shape{n, out});
    cpu::dense_forward(x, w, b, false, z);  // the pre-activation
    cpu::dense_forward(x, w, b, relu, y);
    const Tensor xg = x.to(kGpu), wg = w.to(kGpu), bg = b.to(kGpu), dyg = dy.to(kGpu);
    auto run = [&](bool fused) {
      set_fused_dense(fused);
      DenseRun r{nan_on_gpu(y.shape()), nan_on_gpu(dy.shape()), nan_on_gpu(x.shape()), nan_on_gpu(w.shape()),
                 nan_on_gpu(b.shape())};
      cuda::dense_forward(ctx, xg, wg, bg, relu, r.y);
      cuda::dense_backward(ctx, xg, wg, r.y, dyg, relu, r.dz, &r.dx, r.dw, r.db);
      ctx.synchronize();
      return r;
    };
    const auto path = [&](const DenseRun& r) {
      set_fused_dense(true);
      return cuda::dense_kernel_info(ctx, xg, wg, bg, relu, r.y, r.dw);
    };
    const DenseRun plain = run(false);
    const std::string before = path(plain);
    std::printf("%s: %s\n", what.c_str(), before.c_str());
    const DenseRun fused = run(true), again = run(true);
    // The forward epilogue is what this test is for: a silent fall-back, before or while the
    // fused runs ran (a plan that fails as "not supported" switches off with a warning), must not
    // pass it. FP32 BGRADB may not exist (cuBLASLt's bias-gradient epilogues are documented for
    // half types first): printed, not failed.
    const std::string expected = relu ? "cublasLt RELU_BIAS;" : "cublasLt BIAS;";
    EXPECT_EQ(before.rfind(expected, 0), 0u) << before;
    const std::string after = path(fused);
    EXPECT_EQ(after, before) << "the fused path changed while it ran";
    const std::pair<const Tensor*, const Tensor*> twice[] = {{&again.y, &fused.y},
                                                             {&again.dx, &fused.dx},
                                                             {&again.dw, &fused.dw},
                                                             {&again.db, &fused.db},
                                                             {&again.dz, &fused.dz}};
    for (const auto& [second, first] : twice)
      EXPECT_EQ(bits(*second), bits(*first)) << "fused twice";  // deterministic on one GPU
    EXPECT_LE(rel_error(fused.y.to_vector(), plain.y.to_vector()), 1e-5) << "fused against unfused";
    for (const DenseRun* r : {&plain, &fused}) {
      const char* which = r == &plain ? "unfused" : "fused";
      EXPECT_LE(rel_error(r->y.to_vector(), y.to_vector()), 1e-5) << which;
      DenseRun ref{Tensor(), Tensor::empty(dy.shape()), Tensor::empty(x.shape()), Tensor::empty(w.shape()),
                   Tensor::empty(b.shape())};
      ref.y = r->y.to(Device::cpu());
      cpu::dense_backward(x, w, ref.y, dy, relu, ref.dz, &ref.dx, ref.dw, ref.db);
      if (relu) {
        EXPECT_EQ(r->dz.to_vector(), ref.dz.to_vector()) << which;  // the same mask: exact
        const test::ReluFlips flips = test::relu_flips(ref.y, z);
        EXPECT_EQ(flips.far, 0) << which << ": " << flips.all << " ReLU decisions differ from the CPU's";
        EXPECT_LE(flips.all, n * out / 1000) << which;
      }
      EXPECT_LE(rel_error(r->dx.to_vector(), ref.dx.to_vector()), 1e-5) << which;
      EXPECT_LE(rel_error(r->dw.to_vector(), ref.dw.to_vector()), tol) << which;
      EXPECT_LE(rel_error(r->db.to_vector(), ref.db.to_vector()), tol) << which;
    }
    EXPECT_EQ(dyg.to_vector(), dy.to_vector());  // dy is read only
  }
}

// Fewer columns than a column-sum block, 1024 rows over 70 columns, and the reference CNN's two
// Dense layers at batch 64.
TEST_F(FusedDense, EpiloguesMatchTheCpuAndTheUnfusedPath) {
  for (const auto& [n, in, out] :
       std::vector<std::tuple<int64_t, int64_t, int64_t>>{{37, 131, 29}, {1024, 64, 70}, {64, 576, 64}, {64, 64, 10}})
    check_shape(ctx(), n, in, out);
}

// A tall-skinny product whose rows are only 4-byte aligned (70001 x 3 -> 5): the kind of shape on
// which PyTorch backed out a cuBLASLt bias fusion (an execution failure on an A100). Its own test,
// last in the file, so that a sticky CUDA error it may cause does not hide the shapes above.
TEST_F(FusedDense, ATallSkinnyProductMatchesTheCpu) { check_shape(ctx(), 70001, 3, 5); }

}  // namespace
}  // namespace ember
