// MPI communicator (private to distribute/; MPI headers stay out of the public API).
#pragma once

#include <memory>

#include "communicator.h"

namespace ember::detail {

// COMM_WORLD of this process's MPI job, initialising MPI on first use (MPI_THREAD_MULTIPLE: the watchdog thread
// uses MPI beside the collectives). A watchdog thread ends the whole job (MPI_Abort) when a collective runs past the
// timeout: MPI collectives cannot time out by themselves. Before that it asks the other ranks' watchdogs (on a
// duplicate of the world, so never in the collectives' way) how far they got, and names the ranks that never reached
// the collective (hung or busy in their own work) or did not answer (dead), not only the rank that noticed.
// Throws DeviceError in a build without MPI.
std::unique_ptr<Communicator> make_mpi_communicator(std::chrono::milliseconds timeout);

}  // namespace ember::detail
