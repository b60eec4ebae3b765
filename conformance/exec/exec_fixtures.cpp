#include "exec_fixtures.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "exec_target.hpp"
#include "replayssm/error.hpp"
#include "replayssm/fixture.hpp"
#include "replayssm/recurrence/conv.hpp"
#include "replayssm/fixtures/conv_fixture.hpp"
#include "replayssm/fixtures/ring_fixture.hpp"
#include "exec_mrope.hpp"
#include "replayssm/mrope/mrope_session.hpp"
#include "replayssm/fixtures/tree_fixture.hpp"
#include "replayssm/fixtures/trace.hpp"
#include "replayssm/fixtures/trace_replay.hpp"
#include "replayssm/tier.hpp"

namespace replayssm::exec {

using nlohmann::json;

std::string coords_of(std::size_t flat, const Shape& shape) {
  std::vector<std::int64_t> c(shape.size(), 0);
  auto rest = static_cast<std::int64_t>(flat);
  for (std::size_t d = shape.size(); d-- > 0;) {
    if (shape[d] <= 0) return "[]";
    c[d] = rest % shape[d];
    rest /= shape[d];
  }
  std::ostringstream os;
  os << "[";
  for (std::size_t d = 0; d < c.size(); ++d) os << (d ? ", " : "") << c[d];
  os << "]";
  return os.str();
}

std::string ExecTensorCheck::str() const {
  std::ostringstream os;
  os << name << ": " << report.str();
  if (!report.ok && report.count && !shape.empty()) os << " worst element " << coords_of(report.worst_index, shape);
  if (!stored.empty()) {
    os << " (stored tolerance " << stored;
    if (stored_excess >= 0) os << ": worst excess " << stored_excess;
    os << ")";
  }
  return os.str();
}

json ExecFixtureResult::to_json() const {
  auto ts = json::array();
  for (const auto& t : tensors) {
    json j{{"name", t.name},         {"tolerance", t.judged.str()},         {"stored_tolerance", t.stored},
           {"ok", t.report.ok},      {"max_abs", t.report.max_abs},         {"rel_rms", t.report.rel_rms},
           {"mismatches", t.report.mismatches}, {"worst_index", t.report.worst_index},
           {"worst_ref", t.report.worst_ref},   {"worst_got", t.report.worst_got},
           {"report", t.str()}};  // the one-line verdict naming the worst element (JUnit messages)
    if (t.tier_excess >= 0) j["tier_excess"] = t.tier_excess;
    if (!t.check.empty()) j["check"] = t.check;
    if (t.stored_excess >= 0) j["stored_excess"] = t.stored_excess;
    if (!t.shape.empty()) j["worst_coords"] = coords_of(t.report.worst_index, t.shape);
    ts.push_back(j);
  }
  return json{{"path", path}, {"op", op}, {"tier", tier}, {"covered", covered}, {"ok", ok}, {"why", why},
              {"tensors", ts}};
}

std::string ExecFixtureResult::str() const {
  std::ostringstream os;
  os << (!covered ? "not covered " : ok ? "PASS " : "FAIL ") << path << " (" << (op.empty() ? "?" : op)
     << (tier.empty() ? "" : ", " + tier + " tier") << ")";
  if (!why.empty()) os << "\n     " << (covered ? "error: " : "") << why;
  for (const auto& t : tensors) os << "\n     " << t.str();
  return os.str();
}

namespace {

bool is_state_tensor(const std::string& name) {
  return name.find("state") != std::string::npos || name.find("pool") != std::string::npos;
}


ExecTensorCheck make_check(const std::string& name, const Tolerance& judged, const std::string& stored,
                           const std::vector<double>& ref, const std::vector<double>& got, const Shape& shape) {
  ExecTensorCheck c;
  c.name = name;
  c.judged = judged;
  c.stored = stored;
  c.shape = shape;
  c.report = compare(ref, got, judged);
  if (judged.kind == Tolerance::Kind::AllClose || judged.kind == Tolerance::Kind::Budget) c.tier_excess = c.report.worst_excess;
  if (!stored.empty() && stored != judged.str()) {
    const Tolerance st = Tolerance::parse(stored, "stored tolerance");
    if (st.kind == Tolerance::Kind::AllClose || st.kind == Tolerance::Kind::Budget)
      c.stored_excess = compare(ref, got, st).worst_excess;
  } else if (!stored.empty()) {
    c.stored_excess = c.tier_excess;
  }
  return c;
}

// The per-element masks of mtp_batch: PAD rows of out.o [B, T, HV, V], written slots of out.pool [slots, ...].
struct BatchMasks {
  std::vector<bool> pad_o, written_pool;
};
BatchMasks batch_masks(const Fixture& f) {
  BatchMasks m;
  const auto slots = f.tensor("in.slot").to_i64();
  const auto acc = f.tensor("in.accepted").to_i64();
  const Tensor& o = f.tensor("out.o");
  const Tensor& pool = f.tensor("out.pool");
  const auto B = static_cast<std::int64_t>(slots.size());
  const std::int64_t per_row = B ? o.numel() / B : 0;
  m.pad_o.assign(static_cast<std::size_t>(o.numel()), false);
  for (std::int64_t r = 0; r < B; ++r)
    if (slots[r] < 0) std::fill_n(m.pad_o.begin() + r * per_row, per_row, true);
  const std::int64_t S = pool.shape.empty() ? 0 : pool.shape[0];
  const std::int64_t E = S ? pool.numel() / S : 0;
  m.written_pool.assign(static_cast<std::size_t>(pool.numel()), false);
  for (std::int64_t r = 0; r < B && r < static_cast<std::int64_t>(acc.size()); ++r)
    if (slots[r] >= 0 && slots[r] < S && acc[r] > 0) std::fill_n(m.written_pool.begin() + slots[r] * E, E, true);
  return m;
}

// Whether fixture op f.op may be sent: claimed, and the implementation speaks the minor version that added it;
// otherwise r is "not covered" with the reason.
bool claimed_or_not_covered(const Fixture& f, const Capabilities& caps, ExecFixtureResult& r) {
  if (caps.runs_fixture_op(f.op)) return true;
  r.covered = false;
  r.why = caps.protocol_minor < fixture_op_minor(f.op) ? protocol_gap(caps.protocol_minor, f.op)
                                                       : "fixture op '" + f.op + "' is not claimed by the target (fixture_ops)";
  return false;
}

// Runs the fixture through the implementation and judges every out.* tensor at the fixture's stored tolerance.
// Integer tensors (MRoPE positions, delta, prompt length) are compared as doubles: every value is below 2^53,
// exact.
void judge_at_stored(const std::string& command, const Fixture& f, ExecFixtureResult& r) {
  const auto got = run_fixture(command, f);
  auto values = [](const Tensor& t) {
    if (t.dtype == DType::F32 || t.dtype == DType::F64 || t.dtype == DType::BF16 || t.dtype == DType::F16)
      return t.to_f64();
    const auto i = t.to_i64();
    return std::vector<double>(i.begin(), i.end());
  };
  r.ok = true;
  for (const auto& name : f.tensor_names("out.")) {
    const Tensor& want = f.tensors.at(name);
    const Tolerance& stored = f.tolerance_for(name);
    r.tensors.push_back(make_check(name, stored, stored.str(), values(want), values(got.at(name)), want.shape));
  }
  for (const auto& t : r.tensors) r.ok = r.ok && t.report.ok;
}

void judge_static(const std::string& command, const Fixture& f, const Capabilities& caps, ExecFixtureResult& r) {
  require(f.config.is_object() && f.config.contains("model"), "__metadata__.config.model", "is missing");
  ModelConfig cfg = config_from_json(f.config.at("model"));
  cfg.num_layers = 1;  // a fixture is one layer
  // max_T is the largest verify window: it bounds the windows of the verify ops, not a sequence.
  std::int32_t window = 1;
  if (f.op == "mtp_verify") window = static_cast<std::int32_t>(f.tensor("in.q").shape.at(0));
  if (f.op == "replay_commit") window = static_cast<std::int32_t>(f.tensor("in.k").shape.at(0));
  if (f.op == "mtp_batch") window = static_cast<std::int32_t>(f.tensor("in.q").shape.at(1));
  if (!claimed_or_not_covered(f, caps, r)) return;
  if (const std::string why = caps.unsupported(cfg, window); !why.empty()) {
    r.covered = false;
    r.why = why;
    return;
  }
  const auto got = run_fixture(command, f);
  const Tier tier = caps.tier;
  // The claimed tier's bounds relative to each element's term scale (docs/numerics.md, "Term scales").
  const auto scales = ref::golden_term_scales(f.op, f.config, f.tensors);
  auto tier_tol = [&](const std::string& name, bool state) {
    const auto it = scales.find(name);
    require(it != scales.end(), name, "has no term scale");
    return tier_tolerance(tier, cfg, it->second, state);
  };
  const bool batch = f.op == "mtp_batch";
  const BatchMasks masks = batch ? batch_masks(f) : BatchMasks{};
  r.ok = true;
  for (const auto& name : f.tensor_names("out.")) {
    const Tensor& want = f.tensors.at(name);
    const std::string stored = f.tolerance_for(name).str();
    const auto ref = want.to_f64();
    auto val = got.at(name).to_f64();
    const bool state = is_state_tensor(name);
    if (batch && name == "out.o") {
      if (caps.pad_outputs_zero) {  // claimed: exact +0 in every PAD row, as in the lifecycle judge
        std::vector<double> pad(val.size(), 0.0), zeros(val.size(), 0.0);
        for (std::size_t i = 0; i < val.size(); ++i)
          if (masks.pad_o[i]) pad[i] = val[i];
        r.tensors.push_back(make_check(name + " (PAD rows: exact zeros, claimed)", Tolerance::exact(), "", zeros, pad,
                                       want.shape));
      }
      for (std::size_t i = 0; i < val.size(); ++i)
        if (masks.pad_o[i]) val[i] = ref[i];  // judged above, or don't-care without the claim
    }
    if (batch && name == "out.pool") {
      // The slots no row writes: bitwise the input pool's (the reference copies them through unchanged).
      const auto input = f.tensor("in.pool").to_f64();
      auto untouched = val;
      for (std::size_t i = 0; i < val.size(); ++i)
        if (masks.written_pool[i]) untouched[i] = input[i];
      r.tensors.push_back(make_check(name + " (slots no row writes: bitwise unchanged)", Tolerance::exact(), "",
                                     input, untouched, want.shape));
      auto written = val;
      for (std::size_t i = 0; i < val.size(); ++i)
        if (!masks.written_pool[i]) written[i] = ref[i];
      r.tensors.push_back(make_check(name + " (written slots)", tier_tol(name, state), stored, ref, written, want.shape));
    } else {
      r.tensors.push_back(make_check(name, tier_tol(name, state), stored, ref, val, want.shape));
    }
  }
  for (const auto& t : r.tensors) r.ok = r.ok && t.report.ok;
}

// conv.* fixtures (docs/fixture-format.md section 11) carry no GDN/KDA model configuration, so the claimed tier
// does not replace their stored tolerances: out.y's is derived for any fp32-arithmetic convolution (any order,
// fused multiply-adds; the tiers' TF32 operands and bf16 intermediates are recurrence arithmetic a depthwise
// conv1d does not have), and every state is exact (copies and one rounding to the state dtype). The report
// names the claimed tier and, per tensor, the tolerance applied, which is the stored one.
void judge_conv(const std::string& command, const Fixture& f, const Capabilities& caps, ExecFixtureResult& r) {
  require(f.config.is_object() && f.config.contains("conv"), "__metadata__.config.conv", "is missing");
  const ref::ConvConfig cc = ref::conv_config_from_json(f.config.at("conv"), "__metadata__.config.conv");
  if (!claimed_or_not_covered(f, caps, r)) return;
  // max_T bounds a verify window (conv.update, conv.commit), not a prompt chunk.
  const int window = f.op == ref::kConvPrefillOp ? 0 : static_cast<int>(f.tensor("in.x").shape.at(0));
  if (const std::string why = caps.unsupported_conv(cc.act_dtype, cc.state_dtype, window); !why.empty()) {
    r.covered = false;
    r.why = why;
    return;
  }
  judge_at_stored(command, f, r);
}

// mrope.rotary (protocol 1.10): like the conv ops, no GDN/KDA model, so every out.* tensor is judged at the
// fixture's stored tolerance (positions, delta and prompt length exact; the rotary bound of docs/mrope.md) whatever
// tier the implementation claims.
void judge_mrope_rotary(const std::string& command, const Fixture& f, const Capabilities& caps, ExecFixtureResult& r) {
  if (!claimed_or_not_covered(f, caps, r)) return;
  judge_at_stored(command, f, r);
}

// tree.* (protocol 1.11, docs/fixture-format.md section 12). tree.verify and tree.commit carry a GDN/KDA model but
// no term scales of their own yet: they are judged at their stored tolerance, the golden fp32-tier bound, which is
// the claimed tier's bound only for an implementation claiming the fp32 tier (one claiming tf32 or bf16 is not
// covered, with that reason, rather than held to a bound tighter than its claim). tree.conv_update and
// tree.conv_commit are judged at their stored tolerance like the conv ops (an fp32-arithmetic convolution's bound,
// the state exact), whatever tier is claimed. Windows (the tree's node count) are bounded by max_T.
void judge_tree(const std::string& command, const Fixture& f, const Capabilities& caps, ExecFixtureResult& r) {
  if (!claimed_or_not_covered(f, caps, r)) return;
  const bool conv = f.op == ref::kTreeConvUpdateOp || f.op == ref::kTreeConvCommitOp;
  const int window = static_cast<int>(f.tensor("in.parent").shape.at(0));
  std::string why;
  if (conv) {
    require(f.config.is_object() && f.config.contains("conv"), "__metadata__.config.conv", "is missing");
    const ref::ConvConfig cc = ref::conv_config_from_json(f.config.at("conv"), "__metadata__.config.conv");
    why = caps.unsupported_conv(cc.act_dtype, cc.state_dtype, window);
  } else {
    require(f.config.is_object() && f.config.contains("model"), "__metadata__.config.model", "is missing");
    ModelConfig cfg = config_from_json(f.config.at("model"));
    cfg.num_layers = 1;
    why = caps.unsupported(cfg, window);
    if (why.empty() && caps.tier != Tier::Fp32)
      why = "tree fixtures are judged at their stored fp32-tier tolerance; the target claims the " +
            to_string(caps.tier) + " tier (tree term scales are not derived yet)";
  }
  if (!why.empty()) {
    r.covered = false;
    r.why = why;
    return;
  }
  judge_at_stored(command, f, r);
}

// mrope.session (protocol 1.10): the trace's commands through the implementation's mrope_* commands, judged per
// token (mrope_session.hpp) with the stored inputs.
void judge_mrope_session(const std::string& command, const Fixture& f, const Capabilities& caps, ExecFixtureResult& r) {
  const mrope::SessionCase sc = mrope::session_case_of(f);
  if (!caps.mropes() || std::find(caps.mrope_models.begin(), caps.mrope_models.end(), sc.preset.name) ==
                            caps.mrope_models.end()) {
    r.covered = false;
    r.why = caps.mrope_models.empty() ? "MRoPE traces: the target does not claim mrope"
            : !caps.mropes()          ? "MRoPE traces: the target speaks protocol 1." + std::to_string(caps.protocol_minor) +
                                   ", which has no MRoPE commands (added in 1.10)"
                                      : "MRoPE traces: model " + sc.preset.name + " is not in mrope.models";
    return;
  }
  // The trace's stored expectations are the tracker's (bitwise): a trace edited or stripped of them is refused
  // before the implementation is judged by it.
  const auto expected = mrope::session_fixture_outputs(f);
  for (const auto& [name, t] : expected) {
    require(f.tensors.count(name) > 0, name, "is missing from the trace (its expectation of the step)");
    const Tensor& stored = f.tensors.at(name);
    require(stored.dtype == t.dtype && stored.shape == t.shape && stored.data == t.data, name,
            "differs from the reference tracker's answer: the trace is not what the judge computes");
  }
  for (const auto& name : f.tensor_names("out."))
    require(expected.count(name) > 0, name, "is not an expectation of any step of the trace");
  const auto target = exec_session_target(command);
  const mrope::SessionReport rep = mrope::run_session(sc, *target, mrope::stored_inputs(f));
  r.ok = rep.ok;
  ExecTensorCheck tc;
  if (rep.ok) {
    tc.name = "commands";
    tc.report.ok = true;
    tc.report.message = "ok " + std::to_string(sc.commands.size()) + " MRoPE commands replayed through the target (" +
                        std::to_string(rep.coverage.steps) + " steps judged per token)";
  } else {
    tc.name = "command " + std::to_string(rep.failure->command) + " (check: " + rep.failure->check + ")";
    tc.check = rep.failure->check;
    tc.report.ok = false;
    tc.report.message = "FAIL " + rep.failure->message;
  }
  r.tensors.push_back(tc);
}

void judge_trace(const std::string& command, const Fixture& f, ExecFixtureResult& r) {
  const ref::Trace t = ref::trace_from_fixture(f);
  const auto target = ref::make_target("exec:" + command);
  if (std::string why = ref::trace_not_covered(t, *target); !why.empty()) {
    r.covered = false;
    r.why = std::move(why);
    return;
  }
  const ref::TraceReport rep = ref::replay_trace(t, *target, ref::TraceJudging{});
  r.ok = rep.ok;
  for (const auto& c : rep.commands) {
    if (c.verdict != ref::TraceCommandResult::Verdict::Fail) continue;
    ExecTensorCheck tc;
    tc.name = "command " + std::to_string(c.index) + " (check: " + c.check + ")";
    tc.check = c.check;
    tc.judged = c.tolerance;
    tc.report = c.report.value_or(CompareReport{});
    tc.report.ok = false;
    tc.report.message = "FAIL " + c.message;
    r.tensors.push_back(tc);
  }
  if (rep.ok) {
    ExecTensorCheck tc;
    tc.name = "commands";
    tc.report.message = "ok " + std::to_string(t.commands.size()) + " commands replayed through the target";
    r.tensors.push_back(tc);
  }
}

}  // namespace

ExecFixtureResult check_fixture_through(const std::string& command, const std::string& path) {
  ExecFixtureResult r;
  r.path = path;
  try {
    const Fixture f = load_fixture(path);
    r.op = f.op;
    const Capabilities caps = capabilities(command);
    r.tier = caps.bit_exact && f.op == ref::kTraceOp ? "bit-exact" : to_string(caps.tier);
    if (f.op.rfind("mrope.", 0) == 0) r.tier = "any";  // judged at the rotary bound whatever tier is claimed
    if (f.op == "mrope.rotary") {
      judge_mrope_rotary(command, f, caps, r);
      return r;
    }
    if (f.op == mrope::kSessionOp) {
      judge_mrope_session(command, f, caps, r);
      return r;
    }
    if (ref::is_tree_op(f.op)) {
      judge_tree(command, f, caps, r);
      return r;
    }
    if (f.op.rfind("mrope.", 0) == 0 || f.op == ref::kRingStepOp) {
      r.covered = false;
      r.why = f.op == ref::kRingStepOp ? "ring-step fixtures need the ring's records and cursors, which the protocol "
                                         "does not expose"
              : "op '" + f.op + "' is no MRoPE operation of the protocol";
      return r;
    }
    if (f.op == ref::kTraceOp) {
      judge_trace(command, f, r);
    } else if (ref::is_conv_op(f.op)) {
      judge_conv(command, f, caps, r);
    } else if (std::find(kFixtureOps.begin(), kFixtureOps.end(), f.op) != kFixtureOps.end()) {
      judge_static(command, f, caps, r);
    } else {
      r.covered = false;
      r.why = "op '" + f.op + "' is not a fixture op of the protocol";
    }
  } catch (const std::exception& e) {
    r.ok = false;
    r.covered = true;
    r.why = e.what();
  }
  return r;
}

}  // namespace replayssm::exec
