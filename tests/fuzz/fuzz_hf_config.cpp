// A Hugging Face config.json (arch::read_model_config), then the parameter list it implies, as every tool builds it.
#include "arch/model_config.hpp"
#include "arch/parameters.hpp"
#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto path = ulysses::fuzz::write_file("config.json", ulysses::fuzz::as_text(data, size));
  ulysses::fuzz::refuse_or_read([&] {
    const auto c = ulysses::arch::read_model_config(path);
    (void)ulysses::arch::parameter_count(c);
  });
  return 0;
}
