// Helpers for the reader tests: a temporary folder, byte writers, scanning an input and reading every
// document back, and a check that a BadInput message names what it must (file, line or offset).
//
// Token ids in fixtures are a function of (document, position), so a token read from the wrong place
// shows up as a wrong value.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.hpp"
#include "pack/corpus.hpp"

namespace ulysses::pack::testing {

using Doc = std::vector<std::int32_t>;

// The id of token t of document d, below `modulus` (keep it small for narrow dtypes).
inline std::int32_t token_id(int d, int t, int modulus = 30000) { return (d * 1009 + t * 7 + 1) % modulus; }

inline Doc make_doc(int d, int length, int modulus = 30000) {
  Doc doc(static_cast<std::size_t>(length));
  for (int t = 0; t < length; ++t) doc[static_cast<std::size_t>(t)] = token_id(d, t, modulus);
  return doc;
}

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "uly-readers-XXXXXX").string();
    const char* made = ::mkdtemp(pattern.data());
    if (made == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = made;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::filesystem::path operator/(std::string_view name) const { return path_ / name; }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline void write_file(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Appends the little-endian bytes of v.
template <class T>
void put(std::string& out, T v) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));
  out.append(bytes, sizeof(T));
}

struct Scanned {
  std::unique_ptr<TokenSource> source;
  std::vector<DocRef> docs;
  ScanStats stats;
};

inline Scanned scan(const std::filesystem::path& path, const ReaderOptions& options,
                    std::uint32_t source_id = 0) {
  Scanned s;
  s.source = scan_input(path, source_id, options, s.docs, s.stats);
  return s;
}

struct ReadBack {
  std::vector<Doc> ids;
  std::vector<std::vector<std::uint8_t>> masks;
};

// Every recorded document read back through TokenSource::read.
inline ReadBack read_all(const Scanned& s) {
  ReadBack r;
  for (const DocRef& d : s.docs) {
    Doc ids(d.length, -7);
    std::vector<std::uint8_t> mask(d.length, 9);
    s.source->read(d.offset, d.length, ids.data(), mask.data());
    r.ids.push_back(std::move(ids));
    r.masks.push_back(std::move(mask));
  }
  return r;
}

// Runs f, which must throw BadInput whose one-line message contains every part.
template <class F>
void expect_bad_input(F&& f, std::initializer_list<std::string_view> parts) {
  try {
    f();
  } catch (const BadInput& e) {
    const std::string message = one_line(e);
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    for (const std::string_view part : parts) {
      EXPECT_NE(message.find(part), std::string::npos) << "message: " << message << "\nlacks: " << part;
    }
    return;
  }
  ADD_FAILURE() << "no BadInput thrown";
}

}  // namespace ulysses::pack::testing
