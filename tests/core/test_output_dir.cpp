// OutputDir: complete or absent; never overwrite without asking.
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
