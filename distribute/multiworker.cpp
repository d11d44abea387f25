// MultiWorker: one replica per MPI process, a DataParallelStrategy over MPI. Rank and size come
// from MPI (so mpirun, srun and hostfiles all work); every rank reads its own shard of each
// global batch; gradients are summed with MPI_Allreduce on CPUs, or with NCCL on GPUs (a
// communicator bootstrapped over MPI; the step then never waits for the GPU, as
// Model::fit's); only rank 0 prints; epoch metrics and evaluation are reduced over MPI.
#include <cstdlib>

#include "../core/runtime.h"
#include "data_parallel.h"
#include "mpi_communicator.h"
#include "nccl_communicator.h"
#include "strategy.h"

namespace ember {

namespace {

// This process's rank among those on its machine, from the launcher's environment (OpenMPI,
// MPICH/Intel MPI, MVAPICH, Slurm); -1 when none says.
int local_rank() {
  for (const char* var :
       {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "MV2_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"})
    if (const char* v = std::getenv(var)) return std::atoi(v);
  return -1;
}

// The GPU of this rank: the local rank's position among the usable GPUs (round robin).
int pick_gpu(int rank) {
  const CudaStatus& st = cuda_status();
  EMBER_CHECK(st.usable, DeviceError, "multiworker on GPUs: no usable GPU on this machine (" + st.reason + ")");
  const int local = local_rank() >= 0 ? local_rank() : rank;
  const size_t n = st.gpus.size();
  if (const char* size = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE"))
    EMBER_CHECK(static_cast<size_t>(std::atoi(size)) <= n, DeviceError,
                std::string("multiworker on GPUs: ") + size + " ranks on this machine but " + std::to_string(n) +
                    " usable GPU(s): NCCL needs one GPU per rank (start fewer ranks per machine)");
  return st.gpus[static_cast<size_t>(local) % n].index;
}

}  // namespace

namespace detail {
std::unique_ptr<Strategy> make_multiworker_strategy(std::shared_ptr<Communicator> world) {
  DataParallelConfig c;
  c.kind = "multiworker";
  c.unit = "ranks";
  c.world = std::move(world);
  c.connect = [world = c.world](const ModelRecipe& recipe,
                                std::vector<Device>& devices) -> std::shared_ptr<Communicator> {
    if (recipe.device.is_cuda()) {  // gradients over NCCL, bootstrapped over the world (MPI)
      const int gpu = pick_gpu(world->rank());
      devices = {Device::cuda(gpu)};
      return NcclCommunicator::create_across(*world, gpu, world->timeout());
    }
    devices = {Device::cpu()};
    return world;  // MPI itself
  };
  return std::make_unique<DataParallelStrategy>(std::move(c));
}
}  // namespace detail

std::unique_ptr<Strategy> make_multiworker_strategy(std::chrono::milliseconds timeout) {
  return detail::make_multiworker_strategy(detail::make_mpi_communicator(timeout));
}

}  // namespace ember
