// An output directory that appears complete or not at all.
//
// Files are written into ".<name>.tmp-<host>-<pid>/" beside it; commit() renames that to <final> (replacing an old
// one only with overwrite). If the object dies uncommitted (error, exception), the temporary is removed; one that a
// killed run on this host left (its PID gone) is removed, with a log line, by the next run for the same output.
// A pre-existing <final> without overwrite is refused up front, before any work.
#pragma once

#include <filesystem>

namespace ulysses {

class OutputDir {
 public:
  OutputDir(std::filesystem::path final_path, bool overwrite);
  ~OutputDir();
  OutputDir(const OutputDir&) = delete;
  OutputDir& operator=(const OutputDir&) = delete;

  const std::filesystem::path& tmp() const { return tmp_; }
  const std::filesystem::path& final_path() const { return final_; }
  void commit();

 private:
  std::filesystem::path final_, tmp_;
  bool overwrite_, committed_ = false;
};

}  // namespace ulysses
