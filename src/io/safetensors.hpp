// safetensors files and Hugging Face weight directories, torch-free (used by ulysses-train to load and
// save weights, and by ulysses-ckpt to merge/export without LibTorch).
//
// Format (https://huggingface.co/docs/safetensors): u64 little-endian N, then N bytes of UTF-8 JSON
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ..., "__metadata__": {str: str}},
// then the data section; offsets are relative to it. The reader trusts nothing: header size within the
// file (and at most 100 MB, the official limit), JSON well-formed, known dtypes, begin <= end,
// end - begin == numel * itemsize, offsets inside the data section and non-overlapping — each violation
// a BadInput naming the file and the tensor. Like the official library it accepts a header padded with
// spaces; unlike it, it also accepts gaps between tensors and bytes after the last one (harmless: every
// tensor is still checked in bounds).
//
// Errors: a malformed file is a BadInput; an I/O failure after the header checked out (a short read,
// a short write such as ENOSPC, a failed fsync) is a std::runtime_error naming the file; misuse of the
// Writer by our own code (wrong byte count, tensors left unwritten) is a ULY_CHECK failure.
// Little-endian hosts only (as the format), checked at compile time.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace ulysses::st {

enum class DType { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool };

std::size_t itemsize(DType d);
const char* dtype_name(DType d);                                   // "F32", "BF16", ...
DType dtype_from_name(const std::string& name, const std::string& where);   // BadInput if unknown

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0, end = 0;    // byte offsets in the data section
  std::uint64_t numel() const;
  std::uint64_t nbytes() const { return end - begin; }
};

class Reader {
 public:
  explicit Reader(const std::filesystem::path& path);   // reads and validates the header only
  ~Reader();
  Reader(Reader&&) noexcept;
  Reader& operator=(Reader&&) noexcept;

  const std::filesystem::path& path() const { return path_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }   // sorted by begin offset
  const TensorInfo* find(const std::string& name) const;                 // nullptr if absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  void read(const TensorInfo& t, void* dst) const;   // exactly t.nbytes() bytes; pread, thread-safe
  // Bytes [offset, offset + n) of tensor t (offset + n <= t.nbytes()): streams a large tensor in pieces.
  void read_range(const TensorInfo& t, std::uint64_t offset, std::uint64_t n, void* dst) const;

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  std::uint64_t data_start_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Streams tensors into a file: declare all tensors (name, dtype, shape) up front, then write their bytes
// in the declared order. Memory stays at one tensor's worth. finish() checks every tensor was written.
// The header lists the tensors in declared order with contiguous offsets and is padded with spaces to a
// multiple of 8 bytes, as the official library writes it.
//
// The Writer creates `path` and refuses an existing file (it only ever removes what it created). Until
// finish() returns, the file is incomplete: after any error, or if the Writer is destroyed unfinished,
// it removes the file. Callers still write to a temporary name (or inside an OutputDir) and rename it
// once finish() has returned, so a crash never leaves a complete-looking file under the final name.
class Writer {
 public:
  struct Decl {
    std::string name;
    DType dtype;
    std::vector<std::int64_t> shape;
  };
  Writer(const std::filesystem::path& path, std::vector<Decl> tensors,
         const std::map<std::string, std::string>& metadata = {});
  ~Writer();
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;
  void write_next(const void* data, std::uint64_t nbytes);   // the next declared tensor, in order
  // The next piece of the current tensor: pieces of any size, in order; the tensor is complete (and the
  // next one current) when its declared byte count is reached. Lets a caller stream a huge tensor.
  void write_part(const void* data, std::uint64_t nbytes);
  void finish();                                              // flush, fsync, close; throws on short write

 private:
  std::filesystem::path path_;
  int fd_ = -1;                  // open while unfinished; -1 once finished or abandoned (file removed)
  std::vector<Decl> decls_;
  std::size_t next_ = 0;
  std::uint64_t next_done_ = 0;  // bytes of decls_[next_] written so far by write_part
};

// A Hugging Face weights directory: model.safetensors, or model.safetensors.index.json
// ({"metadata": {..}, "weight_map": {tensor: shard file}}) + shards, each opened once. Like transformers,
// a model.safetensors is preferred when both exist. The index is the authority: tensors a shard holds
// beyond the ones the index maps to it are not listed.
class HfWeights {
 public:
  explicit HfWeights(const std::filesystem::path& dir);   // BadInput: missing files, shard named but absent
  std::vector<std::string> names() const;                 // sorted
  const TensorInfo& info(const std::string& name) const;  // BadInput if absent, naming the directory
  bool contains(const std::string& name) const;
  void read(const std::string& name, void* dst) const;
  // Bytes [offset, offset + n) of the tensor (see Reader::read_range); the file that holds it.
  void read_range(const std::string& name, std::uint64_t offset, std::uint64_t n, void* dst) const;
  const std::filesystem::path& file_of(const std::string& name) const;
  const std::vector<Reader>& files() const { return files_; }

 private:
  std::filesystem::path dir_;
  std::vector<Reader> files_;
  std::map<std::string, std::pair<std::size_t, const TensorInfo*>> index_;   // name → (file, info)
};

}  // namespace ulysses::st
