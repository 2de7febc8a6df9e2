#include "core/output_dir.hpp"

#include <unistd.h>

#include <system_error>

#include <fmt/format.h>

#include "core/error.hpp"

namespace fs = std::filesystem;

namespace ulysses {

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
  tmp_ = parent / fmt::format(".{}.tmp-{}", final_.filename().string(), getpid());
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
