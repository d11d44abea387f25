// The bf16 matmul (matmul_bf16.h): one primitive per shape, transposition, epilogue and thread
// count, cached per thread.
#include "matmul_bf16.h"

#include <omp.h>

#include <map>
#include <memory>
#include <tuple>

#include "../../core/cpu/dnnl_context.h"

namespace ember::cpu {

namespace {
using dnnl::memory;
using dt = memory::data_type;

struct Plan {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
  memory a, b, c, bias;
};

using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, bool, bool, bool, int>;

Plan& plan_for(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, bool has_bias, bool relu, bool accumulate) {
  thread_local std::map<Key, std::unique_ptr<Plan>> cache;
  const Key key{trans_a, trans_b, m, n, k, has_bias, relu, accumulate, omp_get_max_threads()};
  auto it = cache.find(key);
  if (it != cache.end()) return *it->second;
  auto& eng = dnnl_engine();
  // Row-major storage of op(X) (rows x cols) given X's own layout: strides in elements.
  const auto operand = [](int64_t rows, int64_t cols, bool trans) {
    return memory::desc({rows, cols}, dt::bf16, trans ? memory::dims{1, rows} : memory::dims{cols, 1});
  };
  const memory::desc ad = operand(m, k, trans_a), bd = operand(k, n, trans_b), cd({m, n}, dt::f32, memory::dims{n, 1}),
                     biasd({1, n}, dt::f32, memory::dims{n, 1});
  dnnl::primitive_attr attr;
  if (relu || accumulate) {
    dnnl::post_ops ops;
    if (accumulate) ops.append_sum(1.0f);
    if (relu) ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    attr.set_post_ops(ops);
  }
  auto p = std::make_unique<Plan>();
  p->pd = has_bias ? dnnl::matmul::primitive_desc(dnnl::matmul::desc(ad, bd, biasd, cd), attr, eng)
                   : dnnl::matmul::primitive_desc(dnnl::matmul::desc(ad, bd, cd), attr, eng);
  p->prim = dnnl::matmul(p->pd);
  p->a = memory(ad, eng, DNNL_MEMORY_NONE);
  p->b = memory(bd, eng, DNNL_MEMORY_NONE);
  p->c = memory(cd, eng, DNNL_MEMORY_NONE);
  if (has_bias) p->bias = memory(biasd, eng, DNNL_MEMORY_NONE);
  return *cache.emplace(key, std::move(p)).first->second;
}
}  // namespace

void matmul_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const bf16* a, const bf16* b, float* c,
                 const float* bias, bool relu, bool accumulate) {
  if (m <= 0 || n <= 0 || (accumulate && k <= 0)) return;
  if (accumulate) bias = nullptr, relu = false;
  if (k <= 0) {  // an empty sum
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        const float v = bias ? bias[j] : 0.0f;
        c[i * n + j] = relu && v < 0.0f ? 0.0f : v;
      }
    return;
  }
  Plan& p = plan_for(trans_a, trans_b, m, n, k, bias != nullptr, relu, accumulate);
  p.a.set_data_handle(const_cast<bf16*>(a));
  p.b.set_data_handle(const_cast<bf16*>(b));
  p.c.set_data_handle(c);
  auto& strm = dnnl_stream();
  if (bias) {
    p.bias.set_data_handle(const_cast<float*>(bias));
    p.prim.execute(strm, {{DNNL_ARG_SRC, p.a}, {DNNL_ARG_WEIGHTS, p.b}, {DNNL_ARG_BIAS, p.bias}, {DNNL_ARG_DST, p.c}});
  } else {
    p.prim.execute(strm, {{DNNL_ARG_SRC, p.a}, {DNNL_ARG_WEIGHTS, p.b}, {DNNL_ARG_DST, p.c}});
  }
  strm.wait();
}

std::string matmul_bf16_kernel_info(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k) {
  return plan_for(trans_a, trans_b, m, n, k, false, false, false).pd.impl_info_str();
}

}  // namespace ember::cpu
