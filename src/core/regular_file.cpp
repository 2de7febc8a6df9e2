#include "core/regular_file.hpp"

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.hpp"

namespace ulysses {

void check_plain_file_name(const std::string& name, const std::string& where) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
      name.find('\0') != std::string::npos)
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

}  // namespace ulysses
