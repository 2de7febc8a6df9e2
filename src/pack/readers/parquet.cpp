#include "pack/readers/parquet.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include <arrow/array.h>
#include <arrow/io/file.h>
#include <arrow/memory_pool.h>
#include <arrow/record_batch.h>
#include <arrow/type.h>
#include <fmt/format.h>
#include <parquet/arrow/reader.h>
#include <parquet/arrow/schema.h>
#include <parquet/exception.h>
#include <unistd.h>

#include "core/error.hpp"
#include "core/regular_file.hpp"
#include "pack/readers/readers.hpp"
#include "pack/readers/spill.hpp"

namespace ulysses::pack {
namespace {

constexpr std::int64_t kBatchRows = 1024;              // rows decoded at a time, at most,
constexpr std::int64_t kBatchBytes = std::int64_t{16} << 20;   // and fewer when the rows are long (see batch_rows)
constexpr std::int64_t kIdLimit = std::int64_t{1} << 31;
// The largest buffer the reader may allocate: 256 MiB, plus 64 bytes for each byte of the file (a decoded batch of
// well-compressed text may be several times its compressed size; no real buffer is 64 times the whole file).
constexpr std::int64_t kBufferCapBase = std::int64_t{256} << 20;
constexpr std::int64_t kBufferCapPerFileByte = 64;

std::string file_hint() {
  return "pass a parquet file (a Hugging Face dataset's data/*.parquet): pyarrow.parquet.read_table must read it";
}

// A Status from libparquet/libarrow: ok, or the file cannot be read.
void check(const arrow::Status& status, const std::string& path) {
  if (!status.ok())
    throw BadInput(fmt::format("{}: not a readable parquet file: {}", path, status.message()), file_hint());
}

template <class T>
T check(arrow::Result<T> result, const std::string& path) {
  check(result.status(), path);
  return std::move(result).ValueUnsafe();
}

bool string_type(arrow::Type::type t) {
  return t == arrow::Type::STRING || t == arrow::Type::LARGE_STRING || t == arrow::Type::STRING_VIEW;
}

bool list_of_values(arrow::Type::type t) {
  return t == arrow::Type::LIST || t == arrow::Type::LARGE_LIST || t == arrow::Type::FIXED_SIZE_LIST;
}

bool is_integer_or_bool(arrow::Type::type t) { return arrow::is_integer(t) || t == arrow::Type::BOOL; }

// Arrow's default pool, refusing any one buffer past `cap` bytes: a page header may claim up to 2 GiB, which the
// reader would allocate before finding the file holds less ("Page was smaller than expected"), so a 2 KB hostile file
// would cost 2 GiB of memory. No buffer of a real file comes near the cap (scan_parquet sets it from the file's size).
class CappedBuffers final : public arrow::MemoryPool {
 public:
  explicit CappedBuffers(std::int64_t cap) : cap_(cap) {}
  using arrow::MemoryPool::Allocate;
  using arrow::MemoryPool::Reallocate;
  arrow::Status Allocate(std::int64_t size, std::int64_t alignment, std::uint8_t** out) override {
    if (size > cap_) return refuse(size);
    return pool_->Allocate(size, alignment, out);
  }
  arrow::Status Reallocate(std::int64_t old_size, std::int64_t new_size, std::int64_t alignment,
                           std::uint8_t** ptr) override {
    if (new_size > cap_) return refuse(new_size);
    return pool_->Reallocate(old_size, new_size, alignment, ptr);
  }
  void Free(std::uint8_t* buffer, std::int64_t size, std::int64_t alignment) override {
    pool_->Free(buffer, size, alignment);
  }
  std::int64_t bytes_allocated() const override { return pool_->bytes_allocated(); }
  std::int64_t total_bytes_allocated() const override { return pool_->total_bytes_allocated(); }
  std::int64_t num_allocations() const override { return pool_->num_allocations(); }
  std::string backend_name() const override { return pool_->backend_name(); }

 private:
  arrow::Status refuse(std::int64_t size) const {
    return arrow::Status::OutOfMemory("a buffer of ", size, " bytes, past this file's cap of ", cap_,
                                      " (256 MiB + 64 x its size): its metadata claims more than the file holds");
  }
  arrow::MemoryPool* pool_ = arrow::default_memory_pool();
  std::int64_t cap_;
};

// A column to read: its name, the types it may have, and for messages what it holds and the flag that names it.
struct ColumnSpec {
  std::string name;
  bool (*accepts)(const arrow::DataType&);
  const char* holds;
  const char* flag;
};

// The rows of a parquet file, a batch of `columns` at a time. Every libparquet exception and error Status becomes a
// BadInput naming the file.
class ParquetRows {
 public:
  ParquetRows(const std::filesystem::path& path, std::vector<ColumnSpec> columns)
      : path_(path.string()), columns_(std::move(columns)) {
    guarded([&] { open(); });
  }

  // The next batch (null at the end); row numbers of its first row are first_row() (1-based).
  std::shared_ptr<arrow::RecordBatch> next() {
    std::shared_ptr<arrow::RecordBatch> batch;
    guarded([&] {
      first_row_ += batch_rows_;
      check(batches_->ReadNext(&batch), path_);
      batch_rows_ = batch ? batch->num_rows() : 0;
    });
    return batch;
  }
  std::uint64_t first_row() const { return first_row_; }
  const std::string& path() const { return path_; }
  std::uint64_t bytes() const { return bytes_; }

 private:
  template <class F>
  void guarded(F&& f) {
    try {
      f();
    } catch (const parquet::ParquetException& e) {
      throw BadInput(fmt::format("{}: not a readable parquet file: {}", path_, e.what()), file_hint());
    }
  }

  void open() {
    const int fd = open_regular_file(path_, "parquet input");   // a FIFO or directory: one line, never a hang
    auto file = arrow::io::ReadableFile::Open(fd);
    if (!file.ok()) ::close(fd);
    std::shared_ptr<arrow::io::ReadableFile> input = check(std::move(file), path_);
    bytes_ = static_cast<std::uint64_t>(check(input->GetSize(), path_));
    pool_ = std::make_unique<CappedBuffers>(kBufferCapBase + kBufferCapPerFileByte * static_cast<std::int64_t>(bytes_));
    // Without pre-buffering, and through a buffered stream, a row group's pages are read as they are decoded
    // (pre-buffered, the whole file's column chunks stay cached until the reader dies; unbuffered, a row group's
    // whole column chunk is read at once: memory would grow with the file or its row groups).
    parquet::ReaderProperties properties(pool_.get());
    properties.enable_buffered_stream();
    parquet::ArrowReaderProperties arrow_properties;
    arrow_properties.set_pre_buffer(false);
    arrow_properties.set_batch_size(kBatchRows);
    parquet::arrow::FileReaderBuilder builder;
    check(builder.Open(input, properties), path_);
    reader_ = check(builder.memory_pool(pool_.get())->properties(arrow_properties)->Build(), path_);
    std::shared_ptr<arrow::Schema> schema;
    check(reader_->GetSchema(&schema), path_);
    std::vector<int> leaves;
    for (const auto& [name, accepts, holds, flag] : columns_) {
      const int field = schema->GetFieldIndex(name);   // -1 when absent, and when several columns have the name
      if (const std::size_t named = schema->GetAllFieldIndices(name).size(); named > 1)
        throw BadInput(fmt::format("{}: {} columns are named \"{}\"", path_, named, printable(name)),
                       "write the file with one column of each name");
      if (field < 0)
        throw BadInput(fmt::format("{}: no column \"{}\" (it has {})", path_, printable(name), column_names(*schema)),
                       fmt::format("name the column that holds the {} ({})", holds, flag));
      if (!accepts(*schema->field(field)->type()))
        throw BadInput(fmt::format("{}: column \"{}\" is {}, not {}", path_, printable(name),
                                   printable(schema->field(field)->type()->ToString()), holds),
                       "a text column is a string; token ids and a loss mask are lists of integers");
      add_leaves(reader_->manifest().schema_fields.at(static_cast<std::size_t>(field)), leaves);
    }
    std::vector<int> groups(static_cast<std::size_t>(reader_->num_row_groups()));
    for (std::size_t g = 0; g < groups.size(); ++g) groups[g] = static_cast<int>(g);
    reader_->set_batch_size(batch_rows(leaves));
    batches_ = check(reader_->GetRecordBatchReader(groups, leaves), path_);
  }

  // Rows per batch: kBatchRows, or fewer so that a batch of the longest rows (the row group whose columns
  // `leaves` hold the most uncompressed bytes per row, by the file's metadata) stays near kBatchBytes — a million-token
  // document is 4 MB of ids or text, and 1,024 of them would be 4 GB. Decoding takes several times a batch (240
  // documents of 190K ids: 132 MB peak with 16 MiB batches, 432 MB with 64 MiB, 843 MB with 1,024 rows). Metadata
  // that lies only changes the batch size.
  std::int64_t batch_rows(const std::vector<int>& leaves) const {
    const std::shared_ptr<parquet::FileMetaData> meta = reader_->parquet_reader()->metadata();
    std::int64_t widest = 0;   // bytes per row
    for (int g = 0; g < meta->num_row_groups(); ++g) {
      const std::unique_ptr<parquet::RowGroupMetaData> group = meta->RowGroup(g);
      if (group->num_rows() <= 0) continue;
      std::int64_t bytes = 0;
      for (const int leaf : leaves)   // each clamped: a lying size must not overflow the sum
        bytes += std::clamp<std::int64_t>(group->ColumnChunk(leaf)->total_uncompressed_size(), 0, kBatchBytes << 20);
      widest = std::max(widest, bytes / group->num_rows());
    }
    return std::clamp<std::int64_t>(widest > 0 ? kBatchBytes / widest : kBatchRows, 1, kBatchRows);
  }

  static void add_leaves(const parquet::arrow::SchemaField& field, std::vector<int>& leaves) {
    if (field.is_leaf()) leaves.push_back(field.column_index);
    for (const auto& child : field.children) add_leaves(child, leaves);
  }

  static std::string column_names(const arrow::Schema& schema) {
    std::string names;
    for (int i = 0; i < schema.num_fields() && i < 20; ++i)
      names += fmt::format("{}\"{}\" ({})", i ? ", " : "", printable(schema.field(i)->name()),
                           printable(schema.field(i)->type()->ToString()));
    if (schema.num_fields() > 20) names += fmt::format(" and {} more", schema.num_fields() - 20);
    return schema.num_fields() == 0 ? "none" : names;
  }

  std::string path_;
  std::vector<ColumnSpec> columns_;
  std::uint64_t bytes_ = 0;
  std::unique_ptr<CappedBuffers> pool_;                 // outlives the readers below, which allocate from it
  std::unique_ptr<parquet::arrow::FileReader> reader_;
  std::unique_ptr<arrow::RecordBatchReader> batches_;   // must die before reader_ (declared after it)
  std::uint64_t first_row_ = 1;
  std::int64_t batch_rows_ = 0;
};

bool text_column(const arrow::DataType& type) { return string_type(type.id()); }

bool integer_list_column(const arrow::DataType& type) {
  return list_of_values(type.id()) && arrow::is_integer(type.field(0)->type()->id());
}

bool mask_list_column(const arrow::DataType& type) {
  return list_of_values(type.id()) && is_integer_or_bool(type.field(0)->type()->id());
}

// A column of a batch, found by name (the batch holds the columns asked for, nothing else).
std::shared_ptr<arrow::Array> column(const arrow::RecordBatch& batch, const std::string& name) {
  std::shared_ptr<arrow::Array> array = batch.GetColumnByName(name);
  ULY_CHECK(array != nullptr, "a parquet batch without its column \"{}\"", name);
  return array;
}

std::string_view text_at(const arrow::Array& array, std::int64_t row) {
  switch (array.type_id()) {
    case arrow::Type::STRING: return static_cast<const arrow::StringArray&>(array).GetView(row);
    case arrow::Type::LARGE_STRING: return static_cast<const arrow::LargeStringArray&>(array).GetView(row);
    default: return static_cast<const arrow::StringViewArray&>(array).GetView(row);
  }
}

// The rows of a text column.
class ParquetTextRecords final : public RecordSource {
 public:
  ParquetTextRecords(const std::filesystem::path& path, std::string column)
      : rows_(path, {{column, text_column, "text (a string column)", "--text-key"}}), column_(std::move(column)) {}

  bool next(Record& record) override {
    while (batch_ == nullptr || row_ == batch_->num_rows()) {
      if ((batch_ = rows_.next()) == nullptr) return false;
      text_ = column(*batch_, column_);
      row_ = 0;
    }
    record.number = rows_.first_row() + static_cast<std::uint64_t>(row_);
    record.text.clear();
    record.problem.clear();
    if (text_->IsNull(row_)) record.problem = fmt::format("null text in column \"{}\"", printable(column_));
    else record.text.assign(text_at(*text_, row_));
    ++row_;
    return true;
  }
  bool json() const override { return false; }
  std::string where(std::uint64_t number, std::size_t column) const override {
    return column > 0 ? fmt::format(": row {}, byte {}", number, column) : fmt::format(": row {}", number);
  }
  std::uint64_t bytes() const { return rows_.bytes(); }

 private:
  ParquetRows rows_;
  std::string column_;
  std::shared_ptr<arrow::RecordBatch> batch_;
  std::shared_ptr<arrow::Array> text_;   // batch_'s text column
  std::int64_t row_ = 0;
};

// Value i of an integer or bool array, as int64 (a uint64 past INT64_MAX saturates: out of every range checked).
std::int64_t integer_at(const arrow::Array& values, std::int64_t i) {
  switch (values.type_id()) {
    case arrow::Type::BOOL: return static_cast<const arrow::BooleanArray&>(values).Value(i) ? 1 : 0;
    case arrow::Type::INT8: return static_cast<const arrow::Int8Array&>(values).Value(i);
    case arrow::Type::INT16: return static_cast<const arrow::Int16Array&>(values).Value(i);
    case arrow::Type::INT32: return static_cast<const arrow::Int32Array&>(values).Value(i);
    case arrow::Type::INT64: return static_cast<const arrow::Int64Array&>(values).Value(i);
    case arrow::Type::UINT8: return static_cast<const arrow::UInt8Array&>(values).Value(i);
    case arrow::Type::UINT16: return static_cast<const arrow::UInt16Array&>(values).Value(i);
    case arrow::Type::UINT32: return static_cast<const arrow::UInt32Array&>(values).Value(i);
    default: {
      const std::uint64_t v = static_cast<const arrow::UInt64Array&>(values).Value(i);
      return static_cast<std::int64_t>(std::min<std::uint64_t>(v, std::numeric_limits<std::int64_t>::max()));
    }
  }
}

// Row `row` of a list column: its values array and [begin, end) in it; nullopt for a null row.
struct ListRow {
  const arrow::Array* values = nullptr;
  std::int64_t begin = 0, end = 0;
};
std::optional<ListRow> list_row(const arrow::Array& list, std::int64_t row) {
  if (list.IsNull(row)) return std::nullopt;
  switch (list.type_id()) {
    case arrow::Type::LIST: {
      const auto& a = static_cast<const arrow::ListArray&>(list);
      return ListRow{a.values().get(), a.value_offset(row), a.value_offset(row) + a.value_length(row)};
    }
    case arrow::Type::LARGE_LIST: {
      const auto& a = static_cast<const arrow::LargeListArray&>(list);
      return ListRow{a.values().get(), a.value_offset(row), a.value_offset(row) + a.value_length(row)};
    }
    default: {
      const auto& a = static_cast<const arrow::FixedSizeListArray&>(list);
      return ListRow{a.values().get(), a.value_offset(row), a.value_offset(row) + a.value_length(row)};
    }
  }
}

// Row values into out, each checked to lie in [0, limit) ("what" names them); the problem, or empty.
template <class T>
std::string row_values(const arrow::Array& list, std::int64_t row, const std::string& name, std::int64_t limit,
                       std::vector<T>& out) {
  out.clear();
  const std::optional<ListRow> r = list_row(list, row);
  if (!r) return fmt::format("null in column \"{}\"", name);
  out.reserve(static_cast<std::size_t>(r->end - r->begin));
  for (std::int64_t i = r->begin; i < r->end; ++i) {
    if (r->values->IsNull(i)) return fmt::format("value {} of column \"{}\" is null", i - r->begin, name);
    const std::int64_t v = integer_at(*r->values, i);
    if (v < 0 || v >= limit)
      return fmt::format("value {} of column \"{}\" is {}, not in [0, {})", i - r->begin, name, v, limit);
    out.push_back(static_cast<T>(v));
  }
  return {};
}

// Token ids (and a loss mask) of each row, spilled.
void spill_id_rows(ParquetRows& rows, const ReaderOptions& options, DocumentSpill& spill) {
  const bool with_mask = !options.mask_key.empty();
  std::vector<std::int32_t> ids;
  std::vector<std::uint8_t> mask;
  while (const std::shared_ptr<arrow::RecordBatch> batch = rows.next()) {
    const std::shared_ptr<arrow::Array> id_column = column(*batch, options.tokens_key);
    const std::shared_ptr<arrow::Array> mask_column = with_mask ? column(*batch, options.mask_key) : nullptr;
    for (std::int64_t row = 0; row < batch->num_rows(); ++row) {
      const auto where = [&] { return fmt::format("{}: row {}", rows.path(), rows.first_row() + static_cast<std::uint64_t>(row)); };
      std::string problem = row_values(*id_column, row, options.tokens_key, kIdLimit, ids);
      if (problem.empty() && with_mask) problem = row_values(*mask_column, row, options.mask_key, 2, mask);
      if (problem.empty() && with_mask && mask.size() != ids.size())
        problem = fmt::format("{} token ids but {} loss mask values", ids.size(), mask.size());
      if (!problem.empty()) {
        spill.bad(where(), problem);
        continue;
      }
      try {
        spill.add(ids, with_mask ? &mask : nullptr);
      } catch (const JsonLineError& e) {
        spill.bad(where(), e.what());
      }
    }
  }
}

std::string row_hint(const ReaderOptions& options) {
  if (options.tokenizer != nullptr)
    return fmt::format("each row must hold its document's text (UTF-8, not null) in column \"{}\" (--text-key); "
                       "--on-error skip skips bad rows", options.text_key);
  std::string hint = fmt::format("each row must hold its token ids as a list of integers in [0, 2^31) in column "
                                 "\"{}\" (--tokens-key)", options.tokens_key);
  if (!options.mask_key.empty())
    hint += fmt::format(" and a 0/1 loss mask of the same length in column \"{}\" (--loss-mask-key)", options.mask_key);
  if (options.vocab_size > 0) hint += fmt::format(", ids < --vocab-size {}", options.vocab_size);
  return hint + "; --on-error skip skips bad rows";
}

}  // namespace

std::unique_ptr<RecordSource> parquet_text_records(const std::filesystem::path& path, const std::string& column) {
  return std::make_unique<ParquetTextRecords>(path, column);
}

std::unique_ptr<TokenSource> scan_parquet(const std::filesystem::path& path, const ReaderOptions& options,
                                          DocSink& sink) {
  if (options.tokenizer != nullptr) {
    ParquetTextRecords records(path, options.text_key);
    sink.stats().input_bytes += records.bytes();
    DocumentSpill spill(path, options, sink, false, row_hint(options));
    spill.add_text(records);
    return spill.finish();
  }
  std::vector<ColumnSpec> columns = {{options.tokens_key, integer_list_column, "token ids (a list of integers)",
                                      "--tokens-key"}};
  if (!options.mask_key.empty())
    columns.push_back({options.mask_key, mask_list_column, "loss mask (a list of 0/1 integers or bools)",
                       "--loss-mask-key"});
  if (options.tokens_key == options.mask_key)
    throw BadInput(fmt::format("{}: --tokens-key and --loss-mask-key are both \"{}\"", path.string(), options.tokens_key),
                   "name two different columns");
  ParquetRows rows(path, std::move(columns));
  sink.stats().input_bytes += rows.bytes();
  DocumentSpill spill(path, options, sink, !options.mask_key.empty(), row_hint(options));
  spill_id_rows(rows, options, spill);
  return spill.finish();
}

}  // namespace ulysses::pack
