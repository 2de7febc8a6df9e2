// The corpus index: every input document as a reference into a random-access token source.
//
// Pass 1 of packing scans each input once (validating it) and records one DocRef per document
// (16 bytes each: the "few bytes per document" the packer keeps in memory). Pass 2 reads the tokens
// of each packed sequence back through TokenSource::read. Inputs that cannot be read at random
// (JSONL, compressed or not) are spilled during pass 1 as flat int32 tokens (+ uint8 mask) into a
// scratch folder; binary inputs (Megatron .bin, llm.c, flat token files) are read in place.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace ulysses {
class Progress;
}
namespace ulysses::tokenize {
class Tokenizer;
}

namespace ulysses::pack {

struct DocRef {
  std::uint32_t source = 0;   // index into the list of TokenSources
  std::uint32_t length = 0;   // tokens (> 0; empty documents are skipped at scan time)
  std::uint64_t offset = 0;   // first token, counted in tokens from the start of the source's token stream
};
static_assert(sizeof(DocRef) == 16);

// Random-access tokens of one input. read() is thread-safe (pread), so pass 2 runs in parallel.
class TokenSource {
 public:
  virtual ~TokenSource() = default;
  virtual const std::string& name() const = 0;    // the input's path, for messages
  virtual bool has_loss_mask() const = 0;
  // Copies tokens [offset, offset + n) as int32 into ids, and (if mask != nullptr) the per-token loss
  // mask (1 = token is a training target; sources without a mask write 1).
  virtual void read(std::uint64_t offset, std::uint32_t n, std::int32_t* ids, std::uint8_t* mask) const = 0;
};

// kText: plain text, with a tokenizer; kParquet: a text column (with a tokenizer) or a token-id column
enum class Format { kAuto, kJsonl, kMegatron, kLlmc, kFlat, kText, kParquet };
// The formats that may hold text (read with a tokenizer); their readers spill, and the caller hashes the file.
inline bool holds_text(Format f) { return f == Format::kJsonl || f == Format::kText || f == Format::kParquet; }
enum class TextSplit { kFile, kBlankLine };   // a plain text file is one document, or one per blank-line block
enum class OnError { kStop, kSkip };
enum class SplitAt { kAfterEos, kBeforeEos };   // EOS ends a document (nanoGPT) or starts one (llm.c)

struct ReaderOptions {
  Format format = Format::kAuto;          // kAuto: by extension/magic (see detect_format)
  std::string tokens_key = "input_ids";   // JSONL key / parquet column holding the token id array
  const tokenize::Tokenizer* tokenizer = nullptr;   // set: JSONL lines hold text under text_key, tokenized here
  std::string text_key = "text";          // JSONL key / parquet column holding a document's text (with a tokenizer)
  TextSplit text_split = TextSplit::kFile;   // plain text inputs (with a tokenizer)
  bool append_eos = true;                 // with a tokenizer: end each document with its EOS (as Megatron's --append-eod)
  bool add_special_tokens = true;         // with a tokenizer: the ids its template puts around a document (BOS)
  std::string mask_key;                   // JSONL key / parquet column holding the 0/1 loss mask (empty: none)
  std::int64_t eos_id = -1;               // flat/llm.c: split documents at this id (-1: llm.c default / whole file)
  SplitAt split_at = SplitAt::kAfterEos;  // flat default; llm.c files use kBeforeEos unless told
  bool split_at_given = false;            // the user chose --split-at explicitly
  int flat_token_bytes = 0;               // flat files: 2 (uint16) or 4 (uint32); 0 = from --flat-dtype / error
  std::int64_t vocab_size = 0;            // > 0: every id must be < vocab_size
  OnError on_error = OnError::kStop;      // kSkip: count bad documents (JSONL lines, text, parquet rows), go on
  std::filesystem::path scratch_dir;      // where JSONL, text and parquet inputs are spilled
  int threads = 1;                        // workers the scan of one binary input may use
  Progress* progress = nullptr;           // set: tokenized text adds its tokens here batch by batch (a big file moves)
};

struct ScanStats {
  std::uint64_t documents = 0;          // documents recorded (non-empty)
  std::uint64_t tokens = 0;             // tokens in recorded documents
  std::uint64_t empty_documents = 0;    // documents with no tokens (skipped)
  std::uint64_t skipped_documents = 0;  // bad documents skipped under --on-error skip
  std::int64_t max_id = -1;             // largest token id seen
  std::uint64_t input_bytes = 0;        // bytes of the input file(s) (.bin + .idx for Megatron)
};

Format detect_format(const std::filesystem::path& path);   // throws BadInput naming the file

// Scans one input (for Megatron: the path of the .bin or .idx, or the prefix), appends its documents
// to `docs` with the given source id, and returns the source to read them back. Throws BadInput with
// the file and line/offset for malformed input (unless on_error == kSkip and the format can skip).
// Binary inputs are hashed while scanned: *checksum (if given) receives the XXH3-64 hex of the file
// (Megatron: of the .bin, '+', of the .idx); it is left empty for JSONL, whose caller hashes the file.
std::unique_ptr<TokenSource> scan_input(const std::filesystem::path& path, std::uint32_t source_id,
                                        const ReaderOptions& options, std::vector<DocRef>& docs,
                                        ScanStats& stats, std::string* checksum = nullptr);

}  // namespace ulysses::pack
