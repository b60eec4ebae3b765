// The processes behind exec: targets (connection.hpp): the connection of one process, the registry of live
// processes, the budgets of their commands and the transport statistics.
#include "connection.hpp"

#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "answers.hpp"
#include "replayssm/error.hpp"

namespace replayssm::exec {

using nlohmann::json;

namespace {

double g_timeout_s = 60.0;
double g_startup_timeout_s = 300.0;

std::mutex g_stats_mu;
std::map<std::string, TransportStats>& stats_by_command() {
  static std::map<std::string, TransportStats> s;
  return s;
}

std::string last_lines(const std::string& s, int n) {
  std::size_t pos = s.size();
  for (int i = 0; i < n && pos > 0; ++i) {
    pos = s.rfind('\n', pos - 1);
    if (pos == std::string::npos) return s;
  }
  return s.substr(pos + 1);
}
}  // namespace

void set_timeout(double seconds) {
  require(seconds > 0, "target-timeout", "must be > 0, got ", seconds);
  g_timeout_s = seconds;
}
double timeout() { return g_timeout_s; }

void set_startup_timeout(double seconds) {
  require(seconds > 0, "target-startup-timeout", "must be > 0, got ", seconds);
  g_startup_timeout_s = seconds;
}
double startup_timeout() { return g_startup_timeout_s; }

std::string deadline_note(bool startup, double seconds) {
  std::ostringstream os;
  os << (startup ? ", start-up budget " : ", per-command timeout ") << seconds
     << (startup ? " s (--target-startup-timeout)" : " s (--target-timeout)");
  return os.str();
}

TransportStats transport_stats(const std::string& command) {
  std::lock_guard<std::mutex> lock(g_stats_mu);
  return stats_by_command()[command];
}
void reset_transport_stats(const std::string& command) {
  std::lock_guard<std::mutex> lock(g_stats_mu);
  stats_by_command()[command] = TransportStats{};
}

Connection::Connection(const std::string& command) : child_(command) {
  Frame hello;
  hello.msg = json{{"op", "hello"}, {"protocol", kProtocolName}, {"version", {kProtocolMajor, kProtocolMinor}}};
  const Frame a = call(hello, "hello", g_startup_timeout_s);
  caps_ = parse_hello_answer(a.msg);
}

Connection::~Connection() {
  if (alive_) {
    try {
      Frame bye;
      bye.msg = json{{"op", "shutdown"}};
      TransportStats ignored;
      send(bye, std::chrono::steady_clock::now() + std::chrono::seconds(2), ignored);
      // A target exits by itself after shutdown; it gets a grace period to do so before the process group is
      // killed, so that what it writes at exit (a sanitizer's error summary, coverage, logs) is not lost.
      const auto grace = std::chrono::steady_clock::now() + std::chrono::milliseconds(kShutdownGraceMs);
      while (child_.running() && std::chrono::steady_clock::now() < grace)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    } catch (const Error&) {
    }
  }
}

Frame Connection::call(const Frame& request, const std::string& op, double budget_s) {
  require(alive_, "target." + op, "the target process failed earlier (", child_.status(), ")");
  const auto t0 = std::chrono::steady_clock::now();
  const double limit_s = budget_s > 0 ? budget_s : g_timeout_s;
  const auto deadline = t0 + std::chrono::milliseconds(static_cast<long long>(limit_s * 1000));
  Frame answer;
  TransportStats s;
  try {
    send(request, deadline, s);
    answer = receive(op, deadline, s);
  } catch (const Error& e) {
    alive_ = false;
    child_.kill();
    const std::string tail = child_.stderr_tail();
    const std::string what = e.what();
    const std::string limit = what.find("timed out") == std::string::npos ? "" : deadline_note(budget_s > 0, limit_s);
    fail(e.field() == "target.io" ? "target." + op : e.field(), what, " [command '", op, "', target ",
         child_.status(), limit, "]", tail.empty() ? "" : "\n--- target stderr (last lines) ---\n" + last_lines(tail, 40));
  }
  s.commands = 1;
  s.round_trip_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() - s.codec_s;
  if (answer.msg.contains("compute_s") && answer.msg.at("compute_s").is_number())
    s.target_compute_s = answer.msg.at("compute_s").get<double>();
  {
    std::lock_guard<std::mutex> lock(g_stats_mu);
    auto& total = stats_by_command()[child_.command()];
    total.commands += s.commands;
    total.round_trip_s += s.round_trip_s;
    total.target_compute_s += s.target_compute_s;
    total.codec_s += s.codec_s;
    total.bytes_sent += s.bytes_sent;
    total.bytes_received += s.bytes_received;
  }
  if (answer_is_fatal(answer.msg)) {
    // The target ends its process after this answer (a sticky device fault): wait for it to exit so that the
    // next command of this command line starts a fresh process instead of reaching a dying one.
    alive_ = false;
    const auto grace = std::chrono::steady_clock::now() + std::chrono::milliseconds(kShutdownGraceMs);
    while (child_.running() && std::chrono::steady_clock::now() < grace)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    child_.kill();
  }
  check_answer_ok(answer.msg, op);
  return answer;
}

// Encoding and decoding time are counted apart from the round trip (codec_s).
void Connection::send(const Frame& f, ChildProcess::Deadline deadline, TransportStats& s) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto bytes = encode_frame(f);
  s.codec_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  s.bytes_sent += static_cast<long long>(bytes.size());
  child_.write_all(bytes.data(), bytes.size(), deadline);
}

Frame Connection::receive(const std::string& op, ChildProcess::Deadline deadline, TransportStats& s) {
  std::uint8_t len[8];
  child_.read_exact(len, 8, deadline);
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<std::uint64_t>(len[i]) << (8 * i);
  require(n <= kDefaultMaxFrameBytes, "target." + op + ".frame", "declares ", n, " bytes, more than the cap of ",
          kDefaultMaxFrameBytes);
  std::vector<std::uint8_t> body(static_cast<std::size_t>(n));
  child_.read_exact(body.data(), body.size(), deadline);
  s.bytes_received += static_cast<long long>(8 + n);
  try {
    const auto t0 = std::chrono::steady_clock::now();
    Frame f = decode_frame(body, "target." + op + ".frame");
    s.codec_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return f;
  } catch (const Error& e) {
    const std::string f = e.field().rfind("target.", 0) == 0 ? e.field() : "target." + op + ".frame." + e.field();
    throw Error(f, std::string("malformed answer: ") + e.what());
  }
}

namespace {

// One live process per command line, reused by every case of a campaign until it fails.
std::mutex g_live_mu;
std::map<std::string, std::shared_ptr<Connection>>& live_connections() {
  static auto* live = new std::map<std::string, std::shared_ptr<Connection>>();  // closed by shutdown_targets()
  return *live;
}
}  // namespace

std::shared_ptr<Connection> connect(const std::string& command) {
  std::lock_guard<std::mutex> lock(g_live_mu);
  auto& c = live_connections()[command];
  if (!c || !c->alive()) c = std::make_shared<Connection>(command);
  return c;
}

void shutdown_targets() {
  std::map<std::string, std::shared_ptr<Connection>> closing;
  {
    std::lock_guard<std::mutex> lock(g_live_mu);
    closing.swap(live_connections());
  }
  closing.clear();  // each Connection still unused elsewhere sends shutdown and waits for its process to exit
}

namespace {
// Processes still live when the program ends are shut down the same way.
[[maybe_unused]] const int kShutdownAtExit = std::atexit(shutdown_targets);
}  // namespace

Capabilities capabilities(const std::string& command) { return connect(command)->caps(); }

}  // namespace replayssm::exec
