# distribute/: collectives (host, MPI, NCCL), the data-parallel step and the strategies.
ember_folder(distribute
  PUBLIC_HEADERS distribute.h communicator.h strategy.h
  SOURCES communicator.cpp data_parallel.cpp local_communicator.cpp multiworker.cpp nccl_communicator.cpp
          strategy.cpp watchdog.cpp
  CUDA_SOURCES cuda/nccl_collectives.cpp)
# The MPI communicator is a module of its own (libember_mpi, cmake/EmberLibrary.cmake), loaded
# by mpi_loader.cpp when MultiWorker asks for it: libember links no MPI library.
ember_folder(distribute SOURCES mpi_loader.cpp)
