// libFuzzer target for the readers that take untrusted bytes: the safetensors header/layout checks
// (st::Reader, then every tensor read in pieces and converted to fp32 as ulysses-ckpt does) and the
// checkpoint manifest parser (checkpoint::parse_manifest). The first input byte picks the reader.
// Contract under test: any input either reads or throws BadInput — never a crash, a hang, an
// out-of-bounds access or another exception type. Built and run by run_fuzz.sh (not part of CI).
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ckpt/dtype.hpp"
#include "core/error.hpp"
#include "io/checkpoint_format.hpp"
#include "io/safetensors.hpp"

namespace {

std::string scratch_file() {
  static const std::string path = [] {
    const char* dir = std::getenv("FUZZ_TMPDIR");
    return std::string(dir ? dir : "/dev/shm") + "/ulysses-fuzz-" + std::to_string(getpid()) + ".safetensors";
  }();
  return path;
}

void fuzz_safetensors(const std::uint8_t* data, std::size_t size) {
  const std::string path = scratch_file();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) std::abort();
  if (size > 0 && ::write(fd, data, size) != static_cast<ssize_t>(size)) std::abort();
  ::close(fd);
  try {
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
  } catch (const ulysses::BadInput&) {
  }
}

void fuzz_manifest(const std::uint8_t* data, std::size_t size) {
  try {
    const auto m = ulysses::checkpoint::parse_manifest(std::string(reinterpret_cast<const char*>(data), size),
                                                       "manifest.json");
    (void)ulysses::checkpoint::to_json(m).dump();
  } catch (const ulysses::BadInput&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  if (data[0] & 1) fuzz_manifest(data + 1, size - 1);
  else fuzz_safetensors(data + 1, size - 1);
  return 0;
}
