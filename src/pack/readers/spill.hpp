// Documents spilled to scratch files: the readers of inputs that cannot be read at random (JSONL, plain text,
// parquet) hand each document's ids (and loss mask) to a DocumentSpill while they scan, and finish() returns the
// TokenSource that preads them back.
//
// The ids are spilled as int32 (the mask as uint8) into files named after the source id and the process in
// options.scratch_dir, unlinked right after they are created: they live exactly as long as the TokenSource, and
// vanish even if the process is killed. A document whose ids reach options.vocab_size, or that its reader found
// bad, stops the scan (BadInput naming where it is and what is wrong, with the reader's hint), or under
// --on-error skip is counted, logged the first time, and left out.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pack/corpus.hpp"
#include "pack/readers/readers.hpp"
#include "pack/readers/text_documents.hpp"

namespace ulysses::pack {

class SpillFile;

class DocumentSpill {
 public:
  // with_mask: documents come with a loss mask (add's mask is then required).
  DocumentSpill(const std::filesystem::path& input, const ReaderOptions& options, DocSink& sink, bool with_mask,
                std::string hint);
  ~DocumentSpill();
  DocumentSpill(const DocumentSpill&) = delete;
  DocumentSpill& operator=(const DocumentSpill&) = delete;

  // One document: ids [n] in [0, 2^31), mask [n] of 0/1 when with_mask. Its ids are checked against
  // options.vocab_size first (JsonLineError, column 0, when one is not below it): nothing is spilled then.
  void add(const std::vector<std::int32_t>& ids, const std::vector<std::uint8_t>* mask);
  // A bad document at `where` (as "FILE:LINE:COLUMN" or "FILE: row N"): stop, or count and skip (see above).
  void bad(const std::string& where, const std::string& what);
  // Every record tokenized (text_documents.hpp) and added in order; a bad one goes to bad() at records.where().
  void add_text(RecordSource& records);
  // The spilled documents, for reading back; the spill is done.
  std::unique_ptr<TokenSource> finish();

 private:
  std::filesystem::path spill_path(const char* kind) const;

  std::string input_;
  const ReaderOptions& options_;
  DocSink& sink_;
  std::string hint_;
  std::unique_ptr<SpillFile> ids_;
  std::unique_ptr<SpillFile> mask_;   // null without a mask
  std::uint64_t offset_ = 0;          // tokens spilled so far
};

}  // namespace ulysses::pack
