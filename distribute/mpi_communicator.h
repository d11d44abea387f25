// MPI communicator (private to distribute/; MPI headers stay out of the public API).
#pragma once

#include <memory>

#include "communicator.h"

namespace ember::detail {

// COMM_WORLD of this process's MPI job, initialising MPI on first use (MPI_THREAD_MULTIPLE: the watchdog thread may
// call MPI_Abort). A watchdog thread ends the whole job (MPI_Abort) when a collective runs past the timeout, naming the
// collective and the step: MPI collectives cannot time out by themselves. Throws DeviceError in a build without MPI.
std::unique_ptr<Communicator> make_mpi_communicator(std::chrono::milliseconds timeout);

}  // namespace ember::detail
