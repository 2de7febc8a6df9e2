// Writes two small packed datasets with known content for read_with_h5py.py, which re-derives
// everything from docs/data-format.md alone. Usage: write_example_shard DIR → DIR/masked (with
// loss_mask) and DIR/plain (without), each holding manifest.json, shard-00000.h5 and valid-00000.h5.
//
// The content rules below are restated independently in read_with_h5py.py; keep the two in step:
//   S = 512, P = 4, alignment = 32, pad_id = 9
//   token(split, seq, i) = base + seq * S + i for i < length (base 1000 train, 500000 valid), else pad_id
//   loss_mask(seq, i) = 0 if i >= length or (seq * S + i) % 7 == 3, else 1
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "core/checksum.hpp"
#include "core/main_guard.hpp"
#include "io/manifest.hpp"
#include "io/shard.hpp"

namespace fs = std::filesystem;
using namespace ulysses::shard;

namespace {

constexpr std::int64_t kS = 512, kSp = 4, kAlignment = 32, kPadId = 9;

struct Split {
  const char* name;   // "train" / "valid"
  const char* file;
  std::int32_t base;
  std::vector<SequenceMeta> metas;
  std::vector<std::size_t> blocks;   // sequences per append
};

const std::vector<Split> kSplits = {
    {"train", "shard-00000.h5", 1000,
     {{512, {0, 128, 300}}, {400, {0, 127, 129, 256}}, {129, {0}}, {512, {0}}, {1, {0}}}, {2, 3}},
    {"valid", "valid-00000.h5", 500000, {{384, {0, 383}}, {256, {0, 100}}}, {2}},
};

ManifestShard write_split(const fs::path& dir, const Split& split, bool has_mask) {
  const auto n = static_cast<std::int64_t>(split.metas.size());
  ShardWriter w(dir / split.file, {kS, kSp, kAlignment, kPadId, has_mask}, n);
  std::size_t seq = 0;
  for (std::size_t block : split.blocks) {
    std::vector<std::int32_t> ids;    // [block, S]
    std::vector<std::uint8_t> mask;   // [block, S] or empty
    for (std::size_t k = seq; k < seq + block; ++k)
      for (std::int64_t i = 0; i < kS; ++i) {
        const bool real = i < split.metas[k].length;
        const std::int64_t g = static_cast<std::int64_t>(k) * kS + i;
        ids.push_back(real ? static_cast<std::int32_t>(split.base + g) : static_cast<std::int32_t>(kPadId));
        if (has_mask) mask.push_back(real && g % 7 != 3);
      }
    w.append(ids, mask, std::span(split.metas).subspan(seq, block));
    seq += block;
  }
  w.close();
  const fs::path path = dir / split.file;
  return {split.file, split.name, n, static_cast<std::int64_t>(fs::file_size(path)), ulysses::xxh3_file_hex(path)};
}

void write_dataset(const fs::path& dir, bool has_mask) {
  fs::create_directories(dir);
  Manifest m;
  m.seq_len = kS;
  m.sp = kSp;
  m.alignment = kAlignment;
  m.pad_id = kPadId;
  m.vocab_size = 600000;
  m.max_token_id = 500000 + 2 * kS - 1;
  m.has_loss_mask = has_mask;
  m.policy = "bfd";
  m.seed = 1234;
  m.command = "write_example_shard " + dir.parent_path().string();
  m.created_by = "write_example_shard (tests/io)";
  m.inputs = {{"synthetic", "none", 0, "0000000000000000", 14, 2194}};
  m.stats = {{"sequences", 7}};
  for (const Split& s : kSplits) m.shards.push_back(write_split(dir, s, has_mask));
  write_manifest(m, dir / "manifest.json");
}

}  // namespace

int main(int argc, char** argv) {
  return ulysses::run_guarded([&] {
    if (argc != 2) {
      std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
      return 2;
    }
    write_dataset(fs::path(argv[1]) / "masked", true);
    write_dataset(fs::path(argv[1]) / "plain", false);
    return 0;
  });
}
