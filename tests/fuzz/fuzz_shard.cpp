// A packed HDF5 shard (shard::ShardReader: attributes, dataset dtypes and shapes, sequence metadata), then every
// sequence's tokens, mask and document ids read as the trainer's loader reads an SP slice.
#include <algorithm>
#include <vector>

#include <hdf5.h>

#include "fuzz_common.hpp"
#include "io/shard.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto path = ulysses::fuzz::write_file("shard-00000.h5", ulysses::fuzz::as_text(data, size));
  ulysses::fuzz::refuse_or_read([&] {
    ulysses::shard::ShardReader r(path);
    const std::int64_t S = r.params().seq_len;
    std::vector<std::int32_t> ids(static_cast<std::size_t>(S));
    std::vector<std::uint8_t> mask(static_cast<std::size_t>(S));
    for (std::int64_t q = 0; q < std::min<std::int64_t>(r.num_sequences(), 64); ++q) {
      r.read(q, 0, S, ids.data(), mask.data());
      (void)r.meta(q);
    }
  });
  // Every handle the reader opened is closed, read or refused (what libhdf5 itself leaks on a crafted file is
  // suppressed in lsan.supp; this check is what keeps that suppression from hiding a leak of ours).
  if (H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL) != 0) std::abort();
  return 0;
}
