// JSONL token inputs, plain, gzip or zstd (the first byte's low two bits pick the codec by the file's extension;
// bit 2 a loss mask, bit 3 --on-error skip); the rest is the file. Then the documents are read back from the spill.
#include "pack_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  static const char* const kNames[] = {"in.jsonl", "in.jsonl.gz", "in.jsonl.zst", "in.jsonl"};
  const auto path = ulysses::fuzz::write_file(kNames[data[0] & 3], ulysses::fuzz::as_text(data + 1, size - 1));
  ulysses::fuzz::scan_and_read(path, ulysses::fuzz::token_input(ulysses::pack::Format::kJsonl, (data[0] & 4) != 0,
                                                                (data[0] & 8) != 0));
  return 0;
}
