#include "rc_campaign.hpp"

#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <ostream>
#include <sstream>
#include <thread>

#include "replayssm/frame.hpp"

namespace replayssm::fuzz {

namespace {

volatile std::sig_atomic_t g_stop = 0;
extern "C" void on_stop_signal(int sig) { g_stop = sig; }

std::mutex g_handler_mu;
std::function<void(const std::string&)>& watchdog_handler() {
  static std::function<void(const std::string&)> f;
  return f;
}

// One watchdog thread for the process: armed with a deadline and a message, it ends the process when the
// deadline passes while still armed.
class Watchdog {
 public:
  static Watchdog& get() {
    static Watchdog* w = new Watchdog();  // never destroyed: the thread may outlive static destruction
    return *w;
  }
  void arm(double seconds, std::string message) {
    std::lock_guard<std::mutex> lock(mu_);
    armed_ = seconds > 0;
    deadline_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<long long>(seconds * 1000));
    message_ = std::move(message);
    cv_.notify_all();
  }
  void disarm() {
    std::lock_guard<std::mutex> lock(mu_);
    armed_ = false;
    cv_.notify_all();
  }

 private:
  Watchdog() { std::thread([this] { loop(); }).detach(); }
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      if (!armed_) {
        cv_.wait(lock);
        continue;
      }
      if (cv_.wait_until(lock, deadline_) == std::cv_status::timeout && armed_ &&
          std::chrono::steady_clock::now() >= deadline_) {
        const std::string m = message_;
        lock.unlock();
        std::fprintf(stderr, "\n%s\n", m.c_str());
        std::fflush(stderr);
        {
          std::lock_guard<std::mutex> h(g_handler_mu);
          if (watchdog_handler()) watchdog_handler()(m);
        }
        std::fflush(stdout);
        std::_Exit(1);
      }
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  bool armed_ = false;
  std::chrono::steady_clock::time_point deadline_;
  std::string message_;
};

}  // namespace

int stop_signal() { return static_cast<int>(g_stop); }

void install_stop_signals() {
  static const bool once = [] {
    std::signal(SIGINT, on_stop_signal);
    std::signal(SIGTERM, on_stop_signal);
    return true;
  }();
  (void)once;
}

void set_watchdog_handler(std::function<void(const std::string& message)> f) {
  std::lock_guard<std::mutex> lock(g_handler_mu);
  watchdog_handler() = std::move(f);
}

CampaignRun::CampaignRun(const CampaignControl& c, std::string name, std::ostream* progress)
    : c_(c), name_(std::move(name)), progress_(progress), t0_(std::chrono::steady_clock::now()) {}

CampaignRun::~CampaignRun() {
  if (c_.time_limit > 0) Watchdog::get().disarm();
}

bool CampaignRun::begin_case(std::uint64_t case_seed, std::uint64_t campaign_seed) {
  const auto now = std::chrono::steady_clock::now();
  if (!ended_by_.empty()) return false;
  if (stop_signal() != 0) {
    ended_by_ = "signal " + std::to_string(stop_signal());
    return false;
  }
  const double elapsed = std::chrono::duration<double>(now - t0_).count();
  if (!shrinking_ && c_.time_budget > 0 && elapsed > c_.time_budget) {
    std::ostringstream os;
    os << "time budget of " << c_.time_budget << " s after " << cases_run_ << " cases";
    ended_by_ = os.str();
    return false;
  }
  if (shrinking_) {
    const double s = std::chrono::duration<double>(now - shrink_t0_).count();
    if (shrink_steps_ >= c_.shrink_steps || s > c_.shrink_seconds) {
      std::ostringstream os;
      os << "shrink budget (" << shrink_steps_ << " steps, " << static_cast<int>(s) << " s)";
      ended_by_ = os.str();
      return false;
    }
  }
  if (c_.time_limit > 0) {
    std::ostringstream os;
    os << "replayssm: campaign " << name_ << " exceeded its time limit of " << c_.time_limit << " s in "
       << (shrinking_ ? "shrink step " + std::to_string(shrink_steps_ + 1) : "case " + std::to_string(cases_run_ + 1))
       << " (case seed " << case_seed << ", campaign seed " << campaign_seed
       << "): a hang; rerun the campaign with --seed " << campaign_seed << " to reproduce it";
    Watchdog::get().arm(c_.time_limit, os.str());
  }
  return true;
}

void CampaignRun::end_case(bool failed, std::size_t commands, bool discarded) {
  if (c_.time_limit > 0) Watchdog::get().disarm();
  if (discarded) return;
  if (!shrinking_) {
    ++cases_run_;
    if (failed) {
      shrinking_ = true;
      shrink_t0_ = std::chrono::steady_clock::now();
      best_ = commands;
    }
    return;
  }
  if (c_.no_shrink) return;  // RapidCheck re-runs the failing case once to describe it: not a shrink step
  ++shrink_steps_;
  if (failed && commands <= best_) best_ = commands;
  if (progress_) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - shrink_t0_).count();
    *progress_ << "\r[shrink " << name_ << "] step " << shrink_steps_ << ", smallest failing case " << best_
               << " commands (" << static_cast<int>(s) << " s)" << std::flush;
  }
}

std::string failure_dump_path(const std::string& dir, const std::string& prefix, const std::string& target,
                              std::uint64_t seed) {
  const std::string d = dir.empty() ? "." : dir;
  std::filesystem::create_directories(d);
  const std::string name =
      target.rfind("exec:", 0) == 0 ? "exec-" + std::to_string(digest64(target.data(), target.size())) : target;
  return (std::filesystem::path(d) / ("fuzz-failure-" + prefix + name + "-" + std::to_string(seed) + ".safetensors"))
      .string();
}

}  // namespace replayssm::fuzz
