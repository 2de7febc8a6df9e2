// Flat token files: the first byte picks uint16 or uint32 tokens, an EOS id (none, 0, 1 or 50256) and where the
// EOS splits; the rest is the file.
#include "pack_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const auto path = ulysses::fuzz::write_file("tokens.bin", ulysses::fuzz::as_text(data + 1, size - 1));
  ulysses::pack::ReaderOptions o;
  o.format = ulysses::pack::Format::kFlat;
  o.flat_token_bytes = data[0] & 1 ? 4 : 2;
  static constexpr std::int64_t kEos[] = {-1, 0, 1, 50256};
  o.eos_id = kEos[(data[0] >> 1) & 3];
  o.split_at = data[0] & 8 ? ulysses::pack::SplitAt::kBeforeEos : ulysses::pack::SplitAt::kAfterEos;
  o.vocab_size = data[0] & 16 ? 50257 : 0;
  ulysses::fuzz::scan_and_read(path, o);
  return 0;
}
