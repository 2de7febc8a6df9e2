// PlannedShardWriter: the checksum close() returns is the XXH3 of the file's bytes (rows hashed while
// written, with or without a loss mask); the shard reads back like ShardWriter's, in any block sizes;
// the same content gives the same bytes; the contract (sizes, order, metadata) is checked.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>

#include "core/checksum.hpp"
#include "io/shard.hpp"

namespace fs = std::filesystem;
using namespace ulysses::shard;

namespace {

constexpr std::int64_t kS = 256, kSp = 4, kAlignment = 16, kPadId = 7;

const std::vector<SequenceMeta> kMetas = {
    {256, {0}}, {256, {0, 64, 128, 192}}, {200, {0, 63, 65}}, {129, {0, 100, 128}}, {1, {0}}, {255, {0, 127, 254}},
};
const auto kN = static_cast<std::int64_t>(kMetas.size());

std::int32_t token(std::int64_t seq, std::int64_t i) {
  return i < kMetas[static_cast<std::size_t>(seq)].length ? static_cast<std::int32_t>(seq * kS + i)
                                                          : static_cast<std::int32_t>(kPadId);
}
std::uint8_t mask_bit(std::int64_t seq, std::int64_t i) {
  return i < kMetas[static_cast<std::size_t>(seq)].length && (seq + i) % 5 != 0;
}

std::string bytes_of(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

class PlannedShard : public ::testing::TestWithParam<bool> {   // param: has_loss_mask
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("planned_shard_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  ShardParams params() const { return {kS, kSp, kAlignment, kPadId, GetParam()}; }

  // Writes the shard in appends of `block` rows; returns close()'s checksum.
  std::string write(const fs::path& path, std::int64_t block) {
    PlannedShardWriter w(path, params(), kMetas);
    for (std::int64_t first = 0; first < kN; first += block) {
      const std::int64_t n = std::min(block, kN - first);
      std::vector<std::int32_t> ids(static_cast<std::size_t>(n * kS));
      std::vector<std::uint8_t> mask(GetParam() ? ids.size() : 0);
      for (std::int64_t r = 0; r < n; ++r)
        for (std::int64_t i = 0; i < kS; ++i) {
          const auto k = static_cast<std::size_t>(r * kS + i);
          ids[k] = token(first + r, i);
          if (GetParam()) mask[k] = mask_bit(first + r, i);
        }
      w.append(ids, mask);
    }
    return w.close();
  }
  fs::path dir_;
};

TEST_P(PlannedShard, ChecksumIsTheFilesAndTheShardReadsBack) {
  const fs::path path = dir_ / "s.h5";
  const std::string sum = write(path, 4);
  EXPECT_EQ(sum, ulysses::xxh3_file_hex(path));
  ShardReader r(path);
  ASSERT_EQ(r.num_sequences(), kN);
  EXPECT_EQ(r.params().has_loss_mask, GetParam());
  for (std::int64_t s = 0; s < kN; ++s) {
    EXPECT_EQ(r.meta(s).length, kMetas[static_cast<std::size_t>(s)].length);
    EXPECT_EQ(r.meta(s).doc_starts, kMetas[static_cast<std::size_t>(s)].doc_starts);
    std::vector<std::int32_t> ids(kS);
    std::vector<std::uint8_t> mask(kS);
    r.read(s, 0, kS, ids.data(), mask.data());
    for (std::int64_t i = 0; i < kS; ++i) {
      ASSERT_EQ(ids[static_cast<std::size_t>(i)], token(s, i)) << s << " " << i;
      ASSERT_EQ(mask[static_cast<std::size_t>(i)], GetParam() ? mask_bit(s, i) : 1) << s << " " << i;
    }
  }
}

TEST_P(PlannedShard, SameContentSameBytesWhateverTheAppends) {
  const std::string a = write(dir_ / "a.h5", 1), b = write(dir_ / "b.h5", kN);
  EXPECT_EQ(a, b);
  EXPECT_EQ(bytes_of(dir_ / "a.h5"), bytes_of(dir_ / "b.h5"));
}

TEST_P(PlannedShard, Contract) {
  std::vector<std::int32_t> row(kS, 1);
  std::vector<std::uint8_t> mask(GetParam() ? kS : 0, 1);
  {
    PlannedShardWriter w(dir_ / "short.h5", params(), kMetas);
    w.append(row, mask);
    EXPECT_THROW(w.close(), std::runtime_error);   // fewer rows than sequences
  }
  {
    PlannedShardWriter w(dir_ / "long.h5", params(), std::span(kMetas).first(1));
    w.append(row, mask);
    EXPECT_THROW(w.append(row, mask), std::logic_error);   // more rows than sequences
    std::vector<std::int32_t> partial(kS - 1);
    EXPECT_THROW(w.append(partial, {}), std::logic_error);   // not whole rows
  }
  const std::vector<SequenceMeta> bad = {{10, {0, 12}}};   // a document start past the length
  EXPECT_THROW(PlannedShardWriter(dir_ / "bad.h5", params(), bad), std::logic_error);
  EXPECT_THROW(PlannedShardWriter(dir_ / "none.h5", params(), {}), std::logic_error);
}

INSTANTIATE_TEST_SUITE_P(Mask, PlannedShard, ::testing::Bool());

}  // namespace
