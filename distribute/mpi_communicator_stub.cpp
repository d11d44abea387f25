// make_mpi_communicator() in a build without MPI (EMBER_MPI=OFF or no MPI found).
#include "mpi_communicator.h"

namespace ember::detail {

std::unique_ptr<Communicator> make_mpi_communicator(std::chrono::milliseconds) {
  throw DeviceError(
      "this Ember build has no MPI (configured with EMBER_MPI=OFF or MPI not found): "
      "--strategy multiworker needs it");
}

}  // namespace ember::detail
