// The CUDA-library check macros (CUDA builds only): each turns a failing call into its typed
// error naming the statement, the file and the library's own words. The calls chosen fail the
// same way with or without a GPU, so this runs on every machine that builds CUDA.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/cuda/check.h"
#include "ember.h"
#include "layers/cuda/algo_choice.h"
#ifdef EMBER_WITH_NCCL
#include "core/cuda/nccl_check.h"
#endif

namespace {

template <typename E, typename F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "no exception of the expected type";
  return "";
}

TEST(CudaChecks, CudaErrorNamesStatementFileAndReason) {
  const std::string m = message_of<ember::CudaError>([] { EMBER_CUDA_CHECK(cudaSetDevice(100000)); });
  EXPECT_NE(m.find("cudaSetDevice(100000)"), std::string::npos) << m;
  EXPECT_NE(m.find("test_cuda_checks.cpp"), std::string::npos) << m;
  EXPECT_NE(m.find("CUDA error: cuda"), std::string::npos) << m;  // cudaErrorInvalidDevice / NoDevice / ...
}

// The status probe reads properties only: no primary context on any GPU (each costs hundreds
// of MB, and a busy exclusive-process GPU would refuse it), and the thread's device unchanged.
// The driver API is asked through dlopen: the test binary does not link libcuda. "" when that
// holds, else what failed.
std::string probe_problem() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return "skipped: no libcuda.so.1";
  using Init = int (*)(unsigned);
  using Get = int (*)(int*, int);
  using State = int (*)(int, unsigned*, int*);
  const auto init = reinterpret_cast<Init>(dlsym(lib, "cuInit"));
  const auto get = reinterpret_cast<Get>(dlsym(lib, "cuDeviceGet"));
  const auto state = reinterpret_cast<State>(dlsym(lib, "cuDevicePrimaryCtxGetState"));
  if (!init || !get || !state) return "libcuda.so.1 lacks cuInit, cuDeviceGet or cuDevicePrimaryCtxGetState";
  int before = -1, after = -2;
  (void)cudaGetDevice(&before);
  const ember::CudaStatus& st = ember::cuda_status();
  (void)cudaGetDevice(&after);
  if (!st.usable) return "skipped: no usable GPU: " + st.reason;
  if (after != before) return "the probe changed the current device";
  if (init(0) != 0) return "cuInit failed";
  // Whether each GPU has a primary context: `opened` the one that must, or none.
  const auto contexts_are = [&](int opened) -> std::string {
    for (const ember::GpuInfo& g : st.gpus) {
      int dev = -1, active = -1;
      unsigned flags = 0;
      if (get(&dev, g.index) != 0 || state(dev, &flags, &active) != 0)
        return "cannot ask cuda:" + std::to_string(g.index);
      if (active != (g.index == opened ? 1 : 0))
        return "cuda:" + std::to_string(g.index) + (active ? " has a context" : " has no context");
    }
    return "";
  };
  if (std::string p = contexts_are(-1); !p.empty()) return "after the probe: " + p;
  // The first tensor on cuda:0 opens that GPU, and only that one.
  ember::Tensor t = ember::Tensor::zeros(ember::Shape{4}, ember::DType::F32, ember::Device::cuda(0));
  if (std::string p = contexts_are(0); !p.empty()) return "after a tensor on cuda:0: " + p;
  dlclose(lib);
  return "";
}

// In a fresh process of this binary (gtest's threadsafe death-test style re-executes it): earlier
// tests here ran the probe already (the check macros ask it) and made a context (NCCL's
// ncclCommInitAll restores the device with cudaSetDevice, which makes one). Nothing before the
// death test may ask the probe: the child runs the test body from its start.
TEST(CudaStatus, TheProbeCreatesNoContextAndLeavesTheCurrentDevice) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  static int child = -1;  // the fresh process's exit code: 0 held, 1 failed, 2 skipped
  EXPECT_EXIT(
      {
        const std::string problem = probe_problem();
        std::fprintf(stderr, "%s\n", problem.empty() ? "the probe holds" : problem.c_str());
        std::fflush(stderr);
        std::_Exit(problem.empty() ? 0 : problem.rfind("skipped:", 0) == 0 ? 2 : 1);
      },
      [](int status) {
        child = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        return child == 0 || child == 2;
      },
      "the probe holds|skipped:");
  if (!ember::cuda_status().usable) GTEST_SKIP() << "no usable GPU: " << ember::cuda_status().reason;
  EXPECT_EQ(child, 0) << "the fresh process skipped the check where this one has a usable GPU";
}

// The cuDNN algorithm rule, on made-up lists (no GPU needed): never an entry that failed, never
// one needing more workspace than the budget, never one that transforms its inputs (Winograd,
// FFT: structural zeros would become residue), and in deterministic mode never a
// nondeterministic one, even when it is the only fast one left.
TEST(CudnnAlgoChoice, SkipsFailedOversizedTransformingAndNondeterministicEntries) {
  using Perf = cudnnConvolutionBwdFilterAlgoPerf_t;
  const auto entry = [](cudnnConvolutionBwdFilterAlgo_t algo, cudnnStatus_t status, size_t memory,
                        cudnnDeterminism_t det) {
    Perf p{};
    p.algo = algo;
    p.status = status;
    p.memory = memory;
    p.determinism = det;
    return p;
  };
  const Perf list[] = {
      entry(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, CUDNN_STATUS_NOT_SUPPORTED, 0, CUDNN_DETERMINISTIC),
      entry(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING, CUDNN_STATUS_SUCCESS, 0, CUDNN_DETERMINISTIC),
      entry(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED, CUDNN_STATUS_SUCCESS, 0, CUDNN_DETERMINISTIC),
      entry(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3, CUDNN_STATUS_SUCCESS, size_t{1} << 32, CUDNN_NON_DETERMINISTIC),
      entry(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, CUDNN_STATUS_SUCCESS, 0, CUDNN_NON_DETERMINISTIC),
      entry(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, CUDNN_STATUS_SUCCESS, 1024, CUDNN_DETERMINISTIC)};
  const size_t budget = size_t{512} << 20;
  EXPECT_EQ(ember::cuda::choose_algo(list, 6, false, budget)->algo, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0);
  EXPECT_EQ(ember::cuda::choose_algo(list, 6, true, budget)->algo, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1);
  EXPECT_EQ(ember::cuda::choose_algo(list, 6, false, size_t{1} << 33)->algo,
            CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3);                              // fits a larger budget
  EXPECT_FALSE(ember::cuda::choose_algo(list, 5, true, budget).has_value());   // none deterministic: refused
  EXPECT_FALSE(ember::cuda::choose_algo(list, 3, false, budget).has_value());  // only transforms: refused
  EXPECT_FALSE(ember::cuda::choose_algo(list, 0, false, budget).has_value());
}

// The fall-back list: every allowed entry in cuDNN's order, each algorithm once (cudnnFind may list
// one algorithm twice, with two math types).
TEST(CudnnAlgoChoice, CandidatesAreTheAllowedEntriesInOrderEachOnce) {
  using Perf = cudnnConvolutionFwdAlgoPerf_t;
  const auto entry = [](cudnnConvolutionFwdAlgo_t algo, cudnnStatus_t status, cudnnDeterminism_t det) {
    Perf p{};
    p.algo = algo;
    p.status = status;
    p.determinism = det;
    return p;
  };
  const Perf list[] = {
      entry(CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED, CUDNN_STATUS_SUCCESS, CUDNN_DETERMINISTIC),
      entry(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, CUDNN_STATUS_SUCCESS, CUDNN_DETERMINISTIC),
      entry(CUDNN_CONVOLUTION_FWD_ALGO_GEMM, CUDNN_STATUS_NOT_SUPPORTED, CUDNN_DETERMINISTIC),
      entry(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, CUDNN_STATUS_SUCCESS, CUDNN_DETERMINISTIC),
      entry(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, CUDNN_STATUS_SUCCESS, CUDNN_NON_DETERMINISTIC),
      entry(CUDNN_CONVOLUTION_FWD_ALGO_DIRECT, CUDNN_STATUS_SUCCESS, CUDNN_DETERMINISTIC)};
  const auto algos = [&](bool deterministic) {
    std::vector<int> out;
    for (const Perf& p : ember::cuda::choose_candidates(list, 6, deterministic, size_t{1} << 20))
      out.push_back(static_cast<int>(p.algo));
    return out;
  };
  EXPECT_EQ(algos(false),
            (std::vector<int>{CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
                              CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, CUDNN_CONVOLUTION_FWD_ALGO_DIRECT}));
  EXPECT_EQ(algos(true),
            (std::vector<int>{CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, CUDNN_CONVOLUTION_FWD_ALGO_DIRECT}));
  EXPECT_EQ(ember::cuda::choose_candidates(list, 0, false, 0).size(), 0u);
}

// A perf result's math type on the descriptor: FMA without TF32 whatever was listed; with TF32 the
// listed one, except a down-conversion of FP32 data to FP16.
TEST(CudnnAlgoChoice, MathTypeFollowsTheListingWithinTheTf32Setting) {
  using ember::cuda::math_type_for;
  for (auto listed : {CUDNN_DEFAULT_MATH, CUDNN_TENSOR_OP_MATH, CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION, CUDNN_FMA_MATH})
    EXPECT_EQ(math_type_for(listed, false), CUDNN_FMA_MATH) << listed;
  EXPECT_EQ(math_type_for(CUDNN_TENSOR_OP_MATH, true), CUDNN_TENSOR_OP_MATH);
  EXPECT_EQ(math_type_for(CUDNN_FMA_MATH, true), CUDNN_FMA_MATH);
  EXPECT_EQ(math_type_for(CUDNN_DEFAULT_MATH, true), CUDNN_DEFAULT_MATH);
  EXPECT_EQ(math_type_for(CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION, true), CUDNN_DEFAULT_MATH);
}

// An algorithm that fails when it runs gives way to the next, for later calls too; a failure that
// another algorithm would share (a bad parameter) does not; the last one's failure is returned.
TEST(CudnnAlgoChoice, AFailedAlgorithmGivesWayToTheNextForGood) {
  using ember::cuda::retry_with_next;
  EXPECT_TRUE(retry_with_next(CUDNN_STATUS_NOT_SUPPORTED));
  EXPECT_TRUE(retry_with_next(CUDNN_STATUS_NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT));
  EXPECT_TRUE(retry_with_next(CUDNN_STATUS_NOT_SUPPORTED_LAYOUT));
  EXPECT_TRUE(retry_with_next(CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER));
  // How cuDNN passes on a CUDA error (a sticky fault, an invalidated capture) or a passing
  // out-of-memory: not the algorithm's fault, so never a reason to give it up.
  EXPECT_FALSE(retry_with_next(CUDNN_STATUS_EXECUTION_FAILED));
  EXPECT_FALSE(retry_with_next(CUDNN_STATUS_EXECUTION_FAILED_CUDART));
  EXPECT_FALSE(retry_with_next(CUDNN_STATUS_INTERNAL_ERROR));
  EXPECT_FALSE(retry_with_next(CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED));
  EXPECT_FALSE(retry_with_next(CUDNN_STATUS_BAD_PARAM));
  EXPECT_FALSE(retry_with_next(CUDNN_STATUS_NOT_INITIALIZED));
  EXPECT_FALSE(retry_with_next(CUDNN_STATUS_SUCCESS));

  std::atomic<size_t> at{0};
  std::vector<cudnnStatus_t> result = {CUDNN_STATUS_NOT_SUPPORTED, CUDNN_STATUS_NOT_SUPPORTED_SHAPE,
                                       CUDNN_STATUS_SUCCESS, CUDNN_STATUS_SUCCESS};
  std::vector<size_t> ran, moved;
  const auto attempt = [&](size_t i) {
    ran.push_back(i);
    return result[i];
  };
  const auto on_move = [&](size_t i, cudnnStatus_t) { moved.push_back(i); };
  EXPECT_EQ(ember::cuda::run_candidates(at, 4, attempt, on_move), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(ran, (std::vector<size_t>{0, 1, 2}));
  EXPECT_EQ(moved, (std::vector<size_t>{1, 2}));
  ran.clear();
  EXPECT_EQ(ember::cuda::run_candidates(at, 4, attempt, on_move), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(ran, (std::vector<size_t>{2}));  // the next call starts at the one that worked
  result[2] = CUDNN_STATUS_BAD_PARAM;        // not another algorithm's to mend: returned as is
  EXPECT_EQ(ember::cuda::run_candidates(at, 4, attempt, on_move), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(at.load(), 2u);
  result[2] = CUDNN_STATUS_EXECUTION_FAILED_CUDART;  // an earlier kernel's fault, passed on: the same
  EXPECT_EQ(ember::cuda::run_candidates(at, 4, attempt, on_move), CUDNN_STATUS_EXECUTION_FAILED_CUDART);
  EXPECT_EQ(at.load(), 2u);
  result[2] = CUDNN_STATUS_NOT_SUPPORTED;
  result[3] = CUDNN_STATUS_NOT_SUPPORTED;  // the last candidate fails too: its status, nothing left
  EXPECT_EQ(ember::cuda::run_candidates(at, 4, attempt, on_move), CUDNN_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(at.load(), 3u);
  EXPECT_EQ(moved, (std::vector<size_t>{1, 2, 3}));
}

// Which algorithms count as direct sums, for each pass.
TEST(CudnnAlgoChoice, WinogradAndFftNeverSumDirectly) {
  using ember::cuda::sums_directly;
  EXPECT_TRUE(sums_directly(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM));
  EXPECT_TRUE(sums_directly(CUDNN_CONVOLUTION_FWD_ALGO_GEMM));
  for (auto a : {CUDNN_CONVOLUTION_FWD_ALGO_FFT, CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING,
                 CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD, CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED})
    EXPECT_FALSE(sums_directly(a)) << a;
  EXPECT_TRUE(sums_directly(CUDNN_CONVOLUTION_BWD_DATA_ALGO_0));
  for (auto a : {CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT, CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING,
                 CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD, CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED})
    EXPECT_FALSE(sums_directly(a)) << a;
  EXPECT_TRUE(sums_directly(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3));
  for (auto a : {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING,
                 CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED})
    EXPECT_FALSE(sums_directly(a)) << a;
}

TEST(CudaChecks, CudnnBadParam) {
  cudnnTensorDescriptor_t desc = nullptr;
  if (cudnnCreateTensorDescriptor(&desc) != CUDNN_STATUS_SUCCESS)
    GTEST_SKIP() << "cuDNN cannot create descriptors here";
  const std::string m = message_of<ember::CudnnError>(
      [&] { EMBER_CUDNN_CHECK(cudnnSetTensor4dDescriptor(desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, -1, 1, 1, 1)); });
  cudnnDestroyTensorDescriptor(desc);
  EXPECT_NE(m.find("cuDNN error"), std::string::npos) << m;
  EXPECT_NE(m.find("BAD_PARAM"), std::string::npos) << m;
}

TEST(CudaChecks, CublasWithoutHandle) {
  float a = 0;
  const float one = 1;
  const std::string m = message_of<ember::CublasError>([&] {
    EMBER_CUBLAS_CHECK(cublasSgemm(nullptr, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, &a, 1, &a, 1, &one, &a, 1));
  });
  EXPECT_NE(m.find("CUBLAS_STATUS_NOT_INITIALIZED"), std::string::npos) << m;
  // Every backend error is an ember::Error, so apps catch them all in one place.
  EXPECT_THROW(EMBER_CUBLAS_CHECK(cublasDestroy(nullptr)), ember::Error);
}

#ifdef EMBER_WITH_NCCL
TEST(CudaChecks, NcclInvalidArgument) {
  ncclComm_t comm = nullptr;
  const std::string m = message_of<ember::NcclError>([&] { EMBER_NCCL_CHECK(ncclCommInitAll(&comm, -1, nullptr)); });
  EXPECT_NE(m.find("NCCL error"), std::string::npos) << m;
  EXPECT_NE(m.find("ncclCommInitAll"), std::string::npos) << m;
}
#endif

}  // namespace
