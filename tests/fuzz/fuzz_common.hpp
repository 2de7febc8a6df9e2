// What every fuzz target of tests/fuzz/ shares. The contract under test, for every reader of bytes from outside:
// any input either reads or throws BadInput — never a crash, a hang, an out-of-bounds access, a leak, undefined
// behaviour or another exception type (which reaches libFuzzer as an uncaught exception: a crash).
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "core/error.hpp"

namespace ulysses::fuzz {

// A scratch folder of this process (under $FUZZ_TMPDIR, default /dev/shm), made once.
inline const std::filesystem::path& scratch() {
  static const std::filesystem::path dir = [] {
    const char* base = std::getenv("FUZZ_TMPDIR");
    std::filesystem::path d = std::filesystem::path(base ? base : "/dev/shm") / ("ulysses-fuzz-" + std::to_string(getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

// Writes the bytes to scratch()/name (truncating) and returns the path.
inline std::filesystem::path write_file(const std::string& name, std::string_view bytes) {
  const std::filesystem::path path = scratch() / name;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) std::abort();
  if (!bytes.empty() && ::write(fd, bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size())) std::abort();
  ::close(fd);
  return path;
}

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Runs the reader; BadInput is the accepted way to refuse.
template <typename F>
void refuse_or_read(F read) {
  try {
    read();
  } catch (const BadInput&) {
  }
}

}  // namespace ulysses::fuzz
