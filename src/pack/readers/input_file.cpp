#include "pack/readers/input_file.hpp"

#include <cerrno>
#include <cstring>
#include <utility>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.hpp"
#include "core/regular_file.hpp"

namespace ulysses::pack {
namespace {
constexpr const char* kChanged = "the file was truncated or changed while it was read: check it, then pack again";
}  // namespace

InputFile::InputFile(const std::filesystem::path& path) : name_(path.string()) {
  fd_ = open_regular_file(path, "input");
  struct stat st{};
  ::fstat(fd_, &st);
  size_ = static_cast<std::uint64_t>(st.st_size);
}

InputFile::InputFile(int fd, std::string name) : fd_(fd), name_(std::move(name)) {
  struct stat st{};
  if (::fstat(fd_, &st) != 0) {
    throw std::runtime_error(fmt::format("fstat {}: {}", name_, std::strerror(errno)));
  }
  size_ = static_cast<std::uint64_t>(st.st_size);
}

InputFile InputFile::adopt(int fd, std::string name) { return InputFile(fd, std::move(name)); }

InputFile::InputFile(InputFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), name_(std::move(other.name_)), size_(other.size_) {}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

void InputFile::read_exact(std::uint64_t offset, void* dst, std::size_t bytes) const {
  auto* out = static_cast<char*>(dst);
  std::size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pread(fd_, out + done, bytes - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      throw BadInput(fmt::format("{}: cannot read {} bytes at byte offset {} (file has {} bytes): {}",
                                 name_, bytes, offset, size_,
                                 n < 0 ? std::strerror(errno) : "unexpected end of file"),
                     kChanged);
    }
    done += static_cast<std::size_t>(n);
  }
}

MappedRange::MappedRange(const InputFile& file, std::uint64_t offset, std::size_t bytes) {
  if (bytes == 0) return;
  const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  const std::uint64_t start = offset / page * page;
  length_ = static_cast<std::size_t>(offset - start) + bytes;
  // MAP_POPULATE maps the window in one call (no page fault per few pages) and reads ahead a cold file
  base_ = ::mmap(nullptr, length_, PROT_READ, MAP_PRIVATE | MAP_POPULATE, file.fd_, static_cast<off_t>(start));
  if (base_ == MAP_FAILED) {
    throw BadInput(fmt::format("{}: cannot map {} bytes at byte offset {}: {}", file.name(), bytes, offset,
                               std::strerror(errno)),
                   kChanged);
  }
  ::madvise(base_, length_, MADV_SEQUENTIAL);
  data_ = static_cast<const std::byte*>(base_) + (offset - start);
}

MappedRange::~MappedRange() {
  if (length_ > 0) ::munmap(base_, length_);
}

}  // namespace ulysses::pack
