// OutputDir: complete or absent; never overwrite without asking.
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "core/error.hpp"
#include "core/output_dir.hpp"

namespace fs = std::filesystem;

class OutputDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root = fs::temp_directory_path() / ("uly-outdir-" + std::to_string(::getpid()));
    fs::remove_all(root);
    fs::create_directories(root);
  }
  void TearDown() override { fs::remove_all(root); }
  fs::path root;
};

TEST_F(OutputDirTest, UncommittedLeavesNothing) {
  {
    ulysses::OutputDir out(root / "ds", false);
    std::ofstream(out.tmp() / "a.txt") << "x";
  }
  EXPECT_FALSE(fs::exists(root / "ds"));
  EXPECT_TRUE(fs::is_empty(root));
}

TEST_F(OutputDirTest, CommitRenames) {
  ulysses::OutputDir out(root / "ds", false);
  std::ofstream(out.tmp() / "a.txt") << "x";
  out.commit();
  EXPECT_TRUE(fs::exists(root / "ds" / "a.txt"));
  EXPECT_FALSE(fs::exists(out.tmp()));
}

TEST_F(OutputDirTest, ExistingRefusedWithoutOverwrite) {
  fs::create_directories(root / "ds");
  EXPECT_THROW(ulysses::OutputDir(root / "ds", false), ulysses::BadInput);
  ulysses::OutputDir out(root / "ds", true);
  std::ofstream(out.tmp() / "new.txt") << "y";
  out.commit();
  EXPECT_TRUE(fs::exists(root / "ds" / "new.txt"));
}

TEST_F(OutputDirTest, TemporariesOfKilledRunsOnThisHostAreRemoved) {
  const pid_t dead = fork();   // a PID that has just ended
  if (dead == 0) _exit(0);
  waitpid(dead, nullptr, 0);
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const fs::path stale = root / (".ds.tmp-" + std::string(host) + "-" + std::to_string(dead));
  const fs::path live = root / (".ds.tmp-" + std::string(host) + "-" + std::to_string(getppid()));
  const fs::path elsewhere = root / (".ds.tmp-otherhost-" + std::to_string(dead));
  for (const auto& d : {stale, live, elsewhere}) fs::create_directories(d / "shard-00000.h5");
  // a live PID here but a free lock: the run that held it is gone (a PID of another PID namespace, or reused)
  const fs::path reused = root / (".ds.tmp-" + std::string(host) + "-1");
  fs::create_directories(reused);
  std::ofstream(reused.string() + ".lock") << "";
  ulysses::OutputDir out(root / "ds", false);
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_FALSE(fs::exists(reused)) << "its lock was free";
  EXPECT_FALSE(fs::exists(reused.string() + ".lock"));
  EXPECT_TRUE(fs::exists(live)) << "a running pack's temporary";
  EXPECT_TRUE(fs::exists(elsewhere)) << "another host's PIDs mean nothing here";
  EXPECT_NE(out.tmp(), stale);
}
