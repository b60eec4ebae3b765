// MRoPE session campaigns (mrope_campaign.hpp).
#include "mrope_campaign.hpp"

#include <algorithm>

#include "capabilities.hpp"
#include "connection.hpp"
#include "exec_mrope.hpp"
#include "replayssm/error.hpp"

namespace replayssm::cli {

nlohmann::ordered_json MropeCampaignResult::to_json() const {
  nlohmann::ordered_json j{{"target", target}, {"level", "mrope"}, {"models", models}, {"covered", covered},
                           {"failed", failed}, {"coverage", coverage.to_json()}, {"unmet", unmet}};
  if (!why.empty()) j["why"] = why;
  if (failure) {
    j["failure"] = {{"model", failing_model}, {"seed", failing_seed}, {"command", failure->command},
                    {"check", failure->check}, {"message", failure->message}, {"reproduce", reproduce}};
  }
  return j;
}

std::unique_ptr<mrope::SessionTarget> mrope_session_target(const std::string& target) {
  if (target == "reference") return mrope::reference_session_target();
  require(target.rfind("exec:", 0) == 0, "target", "MRoPE sessions run through exec:'COMMAND' or reference, got '",
          target, "'");
  return exec::exec_session_target(target.substr(5));
}

MropeCampaignResult run_mrope_campaign(const std::string& target, const std::vector<std::string>& models, int cases,
                                       std::uint64_t seed, std::ostream& out) {
  MropeCampaignResult r;
  r.target = target;
  require(cases >= 1, "cases", "must be >= 1, got ", cases);
  std::unique_ptr<mrope::SessionTarget> t;
  // A target that does not claim mrope (or speaks a protocol before 1.10) is not covered; one that cannot start,
  // or whose claim is malformed, has failed.
  if (target.rfind("exec:", 0) == 0) {
    try {
      const exec::Capabilities caps = exec::capabilities(target.substr(5));
      if (caps.mrope_models.empty()) r.why = "the target does not claim the mrope capability";
      else if (!caps.mropes())
        r.why = "the target speaks protocol 1." + std::to_string(caps.protocol_minor) +
                ", which has no MRoPE commands (added in 1.10)";
    } catch (const std::exception& e) {
      r.failed = true;
      r.failure = mrope::SessionFailure{0, "error", std::string("the target did not start: ") + e.what()};
      out << target << ": MRoPE sessions FAILED: " << r.failure->message << "\n";
      return r;
    }
    if (!r.why.empty()) {
      r.covered = false;
      out << target << ": MRoPE sessions not covered: " << r.why << "\n";
      return r;
    }
  }
  t = mrope_session_target(target);
  const auto claimed = t->models();
  r.models = models.empty() ? claimed : models;
  for (const auto& m : r.models) {
    require(std::find(claimed.begin(), claimed.end(), m) != claimed.end(), "model", "'", m,
            "' is not a model the target claims (mrope.models)");
    long passed = 0;
    for (int c = 0; c < cases && !r.failed; ++c) {
      const std::uint64_t s = seed + static_cast<std::uint64_t>(c);
      const mrope::SessionCase sc = mrope::draw_session(m, s);
      const mrope::SessionReport rep = mrope::run_session(sc, *t);
      r.coverage.merge(rep.coverage);
      if (rep.ok) {
        ++passed;
        continue;
      }
      r.failed = true;
      r.failure = rep.failure;
      r.failing_model = m;
      r.failing_seed = s;
      r.reproduce = "replayssm mrope fuzz --target " + (target.rfind("exec:", 0) == 0 ? "exec:'" + target.substr(5) + "'" : target) +
                    " --model " + m + " --seed " + std::to_string(s) + " --cases 1";
    }
    out << "  " << m << ": " << passed << (passed == 1 ? " case passed" : " cases passed");
    if (r.failed && r.failing_model == m) {
      out << ", case seed " << r.failing_seed << " FAILED at command " << r.failure->command << " (check "
          << r.failure->check << "):\n    " << r.failure->message << "\n  the case up to it:\n";
      const mrope::SessionCase sc = mrope::draw_session(m, r.failing_seed);
      for (std::size_t i = 0; i <= r.failure->command && i < sc.commands.size(); ++i)
        out << "    [" << i << "] " << sc.commands[i].str() << "\n";
      out << "  reproduce: " << r.reproduce << "\n";
      break;
    }
    out << "\n";
  }
  // A claim of pad_positions "any" leaves padding unjudged but still exercised; nothing else changes.
  r.unmet = r.coverage.unmet(r.models);
  out << "  coverage: " << r.coverage.str() << (t->pad_zero() ? "" : " (padding positions not judged: pad_positions any)")
      << "\n";
  return r;
}

}  // namespace replayssm::cli
