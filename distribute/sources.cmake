# distribute/: collectives (host, MPI, NCCL), the data-parallel step and the strategies.
ember_folder(distribute
  PUBLIC_HEADERS distribute.h communicator.h strategy.h
  SOURCES communicator.cpp data_parallel.cpp local_communicator.cpp multiworker.cpp nccl_communicator.cpp
          strategy.cpp watchdog.cpp
  CUDA_SOURCES cuda/nccl.cpp)
if(EMBER_HAVE_MPI)
  ember_folder(distribute SOURCES mpi_communicator.cpp)
else()
  ember_folder(distribute SOURCES mpi_communicator_stub.cpp)
endif()
