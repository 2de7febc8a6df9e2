// A file opened for positional reads (pread) and mapped windows, shared by every reader and token source.
//
// Guarantees: read_exact() is thread-safe (no file position is used) and either fills the whole range
// or throws BadInput naming the file, the byte offset and the byte counts. The descriptor is closed
// when the object dies. Spill files (JSONL) are adopted from an already open descriptor.
// MappedRange maps a range read-only for one sequential scan (no copy into user memory); it is
// unmapped when it dies, so resident memory stays bounded by the windows alive at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

namespace ulysses::pack {

class InputFile {
 public:
  explicit InputFile(const std::filesystem::path& path);   // BadInput if it cannot be opened
  static InputFile adopt(int fd, std::string name);         // takes ownership of an open descriptor
  ~InputFile();
  InputFile(InputFile&& other) noexcept;
  InputFile& operator=(InputFile&&) = delete;
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  const std::string& name() const { return name_; }
  std::uint64_t size() const { return size_; }
  void read_exact(std::uint64_t offset, void* dst, std::size_t bytes) const;

 private:
  InputFile(int fd, std::string name);
  int fd_ = -1;
  std::string name_;
  std::uint64_t size_ = 0;
  friend class MappedRange;
};

class MappedRange {
 public:
  // Bytes [offset, offset + bytes) of file, which must lie inside it (BadInput if it cannot be mapped).
  MappedRange(const InputFile& file, std::uint64_t offset, std::size_t bytes);
  ~MappedRange();
  MappedRange(const MappedRange&) = delete;
  MappedRange& operator=(const MappedRange&) = delete;

  const std::byte* data() const { return data_; }   // the byte at `offset`

 private:
  void* base_ = nullptr;     // page-aligned start of the mapping
  std::size_t length_ = 0;   // bytes mapped from base_
  const std::byte* data_ = nullptr;
};

}  // namespace ulysses::pack
