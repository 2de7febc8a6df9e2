// replace_file: the new text whole, or the old file untouched and no temporary left, with the reason.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "core/replace_file.hpp"

namespace fs = std::filesystem;

namespace {

std::string contents(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class ReplaceFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root = fs::temp_directory_path() / ("uly-replace-" + std::to_string(::getpid()));
    fs::remove_all(root);
    fs::create_directories(root);
  }
  void TearDown() override { fs::remove_all(root); }
  std::size_t entries() const { return static_cast<std::size_t>(std::distance(fs::directory_iterator(root), {})); }
  fs::path root;
};

TEST_F(ReplaceFileTest, WritesANewFileAndReplacesAnOldOneWhole) {
  const fs::path f = root / "latest";
  EXPECT_EQ(ulysses::replace_file(f, "step-2\n"), "");
  EXPECT_EQ(contents(f), "step-2\n");
  EXPECT_EQ(ulysses::replace_file(f, std::string("a\0b", 3)), "");
  EXPECT_EQ(contents(f), std::string("a\0b", 3));
  EXPECT_EQ(ulysses::replace_file(f, ""), "");
  EXPECT_EQ(contents(f), "");
  EXPECT_EQ(entries(), 1u);   // no temporary left beside it
}

TEST_F(ReplaceFileTest, AFailedRenameLeavesTheTargetAndNoTemporary) {
  const fs::path dir = root / "manifest.json";   // a non-empty folder where the file belongs
  fs::create_directories(dir);
  std::ofstream(dir / "keep") << "x";
  const std::string why = ulysses::replace_file(dir, "{}\n");
  EXPECT_FALSE(why.empty());
  EXPECT_EQ(contents(dir / "keep"), "x");
  EXPECT_EQ(entries(), 1u);
}

TEST_F(ReplaceFileTest, AMissingFolderIsAReasonNotAFile) {
  const std::string why = ulysses::replace_file(root / "no" / "profile.json", "{}\n");
  EXPECT_NE(why.find("No such file"), std::string::npos) << why;
  EXPECT_FALSE(fs::exists(root / "no"));
}

}  // namespace
