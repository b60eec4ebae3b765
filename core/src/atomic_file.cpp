#include "replayssm/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "replayssm/error.hpp"

namespace replayssm {

namespace {

// Opens a fresh temporary file next to `target`; returns its fd and sets `tmp`.
int open_temp(const std::filesystem::path& target, std::string& tmp, const std::string& field) {
  static std::atomic<unsigned> counter{0};
  const std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::string name(".");  // hidden: "<dir>/.<file>.<pid>.<n>.tmp"
    name.append(target.filename().string()).append(".").append(std::to_string(::getpid()));
    name.append(".").append(std::to_string(counter.fetch_add(1))).append(".tmp");
    tmp = (dir / name).string();
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) return fd;
    if (errno != EEXIST) fail(field, "cannot create a temporary file in '", dir.string(), "': ", std::strerror(errno));
  }
  fail(field, "cannot find a free temporary file name in '", dir.string(), "'");
}

// Writes all bytes to fd; "" or what went wrong.
std::string write_all(int fd, const unsigned char* bytes, std::size_t size) {
  std::size_t done = 0;
  while (done < size) {
    const ssize_t w = ::write(fd, bytes + done, size - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return std::string("write failed: ") + std::strerror(errno);
    done += static_cast<std::size_t>(w);
  }
  return "";
}

}  // namespace

void write_file_atomic(const std::string& path, const void* data, std::size_t size, const std::string& field) {
  std::filesystem::path target(path);
  require(!target.filename().empty(), field, "'", path, "' does not name a file");
  const auto* bytes = static_cast<const unsigned char*>(data);
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    // A terminal, pipe or device (/dev/stdout, a FIFO): written through in place; renaming a file over it
    // would replace the device node itself. A directory is refused by name.
    require(!S_ISDIR(st.st_mode), field, "cannot write '", path, "': it is a directory");
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) fail(field, "cannot write '", path, "': ", std::strerror(errno));
    std::string problem = write_all(fd, bytes, size);
    if (::close(fd) != 0 && problem.empty()) problem = std::string("close failed: ") + std::strerror(errno);
    if (!problem.empty()) fail(field, "cannot write '", path, "': ", problem);
    return;
  }
  // A symbolic link to a file: the file it names is replaced, the link stays a link.
  std::error_code ec;
  if (std::filesystem::is_symlink(target, ec)) {
    const auto resolved = std::filesystem::weakly_canonical(target, ec);
    if (!ec) target = resolved;
  }
  std::string tmp;
  const int fd = open_temp(target, tmp, field);
  std::string problem = write_all(fd, bytes, size);
  if (problem.empty() && ::fsync(fd) != 0) problem = std::string("fsync failed: ") + std::strerror(errno);
  if (::close(fd) != 0 && problem.empty()) problem = std::string("close failed: ") + std::strerror(errno);
  if (problem.empty() && ::rename(tmp.c_str(), target.c_str()) != 0)
    problem = std::string("cannot rename the temporary file over it: ") + std::strerror(errno);
  if (!problem.empty()) {
    ::unlink(tmp.c_str());
    fail(field, "cannot write '", path, "': ", problem);
  }
  // Make the rename itself durable (best effort: some file systems refuse fsync on a directory).
  const std::string dir = target.has_parent_path() ? target.parent_path().string() : std::string(".");
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace replayssm
