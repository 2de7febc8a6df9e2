// safetensors files (st::Reader: header length, JSON header, dtypes, shapes, offsets), then every tensor read in
// pieces and converted to fp32 as ulysses-ckpt does.
#include <algorithm>
#include <vector>

#include "ckpt/dtype.hpp"
#include "fuzz_common.hpp"
#include "io/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto path = ulysses::fuzz::write_file("model.safetensors", ulysses::fuzz::as_text(data, size));
  ulysses::fuzz::refuse_or_read([&] {
    ulysses::st::Reader r(path);
    std::vector<char> buf;
    std::vector<float> f32;
    for (const auto& t : r.tensors()) {
      const std::uint64_t n = std::min<std::uint64_t>(t.nbytes(), 1 << 16);   // the reader checked it fits
      buf.resize(n);
      r.read_range(t, 0, n, buf.data());
      if (ulysses::ckpt::is_model_float(t.dtype) && t.dtype != ulysses::st::DType::kF32) {
        f32.resize(n / 2);
        ulysses::ckpt::convert(buf.data(), t.dtype, f32.data(), ulysses::st::DType::kF32, n / 2);
      }
    }
    (void)r.find("x");
  });
  return 0;
}
