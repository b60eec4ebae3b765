// replayssm/atomic_file.hpp — whole-file writes that never leave a file half-written: the bytes go to a fresh
// temporary file next to the target, are flushed to disk, then renamed over it (POSIX rename is atomic).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace replayssm {

// Writes `size` bytes to `path` atomically. On any failure (no such directory, a directory in the way, disk
// full, a rename refused) the temporary file is removed, `path` is left as it was, and Error(field) says what
// went wrong. A symbolic link to a file keeps being a link (the file it names is replaced). A path that is
// neither a file nor a directory (/dev/stdout, a FIFO) is written through in place: atomicity has no meaning
// for a stream, and a rename would replace the device node itself.
void write_file_atomic(const std::string& path, const void* data, std::size_t size,
                       const std::string& field = "path");
inline void write_file_atomic(const std::string& path, std::string_view text, const std::string& field = "path") {
  write_file_atomic(path, text.data(), text.size(), field);
}

}  // namespace replayssm
