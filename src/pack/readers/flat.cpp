// Headerless flat token files: nanoGPT's train.bin (uint16), OLMo-style uint16/uint32 memmaps.
//
// The token size comes from --flat-dtype (options.flat_token_bytes, 2 or 4): the file cannot say.
// Documents are split at options.eos_id with options.split_at (kAfterEos by default: nanoGPT APPENDS
// the EOT to each document); eos_id -1 makes the whole file one document.
#include "core/error.hpp"
#include "pack/readers/binary_tokens.hpp"
#include "pack/readers/readers.hpp"

namespace ulysses::pack {

std::unique_ptr<TokenSource> scan_flat(const std::filesystem::path& path, const ReaderOptions& options,
                                       DocSink& sink) {
  const int bytes = options.flat_token_bytes;
  if (bytes != 2 && bytes != 4) {
    throw BadInput(fmt::format("{}: a flat token file needs a token size of 2 or 4 bytes, got {}",
                               path.string(), bytes),
                   "--format flat --flat-dtype uint16|uint32");
  }
  InputFile file(path);
  sink.stats().input_bytes += file.size();
  if (file.size() % static_cast<std::uint64_t>(bytes) != 0) {
    throw BadInput(fmt::format("{}: {} bytes is not a whole number of {}-byte tokens ({} bytes left over)",
                               file.name(), file.size(), bytes, file.size() % static_cast<std::uint64_t>(bytes)),
                   "check --flat-dtype (uint16 or uint32) and that the file is complete");
  }
  const TokenType type = bytes == 2 ? TokenType::kU16 : TokenType::kU32;
  scan_split_stream(file, type, 0, file.size() / static_cast<std::uint64_t>(bytes), options.eos_id,
                    options.split_at, options, sink);
  return std::make_unique<BinaryTokenSource>(std::move(file), type, 0);
}

}  // namespace ulysses::pack
