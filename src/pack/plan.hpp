// Packing plans: which piece of which document goes into which sequence. Pure arithmetic over
// document lengths (no tokens, no files), so the policies are tested on random corpora in isolation.
//
// A plan is CSR: sequence i holds pieces[seq_begin[i] .. seq_begin[i+1]), in order; each piece is a
// contiguous run of one document's tokens. Tokens not in any piece are accounted as truncated
// (cut from a document that was kept) or dropped (whole documents or a tail left out).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace ulysses::pack {

struct Piece {
  std::uint32_t doc = 0;      // index into the corpus's DocRef list
  std::uint32_t offset = 0;   // first token of the piece within the document
  std::uint32_t length = 0;   // tokens
};

struct PlanStats {
  std::uint64_t split_documents = 0;   // documents that ended up in more than one piece
  std::uint64_t truncated_tokens = 0;  // tokens cut off kept documents (--long-docs truncate)
  std::uint64_t dropped_tokens = 0;    // tokens of dropped documents, or concat's incomplete tail
  std::uint64_t dropped_documents = 0; // documents left out entirely
  std::uint64_t padding_tokens = 0;    // seq_len * sequences - packed tokens
};

struct PackPlan {
  std::vector<std::uint64_t> seq_begin{0};   // size = sequences + 1
  std::vector<Piece> pieces;
  PlanStats stats;
  std::size_t num_sequences() const { return seq_begin.size() - 1; }
};

// What becomes of a document longer than seq_len: cut into seq_len pieces (bfd only), its first seq_len
// tokens kept, or left out whole.
enum class LongDocs { kSplit, kTruncate, kDrop };

// Best-fit-decreasing. With kSplit, documents longer than seq_len are cut into seq_len pieces (each its own
// full sequence) and the remainder is packed like any document; with kTruncate they keep their first seq_len
// tokens (a full sequence); with kDrop they are left out. Deterministic: ties broken by document index.
PackPlan plan_bfd(std::span<const std::uint32_t> doc_lengths, std::uint32_t seq_len,
                  LongDocs long_docs = LongDocs::kSplit);

// Concatenate in corpus order and chunk into seq_len; the incomplete last chunk is dropped (no padding).
PackPlan plan_concat(std::span<const std::uint32_t> doc_lengths, std::uint32_t seq_len);

// One document per sequence, padded; longer ones truncated to seq_len or dropped (kSplit is a caller bug).
PackPlan plan_pad(std::span<const std::uint32_t> doc_lengths, std::uint32_t seq_len, LongDocs long_docs);

}  // namespace ulysses::pack
