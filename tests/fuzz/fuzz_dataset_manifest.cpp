// A packed dataset's manifest.json (shard::read_manifest: format, sizes, inputs, shard entries and their names).
#include "fuzz_common.hpp"
#include "io/manifest.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ulysses::fuzz::write_file("manifest.json", ulysses::fuzz::as_text(data, size));
  ulysses::fuzz::refuse_or_read([&] {
    const auto m = ulysses::shard::read_manifest(ulysses::fuzz::scratch());
    (void)m.num_sequences("train");
  });
  return 0;
}
