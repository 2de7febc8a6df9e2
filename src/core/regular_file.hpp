// Files the tools read, named by users or by manifests. A FIFO, a device or a directory named where a file
// belongs must be a one-line bad input, never a hang (open() of a FIFO blocks until a writer appears): the file
// is opened non-blocking, checked with fstat, and only then used. A name inside a manifest must not leave its
// folder (an absolute path or "..": a hostile manifest must not make a tool read /etc/passwd).
#pragma once

#include <filesystem>
#include <string>

namespace ulysses {

// A file named inside a manifest (a dataset's shards, a checkpoint's files) must stay in that manifest's folder: a
// plain name — not empty, no "/", not "." or "..", no control character. BadInput naming `where` and the name
// otherwise.
void check_plain_file_name(const std::string& name, const std::string& where);

// A read-only descriptor of `path` (O_CLOEXEC); BadInput naming `what` and the path when it cannot be opened or
// is not a regular file. The caller closes it.
int open_regular_file(const std::filesystem::path& path, const std::string& what);

// The whole of a small file (a manifest, a config): open_regular_file, then exactly its size in bytes, refused
// past `max_bytes` (/dev/zero or a 10 GB "config.json" must not be read into memory).
std::string read_small_file(const std::filesystem::path& path, const std::string& what, std::size_t max_bytes);

}  // namespace ulysses
