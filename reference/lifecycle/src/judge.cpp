// The judge: one command on the oracle and on the implementation under test, then the four checks.
#include "replayssm/lifecycle/judge.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <sstream>

#include "replayssm/error.hpp"

namespace replayssm::ref {

namespace {
struct CheckName {
  Check c;
  const char* name;
};
constexpr CheckName kCheckNames[] = {
    {Check::Outputs, "outputs"},          {Check::PadZeros, "pad_zeros"},
    {Check::NanTripwire, "nan_tripwire"}, {Check::Requests, "requests"},
    {Check::States, "states"},            {Check::OracleSelfCheck, "oracle_self_check"},
    {Check::Untouched, "untouched"},      {Check::Gaps, "gaps"},
    {Check::KeptAtZero, "kept_at_zero"},  {Check::ReadOnly, "read_only"},
    {Check::StatesAfterStep, "states_after_step"}, {Check::UntouchedAfterStep, "untouched_after_step"},
    {Check::ConvOutputs, "conv_outputs"}, {Check::ConvWindows, "conv_windows"},
    {Check::ConvUntouched, "conv_untouched"}, {Check::Bookkeeping, "bookkeeping"},
    {Check::SelfConsistency, "self_consistency"},
};
}  // namespace

std::string to_string(Check c) {
  for (const auto& n : kCheckNames)
    if (n.c == c) return n.name;
  return "unknown";
}
Check parse_check(const std::string& s) {
  std::string known;
  for (const auto& n : kCheckNames) {
    if (s == n.name) return n.c;
    known += (known.empty() ? "" : ", ") + std::string(n.name);
  }
  fail("check", "unknown check '", s, "' (known: ", known, ")");
}
std::vector<Check> all_checks() {
  std::vector<Check> v;
  for (const auto& n : kCheckNames) v.push_back(n.c);
  return v;
}

Judge::Judge(const EngineSetup& setup, const std::string& target_kind, Fault fault, std::optional<Tier> judge_tier,
             std::set<Check> disabled)
    : oracle_(make_target("full_state", oracle_shares_fault(fault) ? fault : Fault::None), setup,
              shared_engine_fault(fault) ? fault : Fault::None),
      sut_(make_target(target_kind, fault), setup, sut_engine_fault(fault) || shared_engine_fault(fault) ? fault : Fault::None),
      tier_(judge_tier),
      disabled_(std::move(disabled)) {
  // Term scales are needed only where values are compared within a tolerance (an exact claim compares bits).
  scaled_ = tier_.has_value() || !sut_.target().bit_exact();
  if (scaled_) scales_.reset(oracle_.setup());
}

void Judge::count_work(const Cmd& c) {
  ++work_.commands[to_string(c.kind)];
  if (c.kind == Cmd::Kind::Capture) {
    for (const auto& [id, r] : oracle_.requests())
      if (r.slot != kPadSlot) {
        ++work_.live_captures;
        break;
      }
    return;
  }
  if (c.kind == Cmd::Kind::SelfCheck) {
    ++work_.self_checks[to_string(c.self_check)];
    work_.self_check_rows += static_cast<long>(c.rows.size());
    return;
  }
  if (c.kind != Cmd::Kind::Step) return;
  std::int32_t width = 0;
  bool mixed = false, prefill = false, verify = false;
  for (const auto& r : oracle_.last_rows())
    if (r.req >= 0) {
      mixed = mixed || (width > 0 && r.T != width);
      width = r.T;
      (r.prefill ? prefill : verify) = true;
    }
  if (mixed) ++work_.mixed_width_steps;
  if (c.replay_T > 0) {  // counted once, after the commit: the rows' committed counts are known
    std::vector<std::pair<std::int32_t, std::int32_t>> live;
    const auto& rows = oracle_.last_target_rows();
    for (std::size_t i = 0; i < rows.size() && i < oracle_.last_rows().size(); ++i)
      if (!oracle_.last_rows()[i].graph_tail) live.emplace_back(rows[i].row.slot, rows[i].row.accepted);  // PAD: -1
    const auto [it, first] = first_replays_.emplace(std::make_pair(c.graph, c.replay_T), live);
    ++work_.graph_replays;
    if (!first) {
      const auto& was = it->second;
      bool slots = was.size() != live.size(), accepted = false;
      for (std::size_t i = 0; i < std::min(was.size(), live.size()); ++i) {
        slots = slots || was[i].first != live[i].first;
        accepted = accepted || was[i].second != live[i].second;
      }
      if (slots) ++work_.replays_other_slots;
      if (was.size() != live.size()) ++work_.replays_other_live_rows;
      if (accepted) ++work_.replays_other_accepted;
    }
  }
  if (prefill && verify) ++work_.prefill_verify_steps;
  for (const auto& r : oracle_.last_rows()) {
    if (r.req < 0) {
      ++work_.pad_rows;
      if (r.stale_tail) ++work_.stale_tail_rows;
      else if (r.graph_tail) ++work_.pad_tail_rows;
      continue;
    }
    if (r.prefill) {
      ++work_.prefill_rows;
      continue;
    }
    ++work_.verify_rows;
    work_.accepted[r.T].insert(r.accepted);
    if (r.out_of_place) ++work_.out_of_place_rows;
    if (r.early_stop) ++work_.early_stops;
  }
}

template <class F>
std::string Judge::run_check(Check check, const char* call, F&& f) const {
  if (disabled_.count(check)) return {};
  std::string why = f();
  if (!why.empty()) {
    if (!failed_check_) failed_check_ = check;  // a sub-rule (PAD zeros, NaN tripwire) may have named itself
    failed_call_ = call;
  }
  return why;
}

namespace {
bool same_bits(const float* a, const float* b, std::size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }
}  // namespace

CompareReport Judge::compare_values(const std::vector<float>& ref, const std::vector<float>& got, bool state,
                                    const std::vector<double>& term_scale) const {
  // Bounds relative to the terms that produce each element (term_scale_tracker.hpp), never a floor of 1.
  const Tolerance tol = tier_                        ? tier_tolerance(*tier_, oracle_.setup().cfg, term_scale, state)
                        : sut_.target().bit_exact() ? Tolerance::exact()
                                                    : sut_.target().tolerance(term_scale, state);
  auto rep = compare(ref, got, tol);
  if ((tol.kind == Tolerance::Kind::AllClose || tol.kind == Tolerance::Kind::Budget) && rep.worst_excess > work_.closest_excess) {
    work_.closest_excess = rep.worst_excess;
    work_.closest_at = std::string(state ? "a committed state" : "an output") + " under " + tol.str() + " (worst |d| " +
                       std::to_string(rep.max_abs) + ")";
  }
  if (!rep.ok) {
    failed_ = rep;
    failed_values_ = FailedValues{ref, got, state};
    failed_tol_ = tol;
  }
  return rep;
}

std::string Judge::apply(const Cmd& c) {
  executed_.push_back(c);
  failed_.reset();
  failed_values_.reset();
  failed_check_.reset();
  failed_call_.clear();
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
  if (c.kind != Cmd::Kind::Step) {
    std::int32_t copy_from = kPadSlot;
    if (c.kind == Cmd::Kind::Copy && oracle_.requests().count(c.req)) copy_from = oracle_.requests().at(c.req).slot;
    oracle_.execute(c);  // an Error here means the command itself is invalid: propagate
    if (scaled_ && c.kind == Cmd::Kind::Copy && copy_from != kPadSlot) scales_.copy(copy_from, c.slot);
    count_work(c);
    try {
      sut_.execute(c);
    } catch (const Error& e) {
      return std::string("implementation raised an error the oracle did not: ") + e.what();
    }
    if (c.kind == Cmd::Kind::SelfCheck) {
      std::string why;
      try {
        why = run_check(Check::SelfConsistency, "self_check", [&] { return check_self(c); });
      } catch (const Error& e) {
        why = std::string("implementation failed while its self check was read: ") + e.what();
      }
      if (!why.empty()) return why;
    }
    return after_last_call(c, to_string(c.kind).c_str(), before_o, before_s, windows_before, conv_before_o,
                           conv_before_s);
  }
  // A step in its two calls, judged after each (call_rules.hpp).
  std::map<std::int32_t, Before> pos;
  for (const auto& [id, r] : oracle_.requests()) pos[id] = Before{r.history[0].T, r.slot};
  // The committed states rows read, before the step commits its prefill chunks (for the term scales).
  std::map<std::pair<std::int32_t, std::int32_t>, std::vector<float>> read_before;
  if (scaled_)
    for (const auto& [id, r] : oracle_.requests())
      if (r.slot != kPadSlot)
        for (std::int32_t l = 0; l < L; ++l) read_before[{l, r.slot}] = oracle_.target().committed_state(l, r.slot);
  const auto out_o = oracle_.begin_step(c);  // an Error here means the command itself is invalid: propagate
  if (scaled_)
    out_scales_ = scales_.step(oracle_.last_target_rows(), oracle_.last_inputs(), [&](std::int32_t l, std::int32_t slot) {
      const auto it = read_before.find({l, slot});
      return it != read_before.end() ? it->second : std::vector<float>();
    });
  Outputs out_s;
  try {
    out_s = sut_.begin_step(c);
  } catch (const Error& e) {
    return std::string("implementation raised an error the oracle did not: ") + e.what();
  }
  // The checks read the implementation's states and pools; an implementation in its own process can fail
  // there too (it crashed, hung, answered malformed data), which is a verdict, not a crash of the judge.
  try {
    std::string why;
    if (!(why = run_check(Check::Outputs, "step", [&] { return check_outputs(out_o, out_s, pos, c); })).empty())
      return why;
    if (conv && !(why = run_check(Check::ConvOutputs, "step", [&] { return check_conv_outputs(windows_before); })).empty())
      return why;
    if (!(why = run_check(Check::StatesAfterStep, "step", [&] { return check_states_after_step(); })).empty())
      return why;
    if (!(why = run_check(Check::UntouchedAfterStep, "step",
                          [&] { return check_untouched_after_step(c, before_o, before_s); })).empty())
      return why;
  } catch (const Error& e) {
    return std::string("implementation failed while its results were read after step: ") + e.what();
  }
  oracle_.finish_step();
  if (scaled_) scales_.commit(oracle_.last_target_rows());
  count_work(c);
  try {
    sut_.finish_step();
  } catch (const Error& e) {
    return std::string("implementation raised an error the oracle did not: ") + e.what();
  }
  return after_last_call(c, "commit", before_o, before_s, windows_before, conv_before_o, conv_before_s);
}

std::string Judge::after_last_call(const Cmd& c, const char* call, const Outputs& before_o, const Outputs& before_s,
                                   const Windows& windows_before, const Outputs& conv_before_o,
                                   const Outputs& conv_before_s) {
  (void)windows_before;
  // States, OracleSelfCheck, Untouched, Gaps, KeptAtZero and ReadOnly name themselves inside their functions.
  auto named = [&](std::string why) {
    if (!why.empty()) failed_call_ = call;
    return why;
  };
  try {
    std::string why;
    if (!(why = run_check(Check::Requests, call, [&] { return check_requests(); })).empty()) return why;
    if (!(why = named(check_states())).empty()) return why;
    if (!(why = named(check_untouched(c, before_o, before_s))).empty()) return why;
    if (oracle_.setup().conv) {
      if (!(why = run_check(Check::ConvWindows, call, [&] { return check_conv_windows(); })).empty()) return why;
      if (!(why = run_check(Check::ConvUntouched, call,
                            [&] { return check_conv_untouched(c, conv_before_o, conv_before_s); })).empty())
        return why;
    }
    return why;
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
        if (!enabled(Check::PadZeros)) continue;
        const std::vector<float> zeros(n, 0.0f);
        if (!bitwise_equal(ro, zeros) || (sut_.target().pad_outputs_zero() && !bitwise_equal(so, zeros))) {
          failed_check_ = Check::PadZeros;
          failed_call_ = "step";
          why << "layer " << l << ": PAD row outputs are not zero (oracle " << compare(zeros, ro, Tolerance::exact()).str()
              << "; implementation " << compare(zeros, so, Tolerance::exact()).str() << ")";
          return why.str();
        }
        continue;
      }
      // NaN tripwire: a non-finite output where the other side's is finite, or any on the oracle's side.
      for (std::size_t e = 0; e < n && enabled(Check::NanTripwire); ++e) {
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
        failed_check_ = Check::NanTripwire;
        failed_call_ = "step";
        return why.str();
      }
      std::vector<double> scale;
      if (scaled_) {
        const auto& all = out_scales_[l];
        scale.assign(all.begin() + static_cast<std::ptrdiff_t>(b), all.begin() + static_cast<std::ptrdiff_t>(b + n));
      }
      const auto rep = compare_values(ro, so, false, scale);
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
      if ((r.pending[0].T == 0 || !r.pending_fresh) && enabled(Check::OracleSelfCheck)) {
        const auto rc = compare(oracle_.recompute(id, l), so, Tolerance::exact());
        if (!rc.ok) {
          why << "oracle self-check failed: request " << id << " layer " << l << ": " << rc.str();
          failed_check_ = Check::OracleSelfCheck;
          return why.str();
        }
      }
      if (r.pending_fresh || !enabled(Check::States)) continue;  // allocated, not prefilled yet: garbage by design
      const auto rep = compare_values(so, sut_.target().committed_state(l, r.slot), true,
                                      scaled_ ? scales_.state_scales(l, r.slot) : std::vector<double>());
      if (!rep.ok) {
        why << "request " << id << " (slot " << r.slot << ") layer " << l << ": committed state differs: " << rep.str();
        failed_check_ = Check::States;
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
        if (enabled(Check::Gaps) && !same_bits(a + elems, b + elems, static_cast<std::size_t>(stride - elems))) {
          failed_check_ = Check::Gaps;
          return std::string(side ? "implementation" : "oracle") + ": gap after slot " + std::to_string(s) +
                 " (layer " + std::to_string(l) + ") was written";
        }
        // The rule that keeps the slot: read only first, then n = 0, then outside the write set.
        const Check rule = read_only.count(s) ? Check::ReadOnly
                           : kept.count(s)    ? Check::KeptAtZero
                           : !allowed.count(s) ? Check::Untouched
                                               : Check::Outputs;  // Outputs: the slot may be written
        if (rule != Check::Outputs && enabled(rule) && !same_bits(a, b, static_cast<std::size_t>(elems))) {
          failed_check_ = rule;
          return std::string(side ? "implementation" : "oracle") + ": slot " + std::to_string(s) + " (layer " +
                 std::to_string(l) + ") changed although the command " +
                 (rule == Check::ReadOnly     ? "only read it (out-of-place commit)"
                  : rule == Check::KeptAtZero ? "committed n = 0 for it"
                                              : "must not touch it") +
                 " [" + c.str() + "]";
        }
      }
    }
  }
  return {};
}

}  // namespace replayssm::ref

namespace replayssm::ref {

// 5a. Between a step and its commit: every resident request without a verify row in the step (its prefill
// chunk committed by the step, or not in the step at all) has the oracle's committed state.
std::string Judge::check_states_after_step() const {
  const auto& in_flight = oracle_.last_step_writes().in_flight;
  std::set<std::int32_t> prefilled;
  for (const auto& pr : oracle_.last_rows())
    if (pr.prefill) prefilled.insert(pr.req);
  std::ostringstream why;
  for (const auto& [id, r] : oracle_.requests()) {
    if (r.slot == kPadSlot) continue;
    if (std::find(in_flight.begin(), in_flight.end(), r.slot) != in_flight.end()) continue;  // judged after commit
    if (r.pending_fresh && !prefilled.count(id)) continue;  // allocated, not prefilled yet
    for (std::int32_t l = 0; l < oracle_.setup().cfg.num_layers; ++l) {
      const auto rep = compare_values(oracle_.target().committed_state(l, r.slot),
                                      sut_.target().committed_state(l, r.slot), true,
                                      scaled_ ? scales_.state_scales(l, r.slot) : std::vector<double>());
      if (!rep.ok) {
        why << "after step (before its commit): request " << id << " (slot " << r.slot << ") layer " << l
            << ": committed state differs" << (prefilled.count(id) ? " (its prefill chunk is committed by the step)" : "")
            << ": " << rep.str();
        return why.str();
      }
    }
  }
  return {};
}

// 5b. Between a step and its commit: slots outside the step's write set, and every gap, bitwise unchanged.
std::string Judge::check_untouched_after_step(const Cmd& c, const Outputs& before_o, const Outputs& before_s) const {
  const auto& setup = oracle_.setup();
  const std::int64_t elems = setup.cfg.state_elems();
  const std::int64_t stride = setup.slot_stride ? setup.slot_stride : elems;
  for (int side = 0; side < 2; ++side) {
    const Engine& e = side == 0 ? oracle_ : sut_;
    const auto& before = side == 0 ? before_o : before_s;
    const auto& w = e.last_step_writes().written;
    const std::set<std::int32_t> allowed(w.begin(), w.end());
    for (std::int32_t l = 0; l < setup.cfg.num_layers; ++l) {
      const auto now = e.target().pool(l);
      for (std::int32_t s = 0; s < setup.num_slots; ++s) {
        const float* a = before[static_cast<std::size_t>(l)].data() + s * stride;
        const float* b = now.data() + s * stride;
        const bool gap = !same_bits(a + elems, b + elems, static_cast<std::size_t>(stride - elems));
        if (gap || (!allowed.count(s) && !same_bits(a, b, static_cast<std::size_t>(elems))))
          return std::string(side ? "implementation" : "oracle") + ": after step (before its commit): " +
                 (gap ? "the gap after slot " : "slot ") + std::to_string(s) + " (layer " + std::to_string(l) +
                 (gap ? ") was written" : ") changed although the step must not touch it") + " [" + c.str() + "]";
      }
    }
  }
  return {};
}

}  // namespace replayssm::ref
