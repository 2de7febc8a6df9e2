// llm.c token shards (256 int32 header: magic, version, token count; then uint16 or uint32 tokens).
#include "pack_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto path = ulysses::fuzz::write_file("shard_000000.bin", ulysses::fuzz::as_text(data, size));
  ulysses::pack::ReaderOptions o;
  o.format = ulysses::pack::Format::kLlmc;
  ulysses::fuzz::scan_and_read(path, o);
  return 0;
}
