#include "core/run_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <system_error>

#include <fmt/format.h>

#include "core/error.hpp"

namespace fs = std::filesystem;

namespace ulysses {
namespace {

constexpr std::size_t kMaxHolder = 512;   // a holder line is short; more is not ours to print

std::string read_holder(int fd) {
  char buf[kMaxHolder] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  std::string text(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
  if (const auto nl = text.find('\n'); nl != std::string::npos) text.resize(nl);
  return printable(text, 200);
}

std::string this_holder() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::time_t now = std::time(nullptr);
  char when[32] = {};
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
  return fmt::format("host {}, pid {}, since {}", host, ::getpid(), when);
}

}  // namespace

RunLock::RunLock(const fs::path& dir) : path_(dir / ".lock") {
  std::error_code ec;
  fs::create_directories(dir, ec);
  fd_ = ::open(path_.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw BadInput(fmt::format("cannot create the run's lock {}: {}", path_.string(), std::strerror(errno)),
                   "choose an --output on a writable filesystem");
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err == EWOULDBLOCK) {
      const std::string holder = read_holder(fd_);
      ::close(fd_);
      fd_ = -1;
      throw BadInput(fmt::format("{} is in use by another run ({}; its lock {})", dir.string(),
                                 holder.empty() ? "the holder is starting" : holder, path_.string()),
                     "wait for that run to end, or pass another --output");
    }
    warning_ = fmt::format("cannot lock {} ({}: a filesystem without flock?): a second run on this output would not "
                           "be stopped", path_.string(), std::strerror(err));
  }
  if (warning_.empty()) taken_over_ = read_holder(fd_);   // locked, yet a holder named: that run was killed
  const std::string me = this_holder() + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size()))
    throw BadInput(fmt::format("cannot write the run's lock {}: {}", path_.string(), std::strerror(errno)),
                   "check the free space and permissions of --output");
}

RunLock::~RunLock() {
  if (fd_ < 0) return;
  // a clean end: nobody named to take over from (a failure leaves our line: the next run says it took over)
  [[maybe_unused]] const int emptied = ::ftruncate(fd_, 0);
  ::close(fd_);   // the lock goes with the descriptor
}

}  // namespace ulysses
