// Small files rewritten whole (a checkpoint's manifest and `latest`, a memory profile, the metrics log cut back on
// resume): a reader, or a crash, must see the old file or the new one, never part of one. The text goes to a
// temporary beside the file (PATH.tmp-PID: two processes never share one), which is then renamed over it.
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
