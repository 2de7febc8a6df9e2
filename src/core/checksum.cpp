#include "core/checksum.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <new>

#include <fmt/format.h>
#include <xxhash.h>
// On x86-64 the library's _dispatch entry points pick the widest vector unit at run time (AVX2/AVX-512:
// twice the speed of the SSE2 baseline the library is built for); the header maps the XXH3 calls to them.
#if defined(__x86_64__) && __has_include(<xxh_x86dispatch.h>)
#include <xxh_x86dispatch.h>
#endif

#include "core/error.hpp"
#include "core/regular_file.hpp"

namespace ulysses {
namespace {

// Files are hashed through read-only mappings of this many bytes at a time: no copy into user memory,
// and resident memory bounded by one window however large the file.
constexpr std::size_t kWindow = std::size_t{64} << 20;

}  // namespace

void Xxh3Stream::Free::operator()(XXH3_state_s* s) const { XXH3_freeState(s); }

Xxh3Stream::Xxh3Stream() : state_(XXH3_createState()) {
  if (!state_) throw std::bad_alloc();
  XXH3_64bits_reset(state_.get());
}

void Xxh3Stream::update(const void* data, std::size_t size) { XXH3_64bits_update(state_.get(), data, size); }

std::string Xxh3Stream::hex() const { return fmt::format("{:016x}", XXH3_64bits_digest(state_.get())); }

std::string xxh3_hex(const void* data, std::size_t size) {
  return fmt::format("{:016x}", XXH3_64bits(data, size));
}

std::string xxh3_file_hex(const std::filesystem::path& path) {
  const int fd = open_regular_file(path, "file");
  std::unique_ptr<int, void (*)(int*)> closer(new int(fd), [](int* p) { close(*p); delete p; });
  struct stat st {};
  if (fstat(fd, &st) != 0) throw BadInput(fmt::format("cannot stat {}", path.string()),
                                          "check that the file exists and is readable");
  const auto size = static_cast<std::size_t>(st.st_size);
  Xxh3Stream stream;
  for (std::size_t offset = 0; offset < size; offset += kWindow) {
    const std::size_t n = std::min(kWindow, size - offset);
    // MAP_POPULATE maps the whole window in one call instead of one page fault per few pages
    void* p = mmap(nullptr, n, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, static_cast<off_t>(offset));
    if (p == MAP_FAILED) throw BadInput(fmt::format("cannot map {} at byte {}", path.string(), offset),
                                        "check that the file is readable and was not truncated");
    madvise(p, n, MADV_SEQUENTIAL);
    stream.update(p, n);
    munmap(p, n);
  }
  return stream.hex();
}

}  // namespace ulysses
