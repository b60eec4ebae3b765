// The processes behind exec: targets (docs/target-protocol.md): one live process per command line, reused by
// every case of a campaign until it fails, each a framed request/answer connection with a deadline (the start-up
// budget for hello, the per-command timeout after it), the transport statistics of each command line, and the
// shutdown of every live process. A transport or framing failure kills the process and is an Error naming the
// command and the field, with the child's status and the tail of its stderr.
#pragma once

#include <memory>
#include <string>

#include "capabilities.hpp"
#include "child_process.hpp"
#include "replayssm/frame.hpp"

namespace replayssm::exec {

// Sends `shutdown` to every live target process (one per command line, reused across cases) and waits up to
// kShutdownGraceMs for each to exit before killing its process group. Also runs at program exit.
void shutdown_targets();
// Milliseconds a target may take to exit after `shutdown` before its process group is killed.
inline constexpr int kShutdownGraceMs = 10000;

// Per-command timeout of every exec target (seconds; default 60).
void set_timeout(double seconds);
double timeout();
// Start-up budget of every exec target and engine (seconds; default 300): how long a new process may take to
// answer `hello` (interpreter start, imports, a JIT warm-up). Apart from the per-command timeout, so that a
// short timeout meant for hangs does not fail a target that is merely slow to start on a loaded machine.
void set_startup_timeout(double seconds);
double startup_timeout();
// What a timed-out command's verdict adds to its message: ", start-up budget 300 s (--target-startup-timeout)"
// or ", per-command timeout 1.5 s (--target-timeout)".
std::string deadline_note(bool startup, double seconds);

// Where the time of the commands sent to COMMAND's processes went (all processes since the start of this
// program, or since reset_transport_stats): round trips as the judge saw them, the part the implementation
// reported as its own compute (answers' compute_s), frame encoding and decoding here, and bytes moved.
struct TransportStats {
  long long commands = 0;
  double round_trip_s = 0, target_compute_s = 0, codec_s = 0;
  long long bytes_sent = 0, bytes_received = 0;
  // Round trips minus the target's compute, plus encoding and decoding: the cost of the protocol itself.
  double transport_s() const { return round_trip_s - target_compute_s + codec_s; }
};
TransportStats transport_stats(const std::string& command);
void reset_transport_stats(const std::string& command);

// One running implementation: the hello exchange at construction (its answer parsed into caps()), then framed
// commands with a deadline.
class Connection {
 public:
  explicit Connection(const std::string& command);
  ~Connection();  // sends shutdown and gives the process kShutdownGraceMs to exit
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  const Capabilities& caps() const { return caps_; }
  bool alive() const { return alive_; }

  // Sends a command, returns the answer; an error answer is Error("target.<op>[.field]"), a transport or
  // framing failure kills the process and is Error naming what happened, with the stderr tail. The deadline is
  // the per-command timeout, or `budget_s` seconds when given (hello: the start-up budget).
  Frame call(const Frame& request, const std::string& op, double budget_s = 0);

 private:
  void send(const Frame& f, ChildProcess::Deadline deadline, TransportStats& s);
  Frame receive(const std::string& op, ChildProcess::Deadline deadline, TransportStats& s);

  ChildProcess child_;
  bool alive_ = true;
  Capabilities caps_;
};

// The live connection of COMMAND, started (hello included) when there is none or the last one failed.
std::shared_ptr<Connection> connect(const std::string& command);

// Capabilities of the implementation behind COMMAND (starts it if needed).
Capabilities capabilities(const std::string& command);

}  // namespace replayssm::exec
