// Element types of binary token files, and the loops that check and convert them to int32 ids.
//
// Guarantees: check_tokens() accepts a token only if it is integral, >= 0 and < limit (limit <= 2^31,
// so every accepted id fits int32); on the fast path it is a branch-free min/max loop over the block.
// convert_tokens() assumes checked input. Element loads go through memcpy, so any buffer alignment works.
// Files are read in the host's byte order: all the formats are little-endian, and so is every host we build for.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ulysses::pack {

static_assert(std::endian::native == std::endian::little, "token files are little-endian");

enum class TokenType : std::uint8_t { kU8, kI8, kI16, kU16, kI32, kU32, kI64, kF32, kF64 };

std::size_t token_bytes(TokenType t);
const char* token_type_name(TokenType t);   // numpy's spelling: "uint16", "float32", ...
std::int64_t token_type_max(TokenType t);   // largest value the type holds (clamped to int64)

// Exclusive upper bound of valid ids: vocab_size when > 0, else 2^31 (ids are stored as int32).
std::int64_t id_limit(std::int64_t vocab_size);

// Checks n tokens at src. Returns the index of the first bad token, or n when all are valid (then
// max_id is raised to the largest of them).
std::size_t check_tokens(TokenType t, const std::byte* src, std::size_t n, std::int64_t limit,
                         std::int64_t& max_id);

// Why the token at src is not a valid id: "token id -3 is negative", "... is >= vocab size 50257".
std::string describe_bad_token(TokenType t, const std::byte* src, std::int64_t vocab_size);

void convert_tokens(TokenType t, const std::byte* src, std::size_t n, std::int32_t* dst);

// Appends to hits the index of every token equal to id (an id the type cannot hold never matches).
void find_token(TokenType t, const std::byte* src, std::size_t n, std::int64_t id,
                std::vector<std::size_t>& hits);

}  // namespace ulysses::pack
