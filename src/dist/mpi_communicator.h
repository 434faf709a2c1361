// dist: the MPI implementation's entry point, for communicator.cc's world(). Defined only in
// builds with MPI (QS_HAVE_MPI: CMake's -DQS_MPI=ON found an MPI library); callers check
// mpi_available() first.
#pragma once

#include <memory>

#include "core/status.h"
#include "dist/communicator.h"

namespace qs::dist {

// MPI_Init_thread (MPI_THREAD_SERIALIZED) on the first call, then the same world communicator
// (a duplicate of MPI_COMM_WORLD) on every call. Registers the exit handler that finalizes MPI.
Result<std::shared_ptr<Communicator>> mpi_world();

// MPI_Abort on the world when MPI is initialized and not finalized (it then does not return);
// else nothing.
void mpi_abort_job(int exit_code);

}  // namespace qs::dist
