#include "core/output_dir.hpp"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include <system_error>

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

// The temporaries that runs on this host left behind when they were killed (SIGKILL, OOM, a node reboot's last
// moments): ".NAME.tmp-HOST-PID" whose PID no longer runs. Another host's, or a live run's, are left alone (on a
// shared filesystem their PIDs mean nothing here).
void remove_stale_temporaries(const fs::path& parent, const std::string& name, const std::string& host) {
  const std::string prefix = fmt::format(".{}.tmp-{}-", name, host);
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(parent, ec)) {
    const std::string file = e.path().filename().string();
    if (file.rfind(prefix, 0) != 0) continue;
    const std::string digits = file.substr(prefix.size());
    if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const auto pid = static_cast<pid_t>(std::stol(digits));
    if (pid == getpid() || ::kill(pid, 0) == 0 || errno != ESRCH) continue;
    std::error_code removed;
    fs::remove_all(e.path(), removed);
    if (!removed) log_info("removed {}: left by a run (pid {}) that was killed before it finished", e.path().string(), pid);
  }
}

}  // namespace

OutputDir::OutputDir(fs::path final_path, bool overwrite)
    : final_(std::move(final_path)), overwrite_(overwrite) {
  if (final_.has_filename() == false) final_ = final_.parent_path();
  if (fs::exists(final_) && !overwrite_)
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
  remove_stale_temporaries(parent, final_.filename().string(), host);
  tmp_ = parent / fmt::format(".{}.tmp-{}-{}", final_.filename().string(), host, getpid());
  fs::remove_all(tmp_, ec);
  fs::create_directory(tmp_, ec);
  if (ec) throw BadInput(fmt::format("cannot create {}: {}", tmp_.string(), ec.message()));
}

OutputDir::~OutputDir() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(tmp_, ec);
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
}

}  // namespace ulysses
