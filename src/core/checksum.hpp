// Content checksums for manifests: XXH3-64 of a file's bytes, as 16 lowercase hex digits.
//
// Xxh3Stream hashes bytes fed in pieces, in order: the result equals xxh3_hex of their concatenation,
// so a reader can hash a file while it scans it instead of reading it twice.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

struct XXH3_state_s;

namespace ulysses {

std::string xxh3_file_hex(const std::filesystem::path& path);   // throws BadInput if unreadable
std::string xxh3_hex(const void* data, std::size_t size);

class Xxh3Stream {
 public:
  Xxh3Stream();
  void update(const void* data, std::size_t size);
  std::string hex() const;   // of every byte fed so far

 private:
  struct Free {
    void operator()(XXH3_state_s* s) const;
  };
  std::unique_ptr<XXH3_state_s, Free> state_;
};

}  // namespace ulysses
