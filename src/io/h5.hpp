// Checked HDF5 calls and owning handles, for the shard reader and writers (internal to io/).
//
// Every HDF5 call goes through CHECK_H5 (an I/O failure: std::runtime_error) or CHECK_H5_INPUT (a malformed
// file: BadInput), both naming the file, the call and HDF5's innermost message. QuietH5 silences HDF5's own
// printing to stderr on this thread while alive (the error stack is thread-local in the thread-safe build).
#pragma once

#include <hdf5.h>

#include <string>
#include <string_view>
#include <utility>

namespace ulysses::shard::h5 {

enum class Blame { kIo, kInput };   // std::runtime_error (disk, OS) or BadInput (the file is malformed)

// Silences HDF5's automatic error printing on this thread while alive.
class QuietH5 {
 public:
  QuietH5() {
    H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~QuietH5() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }
  QuietH5(const QuietH5&) = delete;
  QuietH5& operator=(const QuietH5&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

[[noreturn]] void h5_failed(Blame blame, const std::string& where, std::string_view call, const char* src,
                            int line);

// hid_t, herr_t and htri_t all report failure as a negative value.
template <typename T>
T check_h5(T result, Blame blame, const std::string& where, const char* call, const char* src, int line) {
  if (result < 0) h5_failed(blame, where, call, src, line);
  return result;
}

#define CHECK_H5(where, call) \
  ::ulysses::shard::h5::check_h5((call), ::ulysses::shard::h5::Blame::kIo, (where), #call, __FILE__, __LINE__)
#define CHECK_H5_INPUT(where, call) \
  ::ulysses::shard::h5::check_h5((call), ::ulysses::shard::h5::Blame::kInput, (where), #call, __FILE__, __LINE__)

// Owns one hid_t; closed by Close on destruction. release() closes now and returns the status.
template <herr_t (*Close)(hid_t)>
class Handle {
 public:
  Handle() = default;
  explicit Handle(hid_t id) : id_(id) {}
  Handle(Handle&& o) noexcept : id_(std::exchange(o.id_, -1)) {}
  Handle& operator=(Handle&& o) noexcept {
    std::swap(id_, o.id_);
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() {
    if (id_ >= 0) Close(id_);
  }
  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  herr_t release() { return Close(std::exchange(id_, -1)); }

 private:
  hid_t id_ = -1;
};
using File = Handle<H5Fclose>;
using Dataset = Handle<H5Dclose>;
using Space = Handle<H5Sclose>;
using Plist = Handle<H5Pclose>;
using Type = Handle<H5Tclose>;
using Attr = Handle<H5Aclose>;

constexpr std::int64_t kMaxChunkLen = 65536;

// Dataset access with a chunk cache of 0 bytes: every chunk is larger, so HDF5 moves the selection between
// the caller's buffer and the file directly (a whole chunk in one write; a read of part of a chunk — the +1
// token — fetches at most HDF5's 64 KiB sieve buffer of it, not the chunk).
Plist uncached_dataset_access(const std::string& where);
// File locking on, but a filesystem without locks (some Lustre/GPFS mounts) is not an error.
Plist file_access(const std::string& where);
// The file space of `ds` with the block [row, row + rows) × [col, col + cols) selected.
Space select_block(hid_t ds, hsize_t row, hsize_t col, hsize_t rows, hsize_t cols, const std::string& where);

}  // namespace ulysses::shard::h5
