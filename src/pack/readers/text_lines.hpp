// JSONL lines of text → token ids with the model's tokenizer (ulysses-pack pack --tokenizer, and tokenize).
//
// Lines are read in batches of about 16 MiB of text, tokenized in parallel on options.threads workers, and handed
// to `take` one by one in line order, so what `take` sees — ids, errors, their order — is the same for any number of
// threads, and memory stays bounded by a batch whatever the file's size. Each non-blank line must be one JSON object
// in UTF-8 with a string under options.text_key; the document is the tokenizer's ids for it, then its EOS when
// options.append_eos (unless the ids already end with it).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "pack/corpus.hpp"
#include "pack/readers/json_line.hpp"
#include "pack/readers/line_reader.hpp"

namespace ulysses::pack {

// take(line number (1-based), the document's ids (take may move them), error): error is null for a good line; for
// a bad one it says why (its column, or 0 for the line as a whole) and ids is empty.
using TakeDocument = std::function<void(std::uint64_t, std::vector<std::int32_t>&, const JsonLineError*)>;

void tokenize_lines(LineReader& lines, const ReaderOptions& options, const TakeDocument& take);

}  // namespace ulysses::pack
