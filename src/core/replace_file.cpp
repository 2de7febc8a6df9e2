#include "core/replace_file.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

namespace ulysses {

std::string replace_file(const std::filesystem::path& path, std::string_view text) {
  const std::filesystem::path tmp = path.string() + ".tmp-" + std::to_string(getpid());
  std::error_code ec;
  errno = 0;
  {
    std::ofstream out(tmp, std::ios::binary);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.close();
    if (!out) {
      const std::string why = errno != 0 ? std::strerror(errno) : "write failed";
      std::filesystem::remove(tmp, ec);
      return why;
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (!ec) return "";
  std::error_code ignored;
  std::filesystem::remove(tmp, ignored);
  return ec.message();
}

}  // namespace ulysses
