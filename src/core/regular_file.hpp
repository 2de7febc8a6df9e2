// Opening a file the tools read whole: a FIFO, a device or a directory named where a file belongs must be a
// one-line bad input, never a hang (open() of a FIFO blocks until a writer appears): the file is opened
// non-blocking, checked with fstat, and only then used.
#pragma once

#include <filesystem>
#include <string>

namespace ulysses {

// A read-only descriptor of `path` (O_CLOEXEC); BadInput naming `what` and the path when it cannot be opened or
// is not a regular file. The caller closes it.
int open_regular_file(const std::filesystem::path& path, const std::string& what);

}  // namespace ulysses
