// What the shard reader and writers both check (internal to io/): the datasets' file dtypes, the chunk
// length bound, and the validity of parameters and of one sequence's metadata.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "io/shard.hpp"
#include "io/shard_format.hpp"

namespace ulysses::shard::detail {

constexpr std::int64_t kMaxChunkLen = 65536;

// The expected file dtype of each dataset, for the reader's checks and messages.
struct IntSpec {
  const char* name;
  std::size_t bytes;
  bool is_signed;
  const char* dtype;
};
constexpr IntSpec kIdsSpec{kInputIds, 4, true, "int32"};
constexpr IntSpec kMaskSpec{kLossMask, 1, false, "uint8"};
constexpr IntSpec kLengthsSpec{kSeqLengths, 4, true, "int32"};
constexpr IntSpec kOffsetsSpec{kDocOffsets, 8, true, "int64"};
constexpr IntSpec kStartsSpec{kDocStarts, 4, true, "int32"};

// "" when the metadata of one sequence is valid for seq_len, else what is wrong, with the numbers.
std::string meta_problem(const SequenceMeta& m, std::int64_t seq_len);
// Throws BadInput unless seq_len, sp and alignment are positive and seq_len % (sp * alignment) == 0.
void check_params(const ShardParams& p, const std::string& where);

}  // namespace ulysses::shard::detail
