// The trainer's data loader over a dataset of three shards (3, 4 and 2 sequences; a valid shard beside
// them): every epoch visits every train sequence exactly once, each epoch in a new seeded order, a step
// that crosses an epoch boundary wraps into the next epoch's order, DP ranks and micro-batches split a step
// as the header says, the cursor restarts the stream exactly, and an SP rank reads its slice. Each
// sequence's tokens are 1000 × (its index in manifest order) + position, so a read names what it read.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/error.hpp"
#include "core/sequence_parallel.hpp"
#include "data/loader.hpp"
#include "io/manifest.hpp"
#include "io/shard.hpp"

namespace ulysses::data {
namespace {

namespace fs = std::filesystem;

constexpr std::int64_t kS = 16;
constexpr int kTrain = 9;

class Loader : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("ulysses-test-loader-{}", ::getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    shard::Manifest m;
    m.seq_len = kS;
    m.sp = 2;
    m.alignment = 1;
    m.max_token_id = 1000 * 20 + kS;
    m.policy = "test";
    m.stats = nlohmann::json::object();
    int first = 0;
    for (auto [file, split, n] : {std::tuple{"shard-00000.h5", "train", 3}, std::tuple{"valid-00000.h5", "valid", 2},
                                  std::tuple{"shard-00001.h5", "train", 4}, std::tuple{"shard-00002.h5", "train", 2}}) {
      std::vector<std::int32_t> ids;
      std::vector<shard::SequenceMeta> metas;
      const int base = std::string(split) == "valid" ? 100 : first;   // valid sequences: 100, 101
      for (int s = 0; s < n; ++s) {
        for (int t = 0; t < kS; ++t) ids.push_back(1000 * (base + s) + t);
        metas.push_back({static_cast<std::int32_t>(kS), {0}});
      }
      shard::ShardWriter w(dir_ / file, {kS, 2, 1, 0, false}, n);
      w.append(ids, {}, metas);
      w.close();
      m.shards.push_back({file, split, n, 0, ""});
      if (std::string(split) == "train") first += n;
    }
    shard::write_manifest(m, dir_ / "manifest.json");
  }
  void TearDown() override { fs::remove_all(dir_); }

  LoaderOptions options(std::int64_t dp = 1, std::int64_t dp_rank = 0, std::int64_t micro = 1, std::int64_t accum = 1,
                        std::uint64_t seed = 5) const {
    return {SequenceParallel(), dp, dp_rank, micro, accum, seed, 0, "train"};
  }
  // The sequences micro-batch `micro` of the current step holds, by index (first token / 1000).
  static std::vector<int> read(DataLoader& l, std::int64_t micro = 0) {
    const MicroBatch mb = l.micro_batch(micro);
    std::vector<int> seqs;
    for (std::int64_t b = 0; b < mb.batch; ++b) seqs.push_back(static_cast<int>(mb.input_ids[b * mb.local_len] / 1000));
    return seqs;
  }
  // The first `steps` sequences of the stream with one sequence per step.
  std::vector<int> stream(std::int64_t steps, std::uint64_t seed = 5, std::uint64_t from = 0) const {
    DataLoader l(dir_, options(1, 0, 1, 1, seed));
    l.set_cursor(from);
    std::vector<int> out;
    for (std::int64_t i = 0; i < steps; ++i, l.advance_step()) out.push_back(read(l)[0]);
    return out;
  }

  fs::path dir_;
};

TEST_F(Loader, EveryEpochVisitsEverySequenceOnceInANewOrder) {
  DataLoader l(dir_, options());
  EXPECT_EQ(l.num_sequences(), kTrain);   // the valid shard is not in the train split
  const std::vector<int> s = stream(3 * kTrain);
  std::vector<std::vector<int>> epochs;
  for (int e = 0; e < 3; ++e) {
    std::vector<int> epoch(s.begin() + e * kTrain, s.begin() + (e + 1) * kTrain);
    std::vector<int> sorted = epoch;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8})) << "epoch " << e;
    epochs.push_back(epoch);
  }
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[1], epochs[2]);
  EXPECT_NE(epochs[0], (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8})) << "not shuffled";
  EXPECT_NE(stream(kTrain, /*seed=*/6), epochs[0]) << "the seed does not change the order";
}

TEST_F(Loader, TheCursorRestartsTheStreamExactly) {
  const std::vector<int> s = stream(2 * kTrain + 3);
  for (std::uint64_t from : {1u, 8u, 9u, 13u}) {
    const std::vector<int> resumed = stream(5, 5, from);
    EXPECT_EQ(resumed, std::vector<int>(s.begin() + static_cast<std::ptrdiff_t>(from),
                                        s.begin() + static_cast<std::ptrdiff_t>(from) + 5)) << "from " << from;
  }
  DataLoader l(dir_, options());
  l.set_cursor(2 * kTrain + 4);
  EXPECT_EQ(l.epoch(), 2u);
}

TEST_F(Loader, RanksAndMicroBatchesSplitAStepAndWrapIntoTheNextEpoch) {
  // dp 2 × micro 2 × accum 2 = 8 sequences per step: step 2 takes entries 8..15, crossing the boundary
  const std::vector<int> s = stream(2 * kTrain);
  for (std::uint64_t step = 0; step < 2; ++step) {
    std::vector<int> got(8, -1);
    for (std::int64_t d = 0; d < 2; ++d) {
      DataLoader l(dir_, options(2, d, 2, 2));
      l.set_cursor(step * 8);
      for (std::int64_t m = 0; m < 2; ++m) {
        const std::vector<int> mb = read(l, m);
        for (std::int64_t b = 0; b < 2; ++b) got[static_cast<std::size_t>((m * 2 + d) * 2 + b)] = mb[static_cast<std::size_t>(b)];
      }
    }
    EXPECT_EQ(got, std::vector<int>(s.begin() + static_cast<std::ptrdiff_t>(step * 8),
                                    s.begin() + static_cast<std::ptrdiff_t>(step * 8 + 8))) << "step " << step;
  }
}

TEST_F(Loader, AnSpRankReadsItsSlice) {
  LoaderOptions o = options();
  o.sp = SequenceParallel(RankLayout(2, 2), 1, nullptr);
  DataLoader l(dir_, o);
  const MicroBatch mb = l.micro_batch(0);
  ASSERT_EQ(mb.local_len, kS / 2);
  const std::int64_t seq = mb.input_ids[0] / 1000;
  for (std::int64_t t = 0; t < kS / 2; ++t) {
    EXPECT_EQ(mb.input_ids[static_cast<std::size_t>(t)], 1000 * seq + kS / 2 + t);
    EXPECT_EQ(mb.positions[static_cast<std::size_t>(t)], kS / 2 + t);   // one document: global positions
  }
  EXPECT_EQ(mb.labels.back(), -100);   // the sequence's last token predicts nothing
  EXPECT_EQ(mb.labels[0], 1000 * seq + kS / 2 + 1);
  EXPECT_EQ(static_cast<std::int64_t>(mb.doc_ids.size()), kS);   // document ids of the whole sequence
}

TEST_F(Loader, TheValidSplitIsItsOwnStream) {
  LoaderOptions o = options();
  o.split = "valid";
  DataLoader l(dir_, o);
  EXPECT_EQ(l.num_sequences(), 2);
  std::set<int> seen;
  for (int i = 0; i < 2; ++i, l.advance_step()) seen.insert(read(l)[0]);
  EXPECT_EQ(seen, (std::set<int>{100, 101}));
}

TEST_F(Loader, AShardWhoseSizesDifferFromTheManifestIsBadInput) {
  // The loader indexes rows by the manifest's seq_len: a shard that says another one is refused, not read past.
  shard::Manifest m = shard::read_manifest(dir_);
  m.seq_len = 2 * kS;
  shard::write_manifest(m, dir_ / "manifest.json");
  try {
    DataLoader l(dir_, options());
    ADD_FAILURE() << "accepted";
  } catch (const ulysses::BadInput& e) {
    EXPECT_NE(std::string(e.what()).find(fmt::format("(seq_len {}, sp 2", kS)), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ulysses::data

TEST(MicroBatch, AttentionPairsAreTheDocumentsSquaresOrTheirWindowedPairs) {
  ulysses::data::MicroBatch mb;
  mb.batch = 2;
  mb.seq_len = 8;
  mb.doc_ids = {0, 0, 0, 1, 1, 1, 1, 1,    // documents of 3 and 5 tokens
                0, 0, 0, 0, 0, 0, 0, 0};   // one of 8
  EXPECT_EQ(mb.attention_pairs(), 9 + 25 + 64);
  // window 4: the 3-token document is within it; 5 and 8 tokens see at most 4 keys each: 2·d·w − w²
  EXPECT_EQ(mb.attention_pairs(4), 9 + (2 * 5 * 4 - 16) + (2 * 8 * 4 - 16));
  // the same convention as d² = 2·Σ(i + 1) − d: twice the pairs counted key by key, Σ min(i + 1, w), less w
  auto pairs = [](int d, int w) {
    int n = 0;
    for (int i = 0; i < d; ++i) n += std::min(i + 1, w);
    return n;
  };
  EXPECT_EQ(2 * pairs(8, 8) - 8, 8 * 8);
  EXPECT_EQ(2 * pairs(8, 4) - 4, 2 * 8 * 4 - 16);
}
