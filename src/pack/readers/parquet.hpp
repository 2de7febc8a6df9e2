// Parquet inputs (the files Hugging Face datasets are stored as), read with the libparquet of the pyarrow wheel.
//
// Each row is a document. With a tokenizer its text is the string column options.text_key (string, large_string or
// string_view), tokenized as JSONL text is (text_documents.hpp); without one its ids are the integer-list column
// options.tokens_key (list, large_list or fixed_size_list of any integer type), with the 0/1 loss mask of the same
// length under options.mask_key when set (integers or bools). The file is read a batch of rows at a time (at most
// 1,024, about 16 MiB), only the columns named, so memory stays bounded by a batch whatever the file's size. A null row, a null or out-of-range
// value, or a mask of another length makes a bad row: "FILE: row N: …" (1-based), which stops the scan or, under
// --on-error skip, is counted and left out. A column that is missing or of another type, or a file libparquet
// cannot read, is a BadInput naming the file (and the columns it has); so is metadata claiming a buffer past
// 256 MiB + 64 × the file's size, refused before it is allocated.
// A build without pyarrow (meson option parquet) says so, as a BadInput, for any parquet input.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "pack/corpus.hpp"
#include "pack/readers/text_documents.hpp"

namespace ulysses::pack {

// The text of each row of column `column`, for tokenize_documents. Opening checks the file and the column.
std::unique_ptr<RecordSource> parquet_text_records(const std::filesystem::path& path, const std::string& column);

}  // namespace ulysses::pack
