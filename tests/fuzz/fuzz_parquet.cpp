// Parquet inputs (the pyarrow wheel's libparquet under our reader): the first byte picks the mode — bit 0 a loss mask
// column, bit 1 --on-error skip, bit 2 the text column read as records (what --tokenizer tokenizes) instead of ids;
// the rest is the file. Ids are scanned and read back as pack does; text records are read to the end.
#include "pack/readers/parquet.hpp"
#include "pack_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const auto path = ulysses::fuzz::write_file("in.parquet", ulysses::fuzz::as_text(data + 1, size - 1));
  if (data[0] & 4) {
    ulysses::fuzz::refuse_or_read([&] {
      const auto records = ulysses::pack::parquet_text_records(path, "text");
      for (ulysses::pack::Record record; records->next(record);) {
      }
    });
    return 0;
  }
  ulysses::fuzz::scan_and_read(path, ulysses::fuzz::token_input(ulysses::pack::Format::kParquet, (data[0] & 1) != 0,
                                                                (data[0] & 2) != 0));
  return 0;
}
