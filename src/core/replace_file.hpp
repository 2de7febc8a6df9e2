// Small files rewritten whole (a checkpoint's manifest and `latest`, a memory profile, the metrics log cut back on
// resume): a reader, a crash or a power loss must find the old file or the new one, never part of one. The text goes
// to a temporary beside the file (PATH.tmp-PID: two processes of one host never share one; only one rank writes
// these), which is fsynced, then renamed over it, then the folder is fsynced.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace ulysses {

// Replaces `path` by `text`. Returns "" when done; otherwise why not (strerror's words), with `path` untouched and
// no temporary left. The caller turns a failure into its own error: bad input for a file a user named, a failed save
// for a checkpoint.
std::string replace_file(const std::filesystem::path& path, std::string_view text);

}  // namespace ulysses
