// Megatron-LM indexed datasets (MMIDIDX v1): a .bin of raw tokens and a .idx describing them.
//
// .idx layout (little-endian), as megatron/core/datasets/indexed_dataset.py writes it:
//   char[9] "MMIDIDX\0\0" | u64 version = 1 | u8 dtype code | u64 S (sequences) | u64 D (document
//   indices = documents + 1) | int32 lengths[S] (tokens) | int64 pointers[S] (byte offsets in .bin)
//   | int64 document_indices[D] (0 = first, S = last) | [int8 modes[S], multimodal datasets only]
// Document i is sequences document_indices[i] .. document_indices[i+1]-1, concatenated.
//
// Checks before trusting the payload: magic, version, dtype code, the .idx size against S and D,
// document indices non-decreasing from 0 to S, every sequence inside the .bin at a token boundary,
// and the sequences ending exactly at the end of the .bin. Then every token id is checked.
// A document whose sequences are contiguous in the .bin (always, for files Megatron writes) is one
// DocRef; one whose sequences are not becomes one DocRef per non-empty sequence, because a DocRef
// is a single contiguous range.
#include <array>
#include <cstring>
#include <numeric>
#include <string_view>

#include "core/checksum.hpp"
#include "core/error.hpp"
#include "pack/readers/binary_tokens.hpp"
#include "pack/readers/readers.hpp"

namespace ulysses::pack {
namespace {

constexpr const char* kNotMegatron = "not a Megatron-LM MMIDIDX index of a known version: make it again with "
                                     "Megatron's tools/preprocess_data.py";

constexpr std::string_view kMagic{"MMIDIDX\0\0", 9};
constexpr std::uint64_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;
constexpr const char* kMismatchHint =
    "the .idx and .bin must come from the same Megatron preprocessing run; re-run it or pass the "
    "matching pair";

struct MegatronIndex {
  TokenType type = TokenType::kI32;
  std::vector<std::int32_t> lengths;     // [S] tokens
  std::vector<std::int64_t> pointers;    // [S] byte offsets in the .bin
  std::vector<std::int64_t> doc_index;   // [D] first sequence of each document, then S
};

std::string escape_bytes(std::string_view bytes) {
  std::string s;
  for (const char c : bytes) {
    const auto u = static_cast<unsigned char>(c);
    s += u >= 0x20 && u < 0x7F ? std::string(1, c) : fmt::format("\\x{:02x}", u);
  }
  return s;
}

TokenType dtype_from_code(const InputFile& idx, std::uint8_t code) {
  static constexpr std::array<TokenType, 8> kByCode = {
      TokenType::kU8, TokenType::kI8,  TokenType::kI16, TokenType::kI32,
      TokenType::kI64, TokenType::kF64, TokenType::kF32, TokenType::kU16};
  if (code < 1 || code > kByCode.size()) {
    throw BadInput(fmt::format("{}: byte offset 17: unknown dtype code {} (Megatron uses 1..8)",
                               idx.name(), code), kNotMegatron);
  }
  return kByCode[code - 1];
}

template <class T>
T get(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

MegatronIndex read_index(const InputFile& idx) {
  if (idx.size() < kHeaderBytes) {
    throw BadInput(fmt::format("{}: {} bytes, shorter than the {}-byte MMIDIDX header", idx.name(),
                               idx.size(), kHeaderBytes), kMismatchHint);
  }
  std::array<std::byte, kHeaderBytes> h;
  idx.read_exact(0, h.data(), h.size());
  const std::string_view magic(reinterpret_cast<const char*>(h.data()), kMagic.size());
  if (magic != kMagic) {
    throw BadInput(fmt::format("{}: byte offset 0: magic \"{}\", expected \"MMIDIDX\\x00\\x00\"",
                               idx.name(), escape_bytes(magic)),
                   "this is not a Megatron indexed dataset index; pass --format for other formats");
  }
  const auto version = get<std::uint64_t>(h.data() + 9);
  if (version != 1) {
    throw BadInput(fmt::format("{}: byte offset 9: MMIDIDX version {}, only version 1 is known",
                               idx.name(), version), kNotMegatron);
  }
  MegatronIndex index;
  index.type = dtype_from_code(idx, get<std::uint8_t>(h.data() + 17));
  const auto sequences = get<std::uint64_t>(h.data() + 18);
  const auto documents = get<std::uint64_t>(h.data() + 26);
  // Bounded by the file size first, so the byte count below cannot overflow.
  if (sequences > idx.size() || documents > idx.size())
    throw BadInput(fmt::format("{}: its header declares {} sequences and {} document indices, more than its {} bytes "
                               "can hold", idx.name(), sequences, documents, idx.size()),
                   "the .idx is damaged or was not written by Megatron's indexed dataset builder");
  std::uint64_t needed = 0;   // kHeaderBytes + 12·sequences + 8·documents, checked (a sparse file may be huge)
  if (__builtin_mul_overflow(sequences, std::uint64_t{12}, &needed) || __builtin_add_overflow(needed, kHeaderBytes, &needed) ||
      __builtin_add_overflow(needed, 8 * documents, &needed) || documents > (std::uint64_t{1} << 60))
    throw BadInput(fmt::format("{}: its header declares {} sequences and {} document indices", idx.name(), sequences,
                               documents),
                   "the .idx is damaged or was not written by Megatron's indexed dataset builder");
  const bool multimodal = idx.size() >= needed && idx.size() - needed == sequences;
  if (idx.size() != needed && !multimodal) {
    throw BadInput(fmt::format("{}: {} bytes, but its header ({} sequences, {} document indices) needs "
                               "{} bytes (or {} with multimodal modes)", idx.name(), idx.size(),
                               sequences, documents, needed, needed + sequences),
                   "the .idx is truncated or was not written by Megatron's indexed dataset builder");
  }
  index.lengths.resize(sequences);
  index.pointers.resize(sequences);
  index.doc_index.resize(documents);
  idx.read_exact(kHeaderBytes, index.lengths.data(), 4 * sequences);
  idx.read_exact(kHeaderBytes + 4 * sequences, index.pointers.data(), 8 * sequences);
  idx.read_exact(kHeaderBytes + 12 * sequences, index.doc_index.data(), 8 * documents);
  return index;
}

void check_document_index(const MegatronIndex& index, const InputFile& idx) {
  const auto& d = index.doc_index;
  const std::uint64_t table = kHeaderBytes + 12 * index.lengths.size();
  const auto fail = [&](std::size_t i, const std::string& what) {
    throw BadInput(fmt::format("{}: byte offset {}: document index {}: {}", idx.name(), table + 8 * i,
                               i, what), kMismatchHint);
  };
  if (d.empty()) fail(0, "the table is empty (it must start with 0 and end with the sequence count)");
  if (d.front() != 0) fail(0, fmt::format("{}, expected 0", d.front()));
  for (std::size_t i = 1; i < d.size(); ++i) {
    if (d[i] < d[i - 1]) fail(i, fmt::format("{} is less than the previous one ({})", d[i], d[i - 1]));
  }
  const auto sequences = static_cast<std::int64_t>(index.lengths.size());
  if (d.back() != sequences) {
    fail(d.size() - 1, fmt::format("the last is {}, expected the sequence count {}", d.back(), sequences));
  }
}

void check_sequences(const MegatronIndex& index, const InputFile& idx, const InputFile& bin) {
  const auto size = static_cast<std::int64_t>(token_bytes(index.type));
  const auto bin_bytes = static_cast<std::int64_t>(bin.size());
  const std::uint64_t pointer_table = kHeaderBytes + 4 * index.lengths.size();
  std::int64_t end_of_data = 0;
  for (std::size_t j = 0; j < index.lengths.size(); ++j) {
    const std::int64_t length = index.lengths[j], pointer = index.pointers[j];
    const auto where = [&] {
      return fmt::format("{}: byte offset {}: sequence {}", idx.name(), pointer_table + 8 * j, j);
    };
    if (length < 0 || pointer < 0 || pointer % size != 0) {
      throw BadInput(fmt::format("{} has length {} and .bin byte offset {}; both must be >= 0 and the "
                                 "offset a multiple of the {}-byte {} token",
                                 where(), length, pointer, size, token_type_name(index.type)), kMismatchHint);
    }
    if (pointer > bin_bytes || length > (bin_bytes - pointer) / size) {   // (pointer + length·size may overflow)
      throw BadInput(fmt::format("{} ({} tokens of {} bytes from byte {}) runs past the end of {} ({} bytes)", where(),
                                 length, size, pointer, bin.name(), bin_bytes), kMismatchHint);
    }
    end_of_data = std::max(end_of_data, pointer + length * size);
  }
  if (end_of_data != bin_bytes) {
    throw BadInput(fmt::format("{} describes {} bytes of tokens but {} has {} bytes", idx.name(),
                               end_of_data, bin.name(), bin_bytes), kMismatchHint);
  }
}

// Checks every token, reading runs of sequences that follow each other in the .bin in one sweep, and
// returns the checksum of the .bin (hashed during the sweeps).
std::string scan_bin(const MegatronIndex& index, const InputFile& bin, const ReaderOptions& options,
                     std::int64_t& max_id) {
  const auto size = static_cast<std::int64_t>(token_bytes(index.type));
  const std::size_t sequences = index.lengths.size();
  const TokenCheck check{options.vocab_size, -1, options.threads};
  FileHasher hasher(bin);
  for (std::size_t j = 0; j < sequences;) {
    const std::int64_t run_begin = index.pointers[j];
    std::int64_t run_end = run_begin;
    for (; j < sequences && index.pointers[j] == run_end; ++j) run_end += index.lengths[j] * size;
    scan_tokens(bin, index.type, static_cast<std::uint64_t>(run_begin),
                static_cast<std::uint64_t>((run_end - run_begin) / size), check, hasher, max_id);
  }
  return hasher.finish();
}

void add_documents(const MegatronIndex& index, DocSink& sink) {
  const auto size = static_cast<std::int64_t>(token_bytes(index.type));
  const auto& d = index.doc_index;
  for (std::size_t i = 0; i + 1 < d.size(); ++i) {
    const auto first = static_cast<std::size_t>(d[i]), last = static_cast<std::size_t>(d[i + 1]);
    bool contiguous = true;
    for (std::size_t j = first + 1; j < last; ++j) {
      contiguous = contiguous &&
                   index.pointers[j] == index.pointers[j - 1] + index.lengths[j - 1] * size;
    }
    if (contiguous) {
      const std::int64_t tokens = std::accumulate(index.lengths.begin() + static_cast<std::ptrdiff_t>(first),
                                                  index.lengths.begin() + static_cast<std::ptrdiff_t>(last),
                                                  std::int64_t{0});
      const std::int64_t offset = first < last ? index.pointers[first] / size : 0;
      sink.add(static_cast<std::uint64_t>(offset), static_cast<std::uint64_t>(tokens));
      continue;
    }
    for (std::size_t j = first; j < last; ++j) {
      if (index.lengths[j] == 0) continue;
      sink.add(static_cast<std::uint64_t>(index.pointers[j] / size),
               static_cast<std::uint64_t>(index.lengths[j]));
    }
  }
}

}  // namespace

MegatronPaths megatron_paths(const std::filesystem::path& path) {
  std::filesystem::path prefix = path;
  if (path.extension() == ".bin" || path.extension() == ".idx") prefix.replace_extension();
  return {std::filesystem::path(prefix.string() + ".idx"), std::filesystem::path(prefix.string() + ".bin")};
}

std::unique_ptr<TokenSource> scan_megatron(const std::filesystem::path& path,
                                           const ReaderOptions& options, DocSink& sink) {
  const MegatronPaths paths = megatron_paths(path);
  const InputFile idx(paths.idx);
  InputFile bin(paths.bin);
  sink.stats().input_bytes += idx.size() + bin.size();
  const MegatronIndex index = read_index(idx);
  check_document_index(index, idx);
  check_sequences(index, idx, bin);
  const std::string bin_sum = scan_bin(index, bin, options, sink.stats().max_id);
  add_documents(index, sink);
  sink.set_checksum(bin_sum + "+" + xxh3_file_hex(paths.idx));
  return std::make_unique<BinaryTokenSource>(std::move(bin), index.type, 0);
}

}  // namespace ulysses::pack
