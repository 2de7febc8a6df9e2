#include "core/replace_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ulysses {
namespace {

// Writes all of `text` to `fd` and makes it durable; "" or strerror's words.
std::string write_all(int fd, std::string_view text) {
  for (std::size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::strerror(errno);
    done += static_cast<std::size_t>(n);
  }
  return ::fsync(fd) == 0 ? "" : std::strerror(errno);
}

void sync_folder(const std::filesystem::path& folder) {   // the rename itself, durable (best effort)
  const int fd = ::open(folder.empty() ? "." : folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

std::string replace_file(const std::filesystem::path& path, std::string_view text) {
  const std::filesystem::path tmp = path.string() + ".tmp-" + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return std::strerror(errno);
  std::string why = write_all(fd, text);
  if (::close(fd) != 0 && why.empty()) why = std::strerror(errno);
  std::error_code ec;
  if (why.empty()) {
    std::filesystem::rename(tmp, path, ec);
    if (!ec) {
      sync_folder(path.parent_path());
      return "";
    }
    why = ec.message();
  }
  std::filesystem::remove(tmp, ec);
  return why;
}

}  // namespace ulysses
