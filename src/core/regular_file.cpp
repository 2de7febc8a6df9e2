#include "core/regular_file.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.hpp"

namespace ulysses {

void check_plain_file_name(const std::string& name, const std::string& where) {
  const bool control = std::any_of(name.begin(), name.end(), [](char c) {
    return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;   // a newline or an escape would reach the terminal
  });
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos || control)
    throw BadInput(fmt::format("{}: file \"{}\" is not a plain name inside its folder", where, printable(name)),
                   "a manifest names files beside it (no \"/\", no \"..\"): the manifest is damaged or hostile");
}

int open_regular_file(const std::filesystem::path& path, const std::string& what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);   // a FIFO's open must not wait
  if (fd < 0)
    throw BadInput(fmt::format("cannot open {} {}: {}", what, path.string(), std::strerror(errno)),
                   "check the path and its permissions");
  struct stat st{};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw BadInput(fmt::format("{} {} is not a regular file (a FIFO, device or directory)", what, path.string()),
                   "pass a regular file");
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);   // reads of a regular file never block anyway
  return fd;
}

std::string read_small_file(const std::filesystem::path& path, const std::string& what, std::size_t max_bytes) {
  const int fd = open_regular_file(path, what);
  struct stat st{};
  ::fstat(fd, &st);
  const auto size = static_cast<std::size_t>(st.st_size);
  if (size > max_bytes) {
    ::close(fd);
    throw BadInput(fmt::format("{} {} has {} bytes, more than the {} a file of its kind may have", what, path.string(),
                               size, max_bytes),
                   "check that it is the file you meant");
  }
  std::string text(size, '\0');
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd, text.data() + done, size - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  const int err = errno;
  ::close(fd);
  if (done != size)
    throw BadInput(fmt::format("cannot read {} {}: {} of {} bytes ({})", what, path.string(), done, size,
                               std::strerror(err)),
                   "check the file and its filesystem");
  return text;
}

}  // namespace ulysses
