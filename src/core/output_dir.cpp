#include "core/output_dir.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <system_error>
#include <vector>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/log.hpp"

namespace fs = std::filesystem;

namespace ulysses {
namespace {

std::string host_name() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

// A lock held on "<temporary>.lock" for as long as the temporary is being written (flock: the kernel drops it when
// the process dies, whatever PID namespace it lived in).
int hold_lock(const fs::path& lock) {
  const int fd = ::open(lock.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  if (fd < 0 || ::flock(fd, LOCK_EX | LOCK_NB) != 0)
    throw BadInput(fmt::format("cannot lock {}: {}", lock.string(), std::strerror(errno)),
                   "another run writes this output now, or the filesystem has no locks: choose another output");
  return fd;
}

// Whether the run that made this temporary is gone: its lock can be taken (or, for a temporary without a lock
// file, its PID no longer runs here).
bool abandoned(const fs::path& tmp, pid_t pid) {
  const fs::path lock = tmp.string() + ".lock";
  const int fd = ::open(lock.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return ::kill(pid, 0) != 0 && errno == ESRCH;
  const bool free = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
  ::close(fd);
  return free;
}

// The temporaries that runs on this host left behind when they were killed (SIGKILL, OOM, a node reboot's last
// moments): ".NAME.tmp-HOST-PID" whose run is gone. Another host's are left alone (its locks and PIDs are not
// reliably seen from here on a shared filesystem). Returns what it removed.
std::vector<fs::path> remove_abandoned_temporaries(const fs::path& parent, const std::string& name, const std::string& host) {
  const std::string prefix = fmt::format(".{}.tmp-{}-", name, host);
  std::vector<fs::path> removed;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(parent, ec)) {
    const std::string file = e.path().filename().string();
    if (file.rfind(prefix, 0) != 0) continue;
    const std::string digits = file.substr(prefix.size());
    if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const auto pid = static_cast<pid_t>(std::stol(digits));
    if (pid == getpid() || !abandoned(e.path(), pid)) continue;
    std::error_code failed;
    fs::remove_all(e.path(), failed);
    fs::remove(e.path().string() + ".lock", failed);
    if (!failed) removed.push_back(e.path());
  }
  return removed;
}

}  // namespace

OutputDir::OutputDir(fs::path final_path, bool overwrite)
    : final_(std::move(final_path)), overwrite_(overwrite) {
  if (final_.has_filename() == false) final_ = final_.parent_path();
  std::error_code missing;
  if (fs::exists(final_, missing) && !overwrite_)
    throw BadInput(fmt::format("output {} already exists", final_.string()),
                   "pass --overwrite to replace it, or choose another output path");
  fs::path parent = final_.has_parent_path() ? final_.parent_path() : fs::path(".");
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec || access(parent.c_str(), W_OK) != 0)
    throw BadInput(fmt::format("output directory {} is not writable ({})", parent.string(),
                               ec ? ec.message() : "permission denied"),
                   "choose an output path on a writable filesystem");
  const std::string host = host_name();
  removed_ = remove_abandoned_temporaries(parent, final_.filename().string(), host);
  tmp_ = parent / fmt::format(".{}.tmp-{}-{}", final_.filename().string(), host, getpid());
  lock_fd_ = hold_lock(tmp_.string() + ".lock");
  fs::remove_all(tmp_, ec);
  fs::create_directory(tmp_, ec);
  if (ec) {
    release_lock();   // the destructor does not run for a constructor that throws
    throw BadInput(fmt::format("cannot create {}: {}", tmp_.string(), ec.message()),
                   "check that the output's folder exists, is writable and has free space");
  }
}

OutputDir::~OutputDir() {
  std::error_code ec;
  if (!committed_) fs::remove_all(tmp_, ec);
  release_lock();
}

void OutputDir::release_lock() {
  if (lock_fd_ < 0) return;
  std::error_code ec;
  fs::remove(tmp_.string() + ".lock", ec);
  ::close(lock_fd_);
  lock_fd_ = -1;
}

void OutputDir::commit() {
  std::error_code ec;
  if (fs::exists(final_)) {
    ULY_CHECK(overwrite_, "{} appeared while we were writing", final_.string());
    fs::path old = final_.string() + fmt::format(".old-{}", getpid());
    fs::rename(final_, old, ec);
    if (ec) throw std::runtime_error(fmt::format("cannot move {} aside: {}", final_.string(), ec.message()));
    fs::rename(tmp_, final_, ec);
    fs::remove_all(old);
  } else {
    fs::rename(tmp_, final_, ec);
  }
  if (ec) throw std::runtime_error(fmt::format("cannot rename {} to {}: {}", tmp_.string(), final_.string(), ec.message()));
  committed_ = true;
  release_lock();
  for (const fs::path& p : removed_)   // said after success: a bad input's error stays the run's one stderr line
    log_info("removed {}: left by a run that was killed before it finished", p.string());
}

}  // namespace ulysses
