#include "comm/nccl_version.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

namespace ulysses::comm {

NcclVersion nccl_version(int code) {
  if (code >= 20900) return {code / 10000, code % 10000 / 100, code % 100};
  return {code / 1000, code % 1000 / 100, code % 100};
}

std::string nccl_version_text(int code) {
  const NcclVersion v = nccl_version(code);
  return fmt::format("{}.{}.{}", v.major, v.minor, v.patch);
}

std::string check_nccl_runtime(int built, int runtime) {
  const NcclVersion b = nccl_version(built), r = nccl_version(runtime);
  if (r.major < b.major || (r.major == b.major && r.minor < b.minor))
    throw BadInput(fmt::format("NCCL {} was loaded at run time but this ulysses-train was built with NCCL {}",
                               nccl_version_text(runtime), nccl_version_text(built)),
                   "an LD_LIBRARY_PATH or `module load nccl` puts an older libnccl.so.2 first: unset it, load NCCL " +
                       nccl_version_text(built) + " or newer, or rebuild against the NCCL you load");
  if (r.major == b.major && r.minor == b.minor) return "";
  return fmt::format("NCCL {} at run time (built with {})", nccl_version_text(runtime), nccl_version_text(built));
}

}  // namespace ulysses::comm
