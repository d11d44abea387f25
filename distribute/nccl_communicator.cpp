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

NcclCommunicator::NcclCommunicator(void* handle, int rank, int size, int device, std::chrono::milliseconds timeout)
    : handle_(handle), rank_(rank), size_(size), device_(device) {
  timeout_ = timeout;
}

NcclCommunicator::~NcclCommunicator() {
  if (const NcclOps* api = loaded_nccl_api()) api->destroy(handle_);
}

std::vector<std::unique_ptr<NcclCommunicator>> NcclCommunicator::create_local(const std::vector<int>& devices,
                                                                              std::chrono::milliseconds timeout) {
  for (int d : devices) require_gpu(d);
  const NcclOps& api = nccl_api();
  std::vector<void*> handles;
  api.init_all(devices, &handles);
  std::vector<std::unique_ptr<NcclCommunicator>> out;
  const int n = static_cast<int>(devices.size());
  for (int i = 0; i < n; ++i)
    out.emplace_back(
        new NcclCommunicator(handles[static_cast<size_t>(i)], i, n, devices[static_cast<size_t>(i)], timeout));
  return out;
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
      new NcclCommunicator(h, bootstrap.rank(), bootstrap.size(), device, timeout));
}

std::vector<void*> NcclCommunicator::handles(std::span<NcclCommunicator* const> members) {
  EMBER_CHECK(!members.empty(), ArgumentError, "NCCL: a collective needs at least one member");
  std::vector<void*> h;
  for (auto* m : members) h.push_back(m->handle_);
  return h;
}

template <typename Fn>
void NcclCommunicator::with_context(std::span<NcclCommunicator* const> members, const char* what, Fn&& fn) {
  try {
    fn();
  } catch (const CollectiveError& e) {
    throw CollectiveError("step " + std::to_string(members.front()->step_) + ": " + e.what());
  } catch (const NcclError& e) {
    throw NcclError(std::string(what) + " at step " + std::to_string(members.front()->step_) + ": " + e.what());
  }
}

void NcclCommunicator::all_reduce_sum(std::span<NcclCommunicator* const> members, std::span<Tensor* const> bufs) {
  const std::vector<void*> h = handles(members);
  with_context(members, "all_reduce", [&] {
    nccl_api().all_reduce_sum(h, std::vector<Tensor*>(bufs.begin(), bufs.end()), members.front()->timeout_.count());
  });
}

void NcclCommunicator::broadcast(std::span<NcclCommunicator* const> members, std::span<Tensor* const> bufs, int root) {
  const std::vector<void*> h = handles(members);
  with_context(members, "broadcast", [&] {
    nccl_api().broadcast(h, std::vector<Tensor*>(bufs.begin(), bufs.end()), root, members.front()->timeout_.count());
  });
}

void NcclCommunicator::wait(std::span<NcclCommunicator* const> members) {
  const std::vector<void*> h = handles(members);
  with_context(members, "wait", [&] { nccl_api().wait(h, members.front()->timeout_.count()); });
}

void NcclCommunicator::all_reduce_sum(Tensor& buf) {
  NcclCommunicator* self = this;
  Tensor* b = &buf;
  all_reduce_sum(std::span(&self, 1), std::span(&b, 1));
}

void NcclCommunicator::broadcast(Tensor& buf, int root) {
  NcclCommunicator* self = this;
  Tensor* b = &buf;
  broadcast(std::span(&self, 1), std::span(&b, 1), root);
}

void NcclCommunicator::wait() {
  NcclCommunicator* self = this;
  wait(std::span(&self, 1));
}

double NcclCommunicator::busy_seconds() const { return nccl_api().busy_seconds(handle_); }

void NcclCommunicator::abort(const std::string&) noexcept {
  if (const NcclOps* api = loaded_nccl_api()) api->abort(handle_);
}

}  // namespace ember::detail
