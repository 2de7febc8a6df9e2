// An output directory that appears complete or not at all.
//
// Files are written into ".<name>.tmp-<host>-<pid>/" beside it, under an flock held on "<that>.lock" while it
// lives; commit() renames it to <final> (replacing an old one only with overwrite). If the object dies uncommitted
// (error, exception), the temporary is removed. One that a killed run on this host left (its lock free) is removed
// by the next run for the same output, which says so once it has committed.
// A pre-existing <final> without overwrite is refused up front, before any work.
#pragma once

#include <filesystem>
#include <vector>

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
  void release_lock();
  std::filesystem::path final_, tmp_;
  std::vector<std::filesystem::path> removed_;   // temporaries of killed runs, removed at construction
  int lock_fd_ = -1;
  bool overwrite_, committed_ = false;
};

}  // namespace ulysses
