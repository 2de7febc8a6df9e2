// Lines of a byte stream (byte_stream.hpp), without their '\n'; a line longer than the buffer grows it.
#pragma once

#include <cstddef>
#include <cstring>
#include <string_view>
#include <vector>

#include "pack/readers/byte_stream.hpp"

namespace ulysses::pack {

inline bool is_blank(std::string_view line) { return line.find_first_not_of(" \t\r") == std::string_view::npos; }

class LineReader {
 public:
  explicit LineReader(ByteStream& stream) : stream_(stream), buf_(kBufferBytes) {}

  bool next(std::string_view& line) {
    for (;;) {
      const char* start = buf_.data() + begin_;
      const std::size_t available = end_ - begin_;
      if (const auto* nl = static_cast<const char*>(std::memchr(start, '\n', available))) {
        line = std::string_view(start, static_cast<std::size_t>(nl - start));
        begin_ += line.size() + 1;
        return true;
      }
      if (eof_) {
        line = std::string_view(start, available);
        begin_ = end_;
        return available > 0;
      }
      refill();
    }
  }

 private:
  static constexpr std::size_t kBufferBytes = std::size_t{4} << 20;
  void refill() {
    std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
    if (end_ == buf_.size()) buf_.resize(2 * buf_.size());
    const std::size_t n = stream_.read(buf_.data() + end_, buf_.size() - end_);
    end_ += n;
    eof_ = n == 0;
  }

  ByteStream& stream_;
  std::vector<char> buf_;
  std::size_t begin_ = 0, end_ = 0;
  bool eof_ = false;
};

}  // namespace ulysses::pack
