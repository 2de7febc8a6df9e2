#include "pack/readers/byte_stream.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "core/error.hpp"

namespace ulysses::pack {
namespace {

// An owned read-only descriptor; read_some() returns 0 at end of file.
class Fd {
 public:
  explicit Fd(const std::string& name) : name_(name), fd_(::open(name.c_str(), O_RDONLY | O_CLOEXEC)) {
    if (fd_ < 0)
      throw BadInput(fmt::format("cannot open {}: {}", name_, std::strerror(errno)), "check the path and its permissions");
  }
  ~Fd() { ::close(fd_); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  std::size_t read_some(char* dst, std::size_t capacity) {
    for (;;) {
      const ssize_t n = ::read(fd_, dst, capacity);
      if (n >= 0) return static_cast<std::size_t>(n);
      if (errno != EINTR) throw BadInput(fmt::format("cannot read {}: {}", name_, std::strerror(errno)),
                                         "check that the file is readable and complete");
    }
  }

 private:
  std::string name_;
  int fd_;
};

class PlainStream final : public ByteStream {
 public:
  explicit PlainStream(const std::string& name) : fd_(name) {}
  std::size_t read(char* dst, std::size_t capacity) override { return fd_.read_some(dst, capacity); }

 private:
  Fd fd_;
};

class GzipStream final : public ByteStream {
 public:
  explicit GzipStream(const std::string& name) : name_(name), gz_(gzopen(name.c_str(), "rb")) {
    if (gz_ == nullptr)
      throw BadInput(fmt::format("cannot open {}: {}", name_, std::strerror(errno)), "check the path and its permissions");
    gzbuffer(gz_, 1 << 20);
  }
  ~GzipStream() override { gzclose(gz_); }
  GzipStream(const GzipStream&) = delete;
  GzipStream& operator=(const GzipStream&) = delete;

  std::size_t read(char* dst, std::size_t capacity) override {
    const unsigned want = static_cast<unsigned>(std::min<std::size_t>(capacity, 1u << 30));
    const int n = gzread(gz_, dst, want);
    int code = Z_OK;
    const char* message = gzerror(gz_, &code);
    if (n < 0 || (code != Z_OK && code != Z_STREAM_END)) {
      throw BadInput(fmt::format("{}: corrupt or truncated gzip data: {}", name_, message),
                     "check the download (gzip -t) or decompress it yourself");
    }
    return static_cast<std::size_t>(n);
  }

 private:
  std::string name_;
  gzFile gz_;
};

class ZstdStream final : public ByteStream {
 public:
  explicit ZstdStream(const std::string& name)
      : name_(name), fd_(name), dctx_(ZSTD_createDCtx()), in_buf_(ZSTD_DStreamInSize()) {
    if (dctx_ == nullptr) throw std::runtime_error("ZSTD_createDCtx failed");
  }
  ~ZstdStream() override { ZSTD_freeDCtx(dctx_); }
  ZstdStream(const ZstdStream&) = delete;
  ZstdStream& operator=(const ZstdStream&) = delete;

  std::size_t read(char* dst, std::size_t capacity) override {
    ZSTD_outBuffer out{dst, capacity, 0};
    while (out.pos == 0) {
      if (in_.pos == in_.size && !eof_) refill();
      const std::size_t consumed_before = in_.pos;
      const std::size_t ret = ZSTD_decompressStream(dctx_, &out, &in_);
      if (ZSTD_isError(ret)) {
        throw BadInput(fmt::format("{}: corrupt zstd data: {}", name_, ZSTD_getErrorName(ret)),
                       "check the download (zstd -t)");
      }
      if (out.pos > 0 || in_.pos > consumed_before) {
        frame_unfinished_ = ret != 0;
      } else if (eof_) {
        if (frame_unfinished_) {
          throw BadInput(fmt::format("{}: truncated zstd data (the last frame ends early, after {} "
                                     "compressed bytes)", name_, compressed_bytes_),
                         "check the download (zstd -t)");
        }
        return 0;
      }
    }
    return out.pos;
  }

 private:
  void refill() {
    const std::size_t n = fd_.read_some(in_buf_.data(), in_buf_.size());
    in_ = ZSTD_inBuffer{in_buf_.data(), n, 0};
    compressed_bytes_ += n;
    eof_ = n == 0;
  }

  std::string name_;
  Fd fd_;
  ZSTD_DCtx* dctx_;
  std::vector<char> in_buf_;
  ZSTD_inBuffer in_{nullptr, 0, 0};
  std::size_t compressed_bytes_ = 0;
  bool eof_ = false;
  bool frame_unfinished_ = false;   // the decoder is inside a frame (needs input or has output)
};

}  // namespace

std::unique_ptr<ByteStream> open_byte_stream(const std::filesystem::path& path) {
  const std::string ext = path.extension().string();
  if (ext == ".gz") return std::make_unique<GzipStream>(path.string());
  if (ext == ".zst") return std::make_unique<ZstdStream>(path.string());
  return std::make_unique<PlainStream>(path.string());
}

}  // namespace ulysses::pack
