// NCCL's version codes, and the start-up check of the NCCL found at run time against the one built with.
//
// The trainer's RUNPATH finds the NCCL of the torch wheel, but LD_LIBRARY_PATH or a `module load nccl` can
// put another first. An older one lacks symbols this build calls (ncclAlltoAll before 2.28: "undefined
// symbol" at the first all-to-all, hours in); so the run is refused at start-up instead, with both versions.
// Codes as NCCL_VERSION_CODE and ncclGetVersion give them: major·10000 + minor·100 + patch (2.9 on),
// major·1000 + minor·100 + patch before. No NCCL header needed: tested on CPU.
#pragma once

#include <string>

namespace ulysses::comm {

struct NcclVersion {
  int major = 0, minor = 0, patch = 0;
};

NcclVersion nccl_version(int code);
std::string nccl_version_text(int code);   // "2.28.3"

// Throws BadInput when the run-time NCCL is older (major.minor) than the one built with; returns "" when
// major.minor match and one line for the log when the run-time one is newer (NCCL stays backward compatible).
std::string check_nccl_runtime(int built, int runtime);

}  // namespace ulysses::comm
