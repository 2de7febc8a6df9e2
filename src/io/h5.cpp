#include "io/h5.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

namespace ulysses::shard::h5 {
namespace {

// The description of the deepest entry of this thread's HDF5 error stack (where the failure began).
std::string innermost_h5_error() {
  std::string msg = "no HDF5 message";
  auto take_first = [](unsigned n, const H5E_error2_t* e, void* out) -> herr_t {
    if (n == 0 && e->desc != nullptr) *static_cast<std::string*>(out) = e->desc;
    return 0;
  };
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, take_first, &msg);
  return msg;
}

// libhdf5 1.10 cannot close itself after a crafted file failed a metadata checksum (its cache keeps the entry):
// its atexit hook then prints "HDF5: infinite loop closing library" under the tool's one error line. It is
// told before its first call not to install that hook; the OS reclaims its memory at exit anyway.
const bool kNoAtexit = [] {
  H5dont_atexit();
  return true;
}();

}  // namespace

[[noreturn]] void h5_failed(Blame blame, const std::string& where, std::string_view call, const char* src,
                            int line) {
  const std::string_view fn = call.substr(0, call.find('('));
  const std::string msg = fmt::format("{}: {} failed: {}", where, fn, innermost_h5_error());
  if (blame == Blame::kInput)
    throw BadInput(msg, "the file is not a complete ulysses-packed shard; re-run ulysses-pack");
  throw std::runtime_error(fmt::format("{} [{}:{}]", msg, src, line));
}

Plist uncached_dataset_access(const std::string& where) {
  Plist dapl(CHECK_H5(where, H5Pcreate(H5P_DATASET_ACCESS)));
  CHECK_H5(where, H5Pset_chunk_cache(dapl.get(), 1, 0, H5D_CHUNK_CACHE_W0_DEFAULT));
  return dapl;
}

Plist file_access(const std::string& where) {
  Plist fapl(CHECK_H5(where, H5Pcreate(H5P_FILE_ACCESS)));
  CHECK_H5(where, H5Pset_file_locking(fapl.get(), true, true));
  return fapl;
}

Space select_block(hid_t ds, hsize_t row, hsize_t col, hsize_t rows, hsize_t cols, const std::string& where) {
  Space space(CHECK_H5(where, H5Dget_space(ds)));
  const hsize_t start[2] = {row, col}, count[2] = {rows, cols};
  CHECK_H5(where, H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start, nullptr, count, nullptr));
  return space;
}

}  // namespace ulysses::shard::h5
