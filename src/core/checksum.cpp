#include "core/checksum.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <memory>

#include <fmt/format.h>
#include <xxhash.h>

#include "core/error.hpp"

namespace ulysses {
namespace {

// Files are hashed through read-only mappings of this many bytes at a time: no copy into user memory,
// and resident memory bounded by one window however large the file.
constexpr std::size_t kWindow = std::size_t{64} << 20;

}  // namespace

std::string xxh3_hex(const void* data, std::size_t size) {
  return fmt::format("{:016x}", XXH3_64bits(data, size));
}

std::string xxh3_file_hex(const std::filesystem::path& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw BadInput(fmt::format("cannot open {} for reading", path.string()));
  std::unique_ptr<int, void (*)(int*)> closer(new int(fd), [](int* p) { close(*p); delete p; });
  struct stat st {};
  if (fstat(fd, &st) != 0) throw BadInput(fmt::format("cannot stat {}", path.string()));
  const auto size = static_cast<std::size_t>(st.st_size);
  std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> state(XXH3_createState(), &XXH3_freeState);
  XXH3_64bits_reset(state.get());
  for (std::size_t offset = 0; offset < size; offset += kWindow) {
    const std::size_t n = std::min(kWindow, size - offset);
    void* p = mmap(nullptr, n, PROT_READ, MAP_PRIVATE, fd, static_cast<off_t>(offset));
    if (p == MAP_FAILED) throw BadInput(fmt::format("cannot map {} at byte {}", path.string(), offset));
    madvise(p, n, MADV_SEQUENTIAL | MADV_WILLNEED);
    XXH3_64bits_update(state.get(), p, n);
    munmap(p, n);
  }
  return fmt::format("{:016x}", XXH3_64bits_digest(state.get()));
}

}  // namespace ulysses
