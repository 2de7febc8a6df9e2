// Pass 1 of packing: expand the input patterns, scan every input (in parallel, one file per task),
// and merge the documents in input order — so the corpus index is the same whatever --threads.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "io/manifest.hpp"
#include "pack/corpus.hpp"

namespace ulysses::pack {

struct Corpus {
  std::vector<std::unique_ptr<TokenSource>> sources;   // index = DocRef::source
  std::vector<DocRef> docs;                            // corpus order: input order, then file order
  std::vector<shard::ManifestInput> inputs;            // one per source, with sizes and checksums
  ScanStats totals;
  bool has_loss_mask = false;
};

// Globs are expanded (sorted per pattern); a pattern that matches nothing is a BadInput.
std::vector<std::string> expand_inputs(const std::vector<std::string>& patterns);

Corpus scan_corpus(const std::vector<std::string>& paths, const ReaderOptions& options, int threads);

}  // namespace ulysses::pack
