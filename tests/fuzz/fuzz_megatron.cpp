// Megatron-LM indexed datasets: the first two bytes give the .idx file's length (little-endian), then the .idx,
// then the .bin.
#include "pack_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const std::size_t idx = std::min<std::size_t>(size - 2, data[0] | (data[1] << 8));
  const auto text = ulysses::fuzz::as_text(data + 2, size - 2);
  ulysses::fuzz::write_file("corpus_text_document.idx", text.substr(0, idx));
  const auto bin = ulysses::fuzz::write_file("corpus_text_document.bin", text.substr(idx));
  ulysses::pack::ReaderOptions o;
  o.format = ulysses::pack::Format::kMegatron;
  ulysses::fuzz::scan_and_read(bin, o);
  return 0;
}
