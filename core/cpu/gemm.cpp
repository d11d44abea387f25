// sgemm on oneDNN (see gemm.h).
#include "gemm.h"

#include "dnnl_context.h"

namespace ember::cpu {

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  EMBER_DNNL_CHECK(dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc));
}

}  // namespace ember::cpu
