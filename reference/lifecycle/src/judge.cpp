// The judge: one command on the oracle and on the implementation under test, then the four checks.
#include "replayssm/lifecycle/judge.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <sstream>

#include "replayssm/error.hpp"

namespace replayssm::ref {

Judge::Judge(const EngineSetup& setup, const std::string& target_kind, Fault fault, std::optional<Tier> judge_tier)
    : oracle_(make_target("full_state"), setup, shared_engine_fault(fault) ? fault : Fault::None),
      sut_(make_target(target_kind, fault), setup,
           fault == Fault::EarlyStopCommitsWholeRun || shared_engine_fault(fault) ? fault : Fault::None),
      tier_(judge_tier) {}

namespace {
double max_abs(const std::vector<float>& x) {
  double m = 0;
  for (float e : x)
    if (std::isfinite(e)) m = std::max(m, static_cast<double>(std::fabs(e)));
  return m;
}
bool same_bits(const float* a, const float* b, std::size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }
}  // namespace

CompareReport Judge::compare_values(const std::vector<float>& ref, const std::vector<float>& got, bool state) const {
  const Tolerance tol = tier_                        ? tier_tolerance(*tier_, oracle_.setup().cfg, max_abs(ref), state)
                        : sut_.target().bit_exact() ? Tolerance::exact()
                                                    : sut_.target().tolerance(max_abs(ref), state);
  auto rep = compare(ref, got, tol);
  if (!rep.ok) {
    failed_ = rep;
    failed_tol_ = tol;
  }
  return rep;
}

std::string Judge::apply(const Cmd& c) {
  executed_.push_back(c);
  failed_.reset();
  const std::int32_t L = oracle_.setup().cfg.num_layers;
  Outputs before_o, before_s;
  for (std::int32_t l = 0; l < L; ++l) before_o.push_back(oracle_.target().pool(l));
  try {
    for (std::int32_t l = 0; l < L; ++l) before_s.push_back(sut_.target().pool(l));
  } catch (const Error& e) {
    return std::string("implementation failed before the command: ") + e.what();
  }
  const bool conv = oracle_.setup().conv.has_value();
  Outputs conv_before_o, conv_before_s;
  Windows windows_before;
  if (conv) {
    windows_before = conv_truth_windows();
    for (std::int32_t l = 0; l < L; ++l) conv_before_o.push_back(oracle_.target().conv_pool(l));
    try {
      for (std::int32_t l = 0; l < L; ++l) conv_before_s.push_back(sut_.target().conv_pool(l));
    } catch (const Error& e) {
      return std::string("implementation failed before the command: ") + e.what();
    }
  }
  std::map<std::int32_t, Before> pos;
  for (const auto& [id, r] : oracle_.requests()) pos[id] = Before{r.history[0].T, r.slot};
  const auto out_o = oracle_.execute(c);  // an Error here means the command itself is invalid: propagate
  Outputs out_s;
  try {
    out_s = sut_.execute(c);
  } catch (const Error& e) {
    return std::string("implementation raised an error the oracle did not: ") + e.what();
  }
  // The checks read the implementation's states and pools; an implementation in its own process can fail
  // there too (it crashed, hung, answered malformed data), which is a verdict, not a crash of the judge.
  try {
    std::string why;
    if (c.kind == Cmd::Kind::Step && !(why = check_outputs(out_o, out_s, pos, c)).empty()) return why;
    if (!(why = check_requests()).empty()) return why;
    if (!(why = check_states()).empty()) return why;
    if (!(why = check_untouched(c, before_o, before_s)).empty()) return why;
    return conv ? check_conv(c, windows_before, conv_before_o, conv_before_s) : std::string();
  } catch (const Error& e) {
    return std::string("implementation failed while its results were read: ") + e.what();
  }
}

// 1. Outputs: real rows equal, PAD rows exactly zero (on both sides).
std::string Judge::check_outputs(const Outputs& out_o, const Outputs& out_s, const std::map<std::int32_t, Before>& before,
                                 const Cmd& c) const {
  const auto& cfg = oracle_.setup().cfg;
  if (out_s.size() != out_o.size())
    return "implementation returned outputs for " + std::to_string(out_s.size()) + " layers, expected " +
           std::to_string(out_o.size());
  for (std::size_t l = 0; l < out_o.size(); ++l)
    if (out_s[l].size() != out_o[l].size())
      return "layer " + std::to_string(l) + ": implementation returned " + std::to_string(out_s[l].size()) +
             " output values, expected " + std::to_string(out_o[l].size());
  std::ostringstream why;
  const std::size_t per = static_cast<std::size_t>(cfg.HV) * cfg.V;
  for (std::size_t l = 0; l < out_o.size(); ++l) {
    for (const auto& pr : oracle_.last_rows()) {
      const std::size_t b = static_cast<std::size_t>(pr.offset) * per, n = static_cast<std::size_t>(pr.T) * per;
      std::vector<float> ro(out_o[l].begin() + b, out_o[l].begin() + b + n);
      std::vector<float> so(out_s[l].begin() + b, out_s[l].begin() + b + n);
      if (pr.req < 0) {  // PAD: zeros where claimed (the oracle always claims them)
        const std::vector<float> zeros(n, 0.0f);
        if (!bitwise_equal(ro, zeros) || (sut_.target().pad_outputs_zero() && !bitwise_equal(so, zeros))) {
          why << "layer " << l << ": PAD row outputs are not zero (oracle " << compare(zeros, ro, Tolerance::exact()).str()
              << "; implementation " << compare(zeros, so, Tolerance::exact()).str() << ")";
          return why.str();
        }
        continue;
      }
      // NaN tripwire: a non-finite output where the other side's is finite, or any on the oracle's side.
      for (std::size_t e = 0; e < n; ++e) {
        const bool oracle_bad = !std::isfinite(ro[e]);
        if (!oracle_bad && std::isfinite(so[e])) continue;
        const std::int32_t t = static_cast<std::int32_t>(e / per);
        const auto at = before.find(pr.req);
        why << "NaN tripwire: " << (oracle_bad ? "oracle" : "implementation") << " output " << (oracle_bad ? ro[e] : so[e])
            << " (other side " << (oracle_bad ? so[e] : ro[e]) << ") at layer " << l << ", request " << pr.req
            << ", slot " << (at != before.end() ? at->second.slot : -1) << ", token position "
            << (at != before.end() ? at->second.position : 0) + t << " (window token " << t << "), command "
            << executed_.size() - 1 << " [" << c.str() << "], (hv, v) = (" << (e % per) / cfg.V << ", " << e % cfg.V
            << ")";
        return why.str();
      }
      const auto rep = compare_values(ro, so, false);
      if (!rep.ok) {
        why << "layer " << l << ", request " << pr.req << ": outputs differ: " << rep.str();
        return why.str();
      }
    }
  }
  return {};
}

// 2. Request tables agree (residency, slots, committed token counts).
std::string Judge::check_requests() const {
  const auto& rs = sut_.requests();
  for (const auto& [id, r] : oracle_.requests()) {
    const auto it = rs.find(id);
    if (it == rs.end()) return "request " + std::to_string(id) + " missing in the implementation";
    const auto& s = it->second;
    if (r.slot != s.slot || r.finished != s.finished)
      return "request " + std::to_string(id) + ": slot/finished differ (oracle slot " + std::to_string(r.slot) +
             ", implementation slot " + std::to_string(s.slot) + ")";
    if (r.history[0].T != s.history[0].T)
      return "request " + std::to_string(id) + ": committed token count differs (oracle " +
             std::to_string(r.history[0].T) + ", implementation " + std::to_string(s.history[0].T) + ")";
  }
  return {};
}

// 3. Committed states of resident requests, and the oracle against its own recomputation.
std::string Judge::check_states() const {
  std::ostringstream why;
  for (const auto& [id, r] : oracle_.requests()) {
    if (r.slot == kPadSlot) continue;
    for (std::int32_t l = 0; l < oracle_.setup().cfg.num_layers; ++l) {
      const auto so = oracle_.target().committed_state(l, r.slot);
      if (r.pending[0].T == 0 || !r.pending_fresh) {
        const auto rc = compare(oracle_.recompute(id, l), so, Tolerance::exact());
        if (!rc.ok) {
          why << "oracle self-check failed: request " << id << " layer " << l << ": " << rc.str();
          return why.str();
        }
      }
      if (r.pending_fresh) continue;  // allocated, not prefilled yet: the slot holds garbage by design
      const auto rep = compare_values(so, sut_.target().committed_state(l, r.slot), true);
      if (!rep.ok) {
        why << "request " << id << " (slot " << r.slot << ") layer " << l << ": committed state differs: " << rep.str();
        return why.str();
      }
    }
  }
  return {};
}

// 4. Untouched slots and gaps stay bitwise unchanged; n = 0 commits leave their slot's bytes unchanged.
std::string Judge::check_untouched(const Cmd& c, const Outputs& before_o, const Outputs& before_s) const {
  const auto& setup = oracle_.setup();
  const std::int64_t elems = setup.cfg.state_elems();
  const std::int64_t stride = setup.slot_stride ? setup.slot_stride : elems;
  for (int side = 0; side < 2; ++side) {
    const Engine& e = side == 0 ? oracle_ : sut_;
    const auto& before = side == 0 ? before_o : before_s;
    std::set<std::int32_t> allowed(e.last_written().begin(), e.last_written().end());
    std::set<std::int32_t> kept;
    if (e.target().design() != "spec_ring") kept.insert(e.last_kept().begin(), e.last_kept().end());
    const std::set<std::int32_t> read_only(e.last_read_only().begin(), e.last_read_only().end());
    for (std::int32_t l = 0; l < setup.cfg.num_layers; ++l) {
      const auto now = e.target().pool(l);
      for (std::int32_t s = 0; s < setup.num_slots; ++s) {
        const float* a = before[static_cast<std::size_t>(l)].data() + s * stride;
        const float* b = now.data() + s * stride;
        if (!same_bits(a + elems, b + elems, static_cast<std::size_t>(stride - elems)))
          return std::string(side ? "implementation" : "oracle") + ": gap after slot " + std::to_string(s) +
                 " (layer " + std::to_string(l) + ") was written";
        if ((!allowed.count(s) || kept.count(s) || read_only.count(s)) && !same_bits(a, b, static_cast<std::size_t>(elems)))
          return std::string(side ? "implementation" : "oracle") + ": slot " + std::to_string(s) + " (layer " +
                 std::to_string(l) + ") changed although the command " +
                 (read_only.count(s) ? "only read it (out-of-place commit)"
                  : kept.count(s)    ? "committed n = 0 for it"
                                     : "must not touch it") +
                 " [" + c.str() + "]";
      }
    }
  }
  return {};
}

}  // namespace replayssm::ref
