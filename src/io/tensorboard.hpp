// TensorBoard event files, written natively: the scalars of a run (loss, learning rate, throughput, memory...)
// that `tensorboard --logdir DIR` plots, with no TensorFlow or Python in the trainer.
//
// Format (what TensorBoard's readers expect): a file named events.out.tfevents.<seconds>.<host>.<pid> holding
// TFRecords, each = u64 length, u32 masked CRC-32C of those 8 bytes, the serialized Event protobuf
// (io/tensorboard_event.proto; libprotobuf-lite encodes it), u32 masked CRC-32C of it; little-endian; masked
// CRC = rotate-right-15(crc) + 0xa282ead8 (CRC-32C from ISA-L). The first record gives the version
// "brain.Event:2". TensorBoard reads every events file of a folder as one run, in name order: a writer's
// <seconds> is past every file already there, so a restarted run sorts after the run it continues.
//
// Restarts: a writer for a run whose first step is N writes SessionLog START at step N first, and TensorBoard
// drops what earlier files of the folder logged at steps >= N (steps a killed run logged after its last
// checkpoint, which this run logs again) — the same rule as metrics.jsonl.
//
// Errors: a folder or file that cannot be made or written is a BadInput naming it. Each add() is one record,
// flushed to the OS at once (a killed run keeps every step it logged).
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace ulysses::tensorboard {

// CRC-32C of `bytes` rotated and offset as TFRecord stores it.
std::uint32_t masked_crc32c(const std::string& bytes);

class EventWriter {
 public:
  EventWriter(const std::filesystem::path& dir, std::int64_t first_step);

  // One event at `step` holding these scalars (tag, value); values are stored as float32, as TensorBoard's.
  void add(std::int64_t step, const std::vector<std::pair<std::string, double>>& scalars);

  const std::filesystem::path& path() const { return path_; }

 private:
  void write_record(const std::string& event);

  std::filesystem::path path_;
  std::ofstream out_;
};

}  // namespace ulysses::tensorboard
