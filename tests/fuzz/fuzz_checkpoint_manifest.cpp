// A checkpoint's manifest.json (checkpoint::parse_manifest), written back out as ulysses-ckpt inspect does.
#include "fuzz_common.hpp"
#include "io/checkpoint_format.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ulysses::fuzz::refuse_or_read([&] {
    const auto m = ulysses::checkpoint::parse_manifest(std::string(ulysses::fuzz::as_text(data, size)), "manifest.json");
    (void)ulysses::checkpoint::to_json(m).dump();
  });
  return 0;
}
