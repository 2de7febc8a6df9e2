// The pack readers' fuzz harness: scan one input as ulysses-pack's pass 1 does (scan_input validates it and
// records its documents), then read every document back as pass 2 does (at most 64K tokens each).
#pragma once

#include <algorithm>
#include <filesystem>
#include <vector>

#include "fuzz_common.hpp"
#include "pack/corpus.hpp"

namespace ulysses::fuzz {

// The options of a token input with an optional loss-mask column ("loss_mask") and --on-error skip or stop.
inline pack::ReaderOptions token_input(pack::Format format, bool mask, bool skip) {
  pack::ReaderOptions o;
  o.format = format;
  o.mask_key = mask ? "loss_mask" : "";
  o.on_error = skip ? pack::OnError::kSkip : pack::OnError::kStop;
  return o;
}

inline void scan_and_read(const std::filesystem::path& path, pack::ReaderOptions options) {
  options.scratch_dir = scratch() / "spill";
  std::filesystem::create_directories(options.scratch_dir);
  refuse_or_read([&] {
    std::vector<pack::DocRef> docs;
    pack::ScanStats stats;
    std::string checksum;
    const auto source = pack::scan_input(path, 0, options, docs, stats, &checksum);
    std::vector<std::int32_t> ids;
    std::vector<std::uint8_t> mask;
    for (const pack::DocRef& d : docs) {
      const std::uint32_t n = std::min<std::uint32_t>(d.length, 1 << 16);
      ids.resize(n);
      mask.resize(n);
      source->read(d.offset, n, ids.data(), mask.data());
    }
  });
}

}  // namespace ulysses::fuzz
