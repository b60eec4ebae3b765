#include "junit.hpp"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "fuzz_args.hpp"  // shell_quote
#include "replayssm/atomic_file.hpp"

namespace replayssm::cli {

namespace {

std::string str_or(const nlohmann::json& j, const char* key, const std::string& fallback = "") {
  return j.contains(key) && j.at(key).is_string() ? j.at(key).get<std::string>() : fallback;
}

// Text escaped for an XML attribute or element; control characters XML 1.0 forbids become '?'.
std::string escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (const char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      case '\n': out += "&#10;"; break;
      case '\t': out += "&#9;"; break;
      case '\r': out += "&#13;"; break;
      default: out += (u < 0x20 || u == 0x7f) ? '?' : ch;
    }
  }
  return out;
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", s < 0 ? 0.0 : s);
  return buf;
}

}  // namespace

JUnitCase junit_fixture(const nlohmann::json& r, const std::string& classname) {
  JUnitCase c;
  c.classname = classname;
  c.name = str_or(r, "path", "?");
  const std::string op = str_or(r, "op", "?");
  if (r.value("ok", false)) return c;
  c.status = JUnitCase::Status::Failed;
  // "error": the reference could not check it; "why": an implementation's answer was refused (exec fixtures).
  const std::string error = str_or(r, "error").empty() ? str_or(r, "why") : str_or(r, "error");
  if (!error.empty()) c.message = "error: " + error;
  for (const auto& t : r.value("tensors", nlohmann::json::array())) {
    const std::string line = str_or(t, "name", "?") + ": " + str_or(t, "report", "(no report)");
    c.text += line + "\n";
    if (c.message.empty() && !t.value("ok", true)) c.message = line;  // the first failing tensor's worst element
  }
  if (c.message.empty()) c.message = "fixture check failed";
  const std::string repro = "replayssm check " + c.name;
  c.message = "(" + op + ") " + c.message + "; reproduce: " + repro;
  c.text += "reproduce: " + repro + "\n";
  return c;
}

JUnitCase junit_campaign(const nlohmann::json& r, const std::string& classname) {
  JUnitCase c;
  c.classname = classname;
  c.name = str_or(r, "target", "?") + " @ " + str_or(r, "preset", "?");
  if (r.contains("shard") && r.at("shard").value("count", 1) > 1)
    c.name += " shard " + std::to_string(r.at("shard").value("index", 0)) + "/" +
              std::to_string(r.at("shard").value("count", 1));
  c.seconds = r.value("seconds", 0.0);
  if (!r.value("covered", true)) {
    c.status = JUnitCase::Status::Skipped;
    c.message = "not covered: " + str_or(r, "not_covered");
    return c;
  }
  if (!r.value("failed", false)) return c;
  c.status = JUnitCase::Status::Failed;
  const std::string dump = str_or(r, "dump_path");
  const std::string target = str_or(r, "target");
  // An exec: target's dump needs its --target again (print_report says the same).
  const std::string replay = dump.empty() ? "" : "replayssm fuzz --replay " + dump +
                                                     (target.rfind("exec:", 0) == 0 ? " --target " + shell_quote(target) : "");
  const std::string rerun_line = str_or(r, "rerun");
  // The message alone is enough to reproduce: the shrunk case's replay when it was dumped, else the rerun.
  c.message = str_or(r, "reason", "campaign failed") + "; reproduce: " +
              (!replay.empty() ? replay : !rerun_line.empty() ? rerun_line : "(no command)");
  if (!replay.empty()) c.text += "replay the shrunk case: " + replay + "\n";
  if (!rerun_line.empty()) c.text += "rerun the campaign: " + rerun_line + "\n";
  const std::string cx = str_or(r, "counterexample");
  if (!cx.empty()) c.text += "shrunk counterexample (RapidCheck):\n" + cx + "\n";
  return c;
}

std::string junit_xml(const std::vector<JUnitSuite>& suites) {
  int tests = 0, failures = 0, skipped = 0;
  double seconds = 0;
  std::string body;
  for (const auto& s : suites) {
    int f = 0, k = 0;
    double t = 0;
    std::string cases;
    for (const auto& c : s.cases) {
      t += c.seconds;
      cases += "    <testcase classname=\"" + escape(c.classname) + "\" name=\"" + escape(c.name) + "\" time=\"" +
               seconds_text(c.seconds) + "\"";
      if (c.status == JUnitCase::Status::Passed) {
        cases += "/>\n";
        continue;
      }
      const bool failed = c.status == JUnitCase::Status::Failed;
      (failed ? f : k) += 1;
      cases += ">\n      <" + std::string(failed ? "failure" : "skipped") + " message=\"" + escape(c.message) + "\"";
      cases += c.text.empty() ? "/>\n" : (">" + escape(c.text) + "</" + (failed ? "failure" : "skipped") + ">\n");
      cases += "    </testcase>\n";
    }
    body += "  <testsuite name=\"" + escape(s.name) + "\" tests=\"" + std::to_string(s.cases.size()) +
            "\" failures=\"" + std::to_string(f) + "\" errors=\"0\" skipped=\"" + std::to_string(k) + "\" time=\"" +
            seconds_text(t) + "\">\n" + cases + "  </testsuite>\n";
    tests += static_cast<int>(s.cases.size());
    failures += f;
    skipped += k;
    seconds += t;
  }
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"replayssm\" tests=\"" + std::to_string(tests) +
         "\" failures=\"" + std::to_string(failures) + "\" errors=\"0\" skipped=\"" + std::to_string(skipped) +
         "\" time=\"" + seconds_text(seconds) + "\">\n" + body + "</testsuites>\n";
}

void write_junit(const std::string& path, const std::vector<JUnitSuite>& suites) {
  write_file_atomic(path, junit_xml(suites), "junit");
}

}  // namespace replayssm::cli
