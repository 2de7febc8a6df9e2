#include "dist/check_mpi.hpp"

#include <stdexcept>
#include <string_view>

#include <fmt/format.h>

namespace ulysses::dist {

void mpi_failed(int code, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) length = 0;
  throw std::runtime_error(fmt::format("{}:{}: {} failed with MPI error {}: {}", file, line, call, code,
                                       std::string_view(text, static_cast<std::size_t>(length))));
}

}  // namespace ulysses::dist
