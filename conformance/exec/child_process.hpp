// A target process: `/bin/sh -c COMMAND` in its own process group, with its stdin and stdout as the
// protocol's pipes and its stderr collected (the last 64 KiB are kept for reports). Every read and write has
// a deadline; nothing blocks past it. POSIX only.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace replayssm::exec {

class ChildProcess {
 public:
  // Starts the command; throws Error("target.command") when it cannot be started.
  explicit ChildProcess(const std::string& command);
  ~ChildProcess();  // kills the process group if still running and reaps it
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  using Deadline = std::chrono::steady_clock::time_point;
  // Writes all bytes or throws Error("target.io") naming what happened (the child exited, closed its
  // stdin, or the deadline passed).
  void write_all(const std::uint8_t* data, std::size_t n, Deadline deadline);
  // Reads exactly n bytes or throws Error("target.io") (end of stream: the child exited or closed stdout;
  // the deadline passed).
  void read_exact(std::uint8_t* data, std::size_t n, Deadline deadline);
  // Kills the process group (SIGKILL) and reaps the child.
  void kill();
  bool running();
  // "exited with status 3", "killed by signal 11", or "running".
  std::string status();
  // The last bytes the child wrote to stderr (reads whatever is pending first).
  std::string stderr_tail();
  const std::string& command() const { return command_; }

 private:
  void drain_stderr();
  void reap(bool block);

  std::string command_;
  pid_t pid_ = -1;
  int in_ = -1, out_ = -1, err_ = -1;  // parent ends: child's stdin (write), stdout (read), stderr (read)
  bool reaped_ = false;
  int wait_status_ = 0;
  std::string err_tail_;
};

}  // namespace replayssm::exec
