// Sequential bytes of a text input, decompressed on the fly: plain files, gzip (".gz", zlib's
// gzread, concatenated members included) and zstd (".zst", ZSTD_decompressStream, several frames
// included). The codec is chosen by the file's extension.
//
// Guarantees: read() returns 0 only at the true end of the data; a corrupt or truncated compressed
// stream throws BadInput naming the file (an empty file is just empty). Memory is bounded by the
// codec's buffers, whatever the file size.
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>

namespace ulysses::pack {

class ByteStream {
 public:
  virtual ~ByteStream() = default;
  // Up to `capacity` bytes into dst; 0 at the end of the data.
  virtual std::size_t read(char* dst, std::size_t capacity) = 0;
};

std::unique_ptr<ByteStream> open_byte_stream(const std::filesystem::path& path);   // BadInput if unreadable

}  // namespace ulysses::pack
