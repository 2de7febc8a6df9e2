// Helpers for the safetensors GoogleTests: files of test values (see test_values.hpp), raw byte files
// for the bad-input cases, and a per-test scratch directory.
#pragma once

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "io/safetensors.hpp"
#include "test_values.hpp"

namespace st_test {

namespace fs = std::filesystem;

// Writes `decls` to `path`, tensor i holding test_bytes(.., salt = i).
inline void write_test_file(const fs::path& path, const std::vector<ulysses::st::Writer::Decl>& decls,
                            const std::map<std::string, std::string>& metadata = {}) {
  ulysses::st::Writer w(path, decls, metadata);
  for (std::size_t i = 0; i < decls.size(); ++i) {
    const auto bytes = test_bytes(decls[i].dtype, numel(decls[i].shape), i);
    w.write_next(bytes.data(), bytes.size());
  }
  w.finish();
}

inline void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// The 8-byte little-endian header length n, then `header`, then `data_bytes` bytes of 0xAB.
inline std::string raw_file(std::uint64_t n, const std::string& header, std::size_t data_bytes) {
  std::string s(8, '\0');
  std::memcpy(s.data(), &n, 8);
  return s + header + std::string(data_bytes, '\xAB');
}

inline std::string raw_file(const std::string& header, std::size_t data_bytes) {
  return raw_file(header.size(), header, data_bytes);
}

inline std::vector<std::uint8_t> read_all(const ulysses::st::Reader& r, const ulysses::st::TensorInfo& t) {
  std::vector<std::uint8_t> out(t.nbytes());
  r.read(t, out.data());
  return out;
}

// A fresh scratch directory per test, removed afterwards.
class ScratchDir : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    root = fs::temp_directory_path() /
           ("uly-st-" + std::string(info->test_suite_name()) + "-" + info->name() + "-" + std::to_string(::getpid()));
    fs::remove_all(root);
    fs::create_directories(root);
  }
  void TearDown() override { fs::remove_all(root); }
  fs::path root;
};

}  // namespace st_test
