#include "io/tensorboard.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <chrono>
#include <cstring>

#include <fmt/format.h>
#include <isa-l/crc.h>

#include "core/error.hpp"
#include "io/tensorboard_event.pb.h"

static_assert(std::endian::native == std::endian::little, "TFRecord lengths and CRCs are little-endian");

namespace ulysses::tensorboard {
namespace {

namespace fs = std::filesystem;
constexpr std::string_view kPrefix = "events.out.tfevents.";

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The <seconds> of a new file: now, or past the newest file already in `dir` (two runs in one second, or a
// clock set back, still sort in the order they ran).
std::int64_t file_seconds(const fs::path& dir) {
  auto seconds = static_cast<std::int64_t>(now_seconds());
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(kPrefix)) continue;
    std::int64_t t = 0;
    const char* first = name.data() + kPrefix.size();
    if (std::from_chars(first, name.data() + name.size(), t).ec == std::errc{}) seconds = std::max(seconds, t + 1);
  }
  return seconds;
}

std::string host_name() {
  std::array<char, 256> host{};
  if (gethostname(host.data(), host.size() - 1) != 0) return "host";
  return host.data();
}

}  // namespace

std::uint32_t masked_crc32c(const std::string& bytes) {
  // ISA-L's iSCSI CRC is CRC-32C without its final inversion
  const std::uint32_t crc = ~crc32_iscsi(reinterpret_cast<unsigned char*>(const_cast<char*>(bytes.data())),
                                         static_cast<int>(bytes.size()), 0xFFFFFFFFu);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

EventWriter::EventWriter(const fs::path& dir, std::int64_t first_step) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw BadInput(fmt::format("cannot create the TensorBoard folder {}: {}", dir.string(), ec.message()),
                         "pass --tensorboard with a writable folder, or --tensorboard none");
  path_ = dir / fmt::format("{}{}.{}.{}", kPrefix, file_seconds(dir), host_name(), getpid());
  out_.open(path_, std::ios::binary | std::ios::trunc);
  if (!out_) throw BadInput(fmt::format("cannot write the TensorBoard file {}", path_.string()),
                            "pass --tensorboard with a writable folder, or --tensorboard none");
  Event version;
  version.set_wall_time(now_seconds());
  version.set_file_version("brain.Event:2");
  write_record(version.SerializeAsString());
  Event start;
  start.set_wall_time(now_seconds());
  start.set_step(first_step);
  start.mutable_session_log()->set_status(SessionLog::START);
  write_record(start.SerializeAsString());
}

void EventWriter::add(std::int64_t step, const std::vector<std::pair<std::string, double>>& scalars) {
  Event event;
  event.set_wall_time(now_seconds());
  event.set_step(step);
  for (const auto& [tag, value] : scalars) {
    Summary::Value* v = event.mutable_summary()->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  write_record(event.SerializeAsString());
}

void EventWriter::write_record(const std::string& event) {
  std::string length(sizeof(std::uint64_t), '\0');
  const std::uint64_t n = event.size();
  std::memcpy(length.data(), &n, sizeof n);
  const std::uint32_t length_crc = masked_crc32c(length), event_crc = masked_crc32c(event);
  out_.write(length.data(), static_cast<std::streamsize>(length.size()));
  out_.write(reinterpret_cast<const char*>(&length_crc), sizeof length_crc);
  out_.write(event.data(), static_cast<std::streamsize>(event.size()));
  out_.write(reinterpret_cast<const char*>(&event_crc), sizeof event_crc);
  out_.flush();
  if (!out_) throw BadInput(fmt::format("cannot write the TensorBoard file {} (disk full?)", path_.string()),
                            "free space there, or pass --tensorboard none");
}

}  // namespace ulysses::tensorboard
