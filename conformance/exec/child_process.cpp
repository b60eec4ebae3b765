#include "child_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "replayssm/error.hpp"

extern char** environ;

namespace replayssm::exec {

namespace {
constexpr std::size_t kErrTail = 64 * 1024;

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}
int remaining_ms(ChildProcess::Deadline d) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(d - std::chrono::steady_clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1 << 30));
}
}  // namespace

ChildProcess::ChildProcess(const std::string& command) : command_(command) {
  // A write into a pipe whose reader died must come back as EPIPE, not kill this process.
  ::signal(SIGPIPE, SIG_IGN);
  int pin[2], pout[2], perr[2];
  require(::pipe(pin) == 0 && ::pipe(pout) == 0 && ::pipe(perr) == 0, "target.command", "pipe: ", std::strerror(errno));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, pin[0], 0);
  posix_spawn_file_actions_adddup2(&fa, pout[1], 1);
  posix_spawn_file_actions_adddup2(&fa, perr[1], 2);
  for (int fd : {pin[0], pin[1], pout[0], pout[1], perr[0], perr[1]}) posix_spawn_file_actions_addclose(&fa, fd);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&attr, 0);  // its own process group: kill() reaches everything it started
  sigset_t def;
  sigemptyset(&def);
  sigaddset(&def, SIGPIPE);
  posix_spawnattr_setsigdefault(&attr, &def);
  std::string sh = "/bin/sh", dash_c = "-c", cmd = command;
  char* argv[] = {sh.data(), dash_c.data(), cmd.data(), nullptr};
  const int rc = ::posix_spawn(&pid_, "/bin/sh", &fa, &attr, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  ::close(pin[0]);
  ::close(pout[1]);
  ::close(perr[1]);
  in_ = pin[1];
  out_ = pout[0];
  err_ = perr[0];
  for (int fd : {in_, out_, err_}) {
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
  if (rc != 0) {
    pid_ = -1;
    close_fd(in_);
    close_fd(out_);
    close_fd(err_);
    fail("target.command", "cannot start '", command, "': ", std::strerror(rc));
  }
}

ChildProcess::~ChildProcess() {
  kill();
  close_fd(in_);
  close_fd(out_);
  close_fd(err_);
}

void ChildProcess::drain_stderr() {
  if (err_ < 0) return;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(err_, buf, sizeof buf);
    if (n > 0) {
      err_tail_.append(buf, static_cast<std::size_t>(n));
      if (err_tail_.size() > 2 * kErrTail) err_tail_.erase(0, err_tail_.size() - kErrTail);
      continue;
    }
    if (n == 0) close_fd(err_);
    return;  // EAGAIN or EOF or an error: nothing more now
  }
}

void ChildProcess::write_all(const std::uint8_t* data, std::size_t n, Deadline deadline) {
  std::size_t done = 0;
  while (done < n) {
    require(in_ >= 0, "target.io", "the target's stdin is closed");
    pollfd fds[2] = {{in_, POLLOUT, 0}, {err_, POLLIN, 0}};
    const int r = ::poll(fds, err_ >= 0 ? 2 : 1, remaining_ms(deadline));
    if (r < 0 && errno == EINTR) continue;
    require(r > 0, "target.io", "timed out writing to the target (", n - done, " of ", n, " bytes left)");
    if (err_ >= 0 && fds[1].revents) drain_stderr();
    if (fds[0].revents & (POLLERR | POLLHUP)) fail("target.io", "the target closed its stdin (", status(), ")");
    if (!(fds[0].revents & POLLOUT)) continue;
    const ssize_t w = ::write(in_, data + done, n - done);
    if (w < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    require(w > 0, "target.io", "writing to the target failed: ", std::strerror(errno), " (", status(), ")");
    done += static_cast<std::size_t>(w);
  }
}

void ChildProcess::read_exact(std::uint8_t* data, std::size_t n, Deadline deadline) {
  std::size_t done = 0;
  while (done < n) {
    require(out_ >= 0, "target.io", "the target's stdout is closed");
    pollfd fds[2] = {{out_, POLLIN, 0}, {err_, POLLIN, 0}};
    const int r = ::poll(fds, err_ >= 0 ? 2 : 1, remaining_ms(deadline));
    if (r < 0 && errno == EINTR) continue;
    require(r > 0, "target.io", "timed out waiting for the target's answer (", n - done, " of ", n, " bytes missing)");
    if (err_ >= 0 && fds[1].revents) drain_stderr();
    if (!(fds[0].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    const ssize_t got = ::read(out_, data + done, n - done);
    if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (got == 0) {
      // End of stream: give the child a moment to exit so the report can say how it ended.
      for (int i = 0; i < 50 && running(); ++i) ::usleep(2000);
      fail("target.io", "the target closed its stdout after ", done, " of ", n, " bytes (", status(), ")");
    }
    require(got > 0, "target.io", "reading from the target failed: ", std::strerror(errno));
    done += static_cast<std::size_t>(got);
  }
}

void ChildProcess::reap(bool block) {
  if (pid_ < 0 || reaped_) return;
  int st = 0;
  const pid_t r = ::waitpid(pid_, &st, block ? 0 : WNOHANG);
  if (r == pid_) {
    reaped_ = true;
    wait_status_ = st;
  }
}

bool ChildProcess::running() {
  reap(false);
  return pid_ >= 0 && !reaped_;
}

std::string ChildProcess::status() {
  if (running()) return "running";
  if (pid_ < 0) return "not started";
  if (WIFEXITED(wait_status_)) {
    const int code = WEXITSTATUS(wait_status_);
    // The command runs under /bin/sh, which reports a child killed by signal N as status 128 + N.
    return "exited with status " + std::to_string(code) +
           (code > 128 && code < 160 ? " (128 + " + std::to_string(code - 128) + ": killed by signal " +
                                           std::to_string(code - 128) + " under the shell)"
                                     : "");
  }
  if (WIFSIGNALED(wait_status_)) return "killed by signal " + std::to_string(WTERMSIG(wait_status_));
  return "ended";
}

void ChildProcess::kill() {
  if (pid_ < 0 || reaped_) return;
  ::kill(-pid_, SIGKILL);
  reap(true);
}

std::string ChildProcess::stderr_tail() {
  drain_stderr();
  return err_tail_.size() > kErrTail ? err_tail_.substr(err_tail_.size() - kErrTail) : err_tail_;
}

}  // namespace replayssm::exec
