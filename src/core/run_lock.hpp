// One run per output directory: RunLock holds an flock on DIR/.lock for its lifetime, the holder ("host H, pid P,
// since T") written inside. A second run on the same output is refused in one line naming the holder; the kernel
// drops the lock when its process dies, so a lock file that still names a holder but can be taken was left by a
// run that was killed: it is taken over, and taken_over() says whose it was. A clean end empties the file. On a
// filesystem without flock (Lustre mounted without -o flock) the run goes on unlocked, with warning() saying so.
#pragma once

#include <filesystem>
#include <string>

namespace ulysses {

class RunLock {
 public:
  // Creates dir if needed. BadInput naming the holder when another live process holds it.
  explicit RunLock(const std::filesystem::path& dir);
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  const std::string& taken_over() const { return taken_over_; }   // the killed holder's line, or empty
  const std::string& warning() const { return warning_; }          // why the run is unlocked, or empty

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  std::string taken_over_, warning_;
};

}  // namespace ulysses
