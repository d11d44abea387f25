// NcclCommunicator over the CUDA module's NCCL entries (see nccl_communicator.h).
#include "nccl_communicator.h"

#include <cstring>

#include "../core/cuda_module.h"
#include "../core/runtime.h"
#include "nccl_ops.h"

namespace ember::detail {

namespace {
// DeviceError unless `device` is a usable GPU of this machine.
void require_gpu(int device) {
  const CudaStatus& st = cuda_status();
  EMBER_CHECK(st.usable, DeviceError, "NCCL needs a usable GPU, and there is none: " + st.reason);
  bool found = false;
  for (const GpuInfo& g : st.gpus) found = found || g.index == device;
  EMBER_CHECK(found, DeviceError, "NCCL: there is no usable cuda:" + std::to_string(device));
}

const NcclOps& nccl_api() {
  const void* table = require_cuda_module("NCCL communicators").ops(NcclOps::kOwner);
  EMBER_CHECK(table != nullptr, DeviceError,
              "this Ember build has no NCCL (it was not found when Ember was configured): GPU replicas need it; "
              "use --device cpu for CPU replicas");
  return *static_cast<const NcclOps*>(table);
}

// The table where the module is loaded and has one, else null; never throws (destructors use it).
const NcclOps* loaded_nccl_api() noexcept {
  const CudaModuleApi* m = cuda_module(nullptr);
  return m ? static_cast<const NcclOps*>(m->ops(NcclOps::kOwner)) : nullptr;
}
}  // namespace

NcclCommunicator::NcclCommunicator(std::vector<void*> handles, int rank, int size, std::vector<int> devices,
                                   std::chrono::milliseconds timeout)
    : handles_(std::move(handles)), rank_(rank), size_(size), devices_(std::move(devices)) {
  timeout_ = timeout;
}

NcclCommunicator::~NcclCommunicator() {
  if (const NcclOps* api = loaded_nccl_api())
    for (void* h : handles_) api->destroy(h);
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::create_local(const std::vector<int>& devices,
                                                                 std::chrono::milliseconds timeout) {
  EMBER_CHECK(!devices.empty(), ArgumentError, "NCCL: a communicator needs at least one GPU");
  for (int d : devices) require_gpu(d);
  const NcclOps& api = nccl_api();
  std::vector<void*> handles;
  api.init_all(devices, &handles);
  const int n = static_cast<int>(devices.size());
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(std::move(handles), 0, n, devices, timeout));
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::create_across(Communicator& bootstrap, int device,
                                                                  std::chrono::milliseconds timeout) {
  require_gpu(device);
  const NcclOps& api = nccl_api();
  // NCCL's unique id (128 bytes) travels as 32 floats: MPI copies the bits unchanged.
  std::string id;
  if (bootstrap.rank() == 0) api.unique_id(&id);
  Tensor carrier = Tensor::zeros(Shape{32}, DType::F32, Device::cpu());
  if (bootstrap.rank() == 0) std::memcpy(carrier.raw(), id.data(), 128);
  bootstrap.broadcast(carrier, 0);
  id.assign(static_cast<const char*>(carrier.raw()), 128);
  void* h = api.init_rank(id, bootstrap.size(), bootstrap.rank(), device, timeout.count());
  return std::unique_ptr<NcclCommunicator>(
      new NcclCommunicator({h}, bootstrap.rank(), bootstrap.size(), {device}, timeout));
}

template <typename Fn>
void NcclCommunicator::with_context(const char* what, Fn&& fn) {
  try {
    fn();
  } catch (const CollectiveError& e) {
    throw CollectiveError("step " + std::to_string(step_) + ": " + e.what());
  } catch (const NcclError& e) {
    throw NcclError(std::string(what) + " at step " + std::to_string(step_) + ": " + e.what());
  }
}

void NcclCommunicator::do_all_reduce_sum(std::span<Tensor* const> bufs) {
  with_context("all_reduce", [&] {
    nccl_api().all_reduce_sum(handles_, std::vector<Tensor*>(bufs.begin(), bufs.end()), timeout_.count());
  });
}

void NcclCommunicator::do_broadcast(std::span<Tensor* const> bufs, int root) {
  with_context("broadcast", [&] {
    nccl_api().broadcast(handles_, std::vector<Tensor*>(bufs.begin(), bufs.end()), root, timeout_.count());
  });
}

void NcclCommunicator::wait() {
  with_context("wait", [&] { nccl_api().wait(handles_, timeout_.count()); });
}

double NcclCommunicator::busy_seconds() const { return nccl_api().busy_seconds(handles_.front()); }

void NcclCommunicator::abort(const std::string&) noexcept {
  if (const NcclOps* api = loaded_nccl_api())
    for (void* h : handles_) api->abort(h);
}

}  // namespace ember::detail
