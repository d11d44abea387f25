// MPI communicator (private to distribute/; MPI headers stay out of the public API).
#pragma once

#include <cstdint>
#include <memory>

#include "communicator.h"

namespace ember::detail {

// COMM_WORLD of this process's MPI job, initialising MPI on first use (MPI_THREAD_MULTIPLE: the watchdog thread
// uses MPI beside the collectives). A watchdog thread ends the whole job (MPI_Abort) when a collective runs past the
// timeout: MPI collectives cannot time out by themselves. Before that it asks the other ranks' watchdogs (on a
// duplicate of the world, so never in the collectives' way) how far they got, and names the ranks that never reached
// the collective (hung or busy in their own work) or did not answer (dead), not only the rank that noticed.
// It lives in a module of its own, libember_mpi, which libember loads on the first call (found
// next to libember, then on the library path), so that a program that never asks for MultiWorker
// needs no MPI library to start. Throws DeviceError in a build without MPI or when the module or
// its MPI library cannot be loaded, saying why.
std::unique_ptr<Communicator> make_mpi_communicator(std::chrono::milliseconds timeout);

// The module's interface version: changes whenever Communicator's virtual interface does.
inline constexpr uint32_t kMpiModuleAbi = 1;

}  // namespace ember::detail
