// The oneDNN CPU engine and stream Ember's CPU ops run on, plus a check for dnnl_status_t.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include "../error.h"

namespace ember::cpu {

dnnl::engine& dnnl_engine();
dnnl::stream& dnnl_stream();  // one per calling thread (multiworker tests run members on threads)

}  // namespace ember::cpu

#define EMBER_DNNL_CHECK(stmt)                                                                                      \
  do {                                                                                                              \
    const dnnl_status_t ember_st_ = (stmt);                                                                         \
    if (ember_st_ != dnnl_success)                                                                                  \
      throw ::ember::DnnlError(::ember::detail::failure_message(                                                    \
          "oneDNN", #stmt, "status " + std::to_string(static_cast<int>(ember_st_)), __FILE__, __LINE__, __func__)); \
  } while (0)
