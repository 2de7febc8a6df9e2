// The packed-dataset shard format, version 1: every HDF5 name and attribute in one place.
// docs/data-format.md is the public spec; keep the two identical.
//
// A shard holds N sequences of exactly seq_len tokens. Per sequence: its non-padding length (the
// tokens [0, length) are real, [length, seq_len) are pad_id), and the start positions of the documents
// (or document pieces) packed into it, the first always 0. Labels are not stored: they are derived on
// the whole sequence (see labels.hpp) so that SP rank r, reading only [r·S/P, (r+1)·S/P] (+1 token),
// computes exactly the labels the whole sequence has there.
#pragma once

namespace ulysses::shard {

inline constexpr const char* kFormatName = "ulysses-packed";
inline constexpr int kFormatVersion = 1;

// Datasets
inline constexpr const char* kInputIds = "input_ids";      // int32 [N, seq_len], chunks [1, chunk_len]
inline constexpr const char* kLossMask = "loss_mask";      // uint8 [N, seq_len], optional, same chunks
inline constexpr const char* kSeqLengths = "seq_lengths";  // int32 [N]
inline constexpr const char* kDocOffsets = "doc_offsets";  // int64 [N + 1]: CSR into doc_starts
inline constexpr const char* kDocStarts = "doc_starts";    // int32 [D]: start position of each document

// Root attributes (scalars)
inline constexpr const char* kAttrFormat = "format";          // fixed-length string "ulysses-packed"
inline constexpr const char* kAttrVersion = "format_version"; // int64 1
inline constexpr const char* kAttrSeqLen = "seq_len";         // int64
inline constexpr const char* kAttrSp = "sp";                  // int64: SP degree the slices align to
inline constexpr const char* kAttrAlignment = "alignment";    // int64: seq_len % (sp * alignment) == 0
inline constexpr const char* kAttrChunkLen = "chunk_len";     // int64: tokens per HDF5 chunk (divides seq_len / sp)
inline constexpr const char* kAttrPadId = "pad_id";           // int64

inline constexpr int kIgnoreIndex = -100;                     // label of positions that are not targets

}  // namespace ulysses::shard
