// oneDNN engine/stream singletons (see dnnl_context.h).
#include "dnnl_context.h"

namespace ember::cpu {

dnnl::engine& dnnl_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& dnnl_stream() {
  thread_local dnnl::stream stream(dnnl_engine());
  return stream;
}

}  // namespace ember::cpu
