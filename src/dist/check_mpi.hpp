// CHECK_MPI: every MPI call checked, failures reported with file:line and MPI's own error text.
//
// MpiWorld sets MPI_ERRORS_RETURN on MPI_COMM_WORLD (inherited by every communicator split from it),
// so a failing call returns a code instead of killing the process silently; CHECK_MPI turns that code
// into a std::runtime_error. Whoever catches it on a multi-rank run must end all ranks (run_guarded).
#pragma once

#include <mpi.h>

namespace ulysses::dist {

[[noreturn]] void mpi_failed(int code, const char* call, const char* file, int line);

inline void check_mpi(int code, const char* call, const char* file, int line) {
  if (code != MPI_SUCCESS) mpi_failed(code, call, file, line);
}

}  // namespace ulysses::dist

#define CHECK_MPI(call) ::ulysses::dist::check_mpi((call), #call, __FILE__, __LINE__)
