#include "core/checksum.hpp"

#include <cstdio>
#include <memory>
#include <vector>

#include <fmt/format.h>
#include <xxhash.h>

#include "core/error.hpp"

namespace ulysses {

std::string xxh3_hex(const void* data, std::size_t size) {
  return fmt::format("{:016x}", XXH3_64bits(data, size));
}

std::string xxh3_file_hex(const std::filesystem::path& path) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) throw BadInput(fmt::format("cannot open {} for reading", path.string()));
  std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> st(XXH3_createState(), &XXH3_freeState);
  XXH3_64bits_reset(st.get());
  std::vector<char> buf(1 << 20);
  while (std::size_t n = std::fread(buf.data(), 1, buf.size(), f.get())) XXH3_64bits_update(st.get(), buf.data(), n);
  if (std::ferror(f.get())) throw BadInput(fmt::format("read error in {}", path.string()));
  return fmt::format("{:016x}", XXH3_64bits_digest(st.get()));
}

}  // namespace ulysses
