// Check 7 of the judge (judge.hpp): a self check's two paths compared with each other, on the implementation (at
// its claim, Target::self_claim) and on the oracle (at the default claim: the oracle's own paths must pass the
// bound the implementation is held to).
#include <sstream>

#include "replayssm/error.hpp"
#include "replayssm/lifecycle/judge.hpp"
#include "replayssm/recurrence/term_scales.hpp"

namespace replayssm::ref {

namespace {
const char* path_b_name(SelfCheckKind k) {
  switch (k) {
    case SelfCheckKind::VerifyVsSteps: return "single-token steps";
    case SelfCheckKind::Repeat: return "repeated step";
    case SelfCheckKind::Permute: return "batch in reversed order";
    case SelfCheckKind::Chunks: return "prefill chunks";
  }
  return "?";
}
}  // namespace

std::vector<std::vector<TermScales>> Judge::self_check_scales(const Cmd& c) const {
  const auto& cfg = oracle_.setup().cfg;
  std::vector<std::vector<TermScales>> scales;
  for (const auto& x : oracle_.last_self_check()) {
    scales.emplace_back();
    for (std::int32_t l = 0; l < cfg.num_layers; ++l) {
      const auto L = static_cast<std::size_t>(l);
      // The forks' common start: the request's committed state (the oracle's, for the magnitudes only), or for
      // chunks: a fresh prompt's, from a zero state.
      const auto S0 = c.self_check == SelfCheckKind::Chunks
                          ? std::vector<float>()
                          : oracle_.target().committed_state(l, oracle_.requests().at(x.req).slot);
      scales.back().push_back(term_scales(cfg, oracle_.setup().params[L], S0, x.tokens[L]));
    }
  }
  return scales;
}

std::string Judge::compare_paths(const Engine& e, const Cmd& c, const SelfClaim& claim, const char* who,
                                 const std::vector<std::vector<TermScales>>& scales) const {
  const auto& cfg = oracle_.setup().cfg;
  const auto& run = e.last_self_check();
  require(run.size() == c.rows.size(), "self_check", who, " ran ", run.size(), " of the self check's ", c.rows.size(),
          " rows");
  const bool exact = claim.exact.count(c.self_check) > 0;
  const std::size_t per = static_cast<std::size_t>(cfg.HV) * cfg.V;
  const std::size_t head = static_cast<std::size_t>(cfg.K) * cfg.V;
  for (std::size_t i = 0; i < run.size(); ++i)
    for (std::int32_t l = 0; l < cfg.num_layers; ++l) {
      const auto& x = run[i];
      const auto L = static_cast<std::size_t>(l);
      // The committed conv windows: data movement (the last W - 1 raw inputs at the window dtype), the same bits
      // on both paths at every tier and claim.
      if (L < x.conv_a.size() && L < x.conv_b.size() && !bitwise_equal(x.conv_a[L], x.conv_b[L])) {
        const CompareReport rep = compare(x.conv_a[L], x.conv_b[L], Tolerance::exact());
        return "self check " + to_string(c.self_check) + ": " + who + "'s committed conv windows of its two paths " +
               "differ (fork slot " + std::to_string(x.fork) + ", request " + std::to_string(x.req) + ", layer " +
               std::to_string(l) + "): " + rep.str();
      }
      const TermScales& ts = scales.at(i).at(L);
      for (const bool state : {false, true}) {
        const auto& a = state ? x.state_a[L] : x.out_a[L];
        const auto& b = state ? x.state_b[L] : x.out_b[L];
        const Tolerance tol = exact ? Tolerance::exact()
                                    : Tolerance::allclose(1.0, 0.0).scaled(self_check_bound(
                                          cfg, extra_stores_every(c.self_check, x.accepted), claim, ts,
                                          x.committed, state, a, b));
        const CompareReport rep = compare(a, b, tol);
        if (!exact && rep.worst_excess > work_.self_closest_excess) {
          work_.self_closest_excess = rep.worst_excess;
          work_.self_closest_at = std::string(who) + "'s " + to_string(c.self_check) + ", " +
                                  (state ? "a committed state" : "an output") + " (worst |d| " +
                                  std::to_string(rep.max_abs) + ")";
        }
        if (rep.ok) continue;
        failed_ = rep;
        failed_values_ = FailedValues{a, b, state};
        failed_tol_ = tol;
        std::ostringstream os;
        os << "self check " << to_string(c.self_check) << " (" << (exact ? "claimed bit-exact" : claim.str()) << "): "
           << who << ": its " << path_b_name(c.self_check) << " (path B) disagree with "
           << (c.self_check == SelfCheckKind::VerifyVsSteps ? "its one verify of the window"
               : c.self_check == SelfCheckKind::Chunks     ? "its one prefill chunk of the window"
                                                           : "its first step")
           << " (path A)"
           << " (both in fork slot " << x.fork
           << (c.self_check == SelfCheckKind::Chunks ? ", each newly allocated"
                                                     : ", each a fresh copy of slot " + std::to_string(x.slot))
           << ") for request " << x.req << " (T=" << x.T << (c.self_check == SelfCheckKind::Chunks ? ", chunks of " : ", n=") << x.accepted
           << "), layer " << l << ", ";
        if (state) {
          os << "committed state at value head " << rep.worst_index / head << " (element " << rep.worst_index % head
             << " of the head)";
        } else {
          os << "output of token " << rep.worst_index / per << " at (hv " << (rep.worst_index % per) / cfg.V << ", v "
             << rep.worst_index % cfg.V << ")";
        }
        os << ": " << rep.str();
        return os.str();
      }
    }
  return {};
}

std::string Judge::check_self(const Cmd& c) const {
  // The oracle first: a failure there is this project's (its oracle, or a bound too tight), never the target's.
  // Both engines ran the same rows on the same tokens: one set of term scales serves both comparisons.
  const auto scales = self_check_scales(c);
  const std::string mine = compare_paths(oracle_, c, SelfClaim{}, "the oracle", scales);
  if (!mine.empty())
    return "the oracle's own paths disagree (a fault of this project's oracle or of its self-check bound): " + mine;
  return compare_paths(sut_, c, sut_.target().self_claim(), "the implementation", scales);
}

}  // namespace replayssm::ref
