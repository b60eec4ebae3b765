#include "replayssm/reference/engine.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "replayssm/compare.hpp"
#include "replayssm/error.hpp"
#include "replayssm/reference/inputs.hpp"
#include "replayssm/rng.hpp"

namespace replayssm::ref {

namespace {
struct FaultInfo {
  Fault f;
  const char* name;
  std::vector<std::string> targets;
};
const std::vector<FaultInfo>& fault_table() {
  static const std::vector<FaultInfo> t{
      {Fault::None, "none", {"replay", "ring"}},
      {Fault::OffByOneAccepted, "off_by_one_accepted", {"replay"}},
      {Fault::ZeroAcceptedAsOne, "zero_accepted_as_one", {"replay"}},
      {Fault::FullAcceptClamped, "full_accept_clamped", {"replay"}},
      {Fault::GvaModulo, "gva_modulo", {"replay"}},
      {Fault::TransposedLayout, "transposed_layout", {"replay"}},
      {Fault::MissingDecayInReplay, "missing_decay_in_replay", {"replay"}},
      {Fault::StaleCursorOnSlotReuse, "stale_cursor_on_slot_reuse", {"ring"}},
      {Fault::DoubleCursorAdvance, "double_cursor_advance", {"ring"}},
      {Fault::PadRowWritesSlot0, "pad_row_writes_slot0", {"replay"}},
      {Fault::FlushOverwritesLiveRecord, "flush_overwrites_live_record", {"ring"}},
      {Fault::BetaRoundingOnePath, "beta_rounding_one_path", {"replay"}},
      {Fault::EarlyStopCommitsWholeRun, "early_stop_commits_whole_run", {"replay", "ring"}},
      {Fault::CopyDropsRingRecords, "copy_drops_ring_records", {"ring"}},
  };
  return t;
}
}  // namespace

std::string to_string(Fault f) {
  for (const auto& i : fault_table())
    if (i.f == f) return i.name;
  return "unknown";
}
Fault parse_fault(const std::string& s) {
  std::string known;
  for (const auto& i : fault_table()) {
    if (s == i.name) return i.f;
    known += (known.empty() ? "" : ", ") + std::string(i.name);
  }
  fail("fault", "unknown fault '", s, "' (known: ", known, ")");
}
std::vector<Fault> all_faults() {
  std::vector<Fault> v;
  for (const auto& i : fault_table())
    if (i.f != Fault::None) v.push_back(i.f);
  return v;
}
std::vector<std::string> fault_targets(Fault f) {
  for (const auto& i : fault_table())
    if (i.f == f) return i.targets;
  return {};
}

void EngineSetup::validate() const {
  cfg.validate();
  require(static_cast<int>(params.size()) == cfg.num_layers, "params", "has ", params.size(),
          " layers, expected num_layers = ", cfg.num_layers);
  for (std::size_t l = 0; l < params.size(); ++l) params[l].validate(cfg, "params[" + std::to_string(l) + "]");
  require(num_slots >= 1, "num_slots", "must be >= 1, got ", num_slots);
  require(slot_stride == 0 || slot_stride >= cfg.state_elems(), "slot_stride", "must be 0 or >= HV*K*V");
  require(max_T >= 1, "max_T", "must be >= 1, got ", max_T);
  require(page_tokens >= 1, "page_tokens", "must be >= 1, got ", page_tokens);
  ring.validate();
}

nlohmann::json EngineSetup::to_json() const {
  return nlohmann::json{{"config", replayssm::to_json(cfg)},
                        {"num_slots", num_slots},
                        {"slot_stride", slot_stride},
                        {"max_T", max_T},
                        {"ring_B", ring.B},
                        {"ring_T", ring.T},
                        {"recon", recon == Reconstruction::Serial ? "serial" : "closed_form"},
                        {"ring_record_dtype", std::string(dtype_name(ring_record_dtype))},
                        {"page_tokens", page_tokens}};
}

EngineSetup make_setup(const ModelConfig& cfg, std::uint64_t seed, std::int32_t num_slots, std::int32_t max_T) {
  EngineSetup s;
  s.cfg = cfg;
  for (int l = 0; l < cfg.num_layers; ++l) s.params.push_back(random_params(cfg, derive_seed(seed, 100 + l)));
  s.num_slots = num_slots;
  s.slot_stride = cfg.state_elems() + 4;  // a gap after every slot that nothing may write (kernels: stride % 4 == 0)
  s.max_T = max_T;
  s.ring = SpecRingGeometry{max_T + 2, max_T};
  s.page_tokens = std::max(1, (max_T + 1) / 2);
  s.poison = std::numeric_limits<float>::quiet_NaN();
  s.validate();
  return s;
}

SequenceInputs token_inputs(const ModelConfig& cfg, std::int32_t layer, std::int32_t T, std::uint64_t seed) {
  return random_inputs(cfg, T, derive_seed(seed, 1000 + static_cast<std::uint64_t>(layer)));
}

// --- Cmd ---------------------------------------------------------------------------------------------------
namespace {
const char* kind_name(Cmd::Kind k) {
  switch (k) {
    case Cmd::Kind::Admit: return "admit";
    case Cmd::Kind::Step: return "step";
    case Cmd::Kind::Finish: return "finish";
    case Cmd::Kind::Continue: return "continue";
    case Cmd::Kind::Copy: return "copy";
    case Cmd::Kind::Preempt: return "preempt";
    case Cmd::Kind::Resume: return "resume";
  }
  return "?";
}
}  // namespace

nlohmann::json Cmd::to_json() const {
  nlohmann::json j{{"kind", kind_name(kind)}};
  switch (kind) {
    case Kind::Step: {
      auto rs = nlohmann::json::array();
      for (const auto& r : rows)
        rs.push_back({{"req", r.req}, {"T", r.T}, {"accepted", r.accepted}, {"stop_at", r.stop_at},
                      {"seed", std::to_string(r.seed)}});
      j["rows"] = rs;
      j["pad_at"] = pad_at;
      break;
    }
    default:
      j["req"] = req;
      j["req2"] = req2;
      j["slot"] = slot;
      j["prompt"] = prompt;
      j["seed"] = std::to_string(seed);
  }
  return j;
}

Cmd Cmd::from_json(const nlohmann::json& j) {
  Cmd c;
  try {
    const std::string k = j.at("kind").get<std::string>();
    bool found = false;
    for (auto kk : {Kind::Admit, Kind::Step, Kind::Finish, Kind::Continue, Kind::Copy, Kind::Preempt, Kind::Resume})
      if (k == kind_name(kk)) {
        c.kind = kk;
        found = true;
      }
    require(found, "cmd.kind", "unknown command kind '", k, "'");
    if (c.kind == Kind::Step) {
      for (const auto& r : j.at("rows"))
        c.rows.push_back(RowSpec{r.at("req").get<std::int32_t>(), r.at("T").get<std::int32_t>(),
                                 r.at("accepted").get<std::int32_t>(), r.at("stop_at").get<std::int32_t>(),
                                 std::stoull(r.at("seed").get<std::string>())});
      c.pad_at = j.at("pad_at").get<std::vector<std::int32_t>>();
    } else {
      c.req = j.at("req").get<std::int32_t>();
      c.req2 = j.at("req2").get<std::int32_t>();
      c.slot = j.at("slot").get<std::int32_t>();
      c.prompt = j.at("prompt").get<std::int32_t>();
      c.seed = std::stoull(j.at("seed").get<std::string>());
    }
  } catch (const nlohmann::json::exception& e) {
    fail("cmd", "malformed command JSON: ", e.what());
  } catch (const std::logic_error& e) {
    if (dynamic_cast<const Error*>(&e)) throw;
    fail("cmd", "malformed number in command JSON: ", e.what());
  }
  return c;
}

std::string Cmd::str() const {
  std::ostringstream os;
  os << kind_name(kind);
  if (kind == Kind::Step) {
    os << " [";
    for (std::size_t i = 0; i < rows.size(); ++i)
      os << (i ? ", " : "") << "req" << rows[i].req << " T=" << rows[i].T << " n=" << rows[i].accepted
         << (rows[i].stop_at ? " stop@" + std::to_string(rows[i].stop_at) : "");
    os << "]";
    if (!pad_at.empty()) os << " pads=" << pad_at.size();
  } else {
    os << " req" << req;
    if (kind == Kind::Copy) os << " -> req" << req2;
    if (kind == Kind::Admit || kind == Kind::Continue || kind == Kind::Copy || kind == Kind::Resume)
      os << " slot=" << slot;
    if (kind == Kind::Admit || kind == Kind::Continue) os << " prompt=" << prompt;
  }
  return os.str();
}

// --- Engine ------------------------------------------------------------------------------------------------
Engine::Engine(std::unique_ptr<Target> target, const EngineSetup& setup, Fault bookkeeping_fault)
    : target_(std::move(target)), setup_(setup), fault_(bookkeeping_fault) {
  setup_.validate();
  target_->setup(setup_);
}

namespace {
std::vector<SequenceInputs> empty_layers(const ModelConfig& cfg) {
  std::vector<SequenceInputs> v(static_cast<std::size_t>(cfg.num_layers));
  for (auto& x : v) x.validate(cfg);
  return v;
}
}  // namespace

std::vector<std::vector<float>> Engine::execute(const Cmd& c) {
  const auto& cfg = setup_.cfg;
  last_written_.clear();
  last_kept_.clear();
  last_rows_.clear();
  auto slot_in_use = [&](std::int32_t s) {
    for (const auto& [id, r] : requests_)
      if (r.slot == s) return true;
    return false;
  };
  auto check_slot = [&](std::int32_t s) {
    require(s >= 0 && s < setup_.num_slots, "cmd.slot", "slot ", s, " outside [0, ", setup_.num_slots, ")");
    require(!slot_in_use(s), "cmd.slot", "slot ", s, " is in use");
  };
  auto get = [&](std::int32_t id) -> Request& {
    auto it = requests_.find(id);
    require(it != requests_.end(), "cmd.req", "unknown request ", id);
    return it->second;
  };
  auto start_fresh = [&](Request& r, std::int32_t slot, const std::vector<SequenceInputs>& extra) {
    // Invalidate the private state: re-prefill the retained history (+ new tokens) from a zero state.
    target_->allocate(slot);
    r.slot = slot;
    r.finished = false;
    std::vector<SequenceInputs> pend = empty_layers(cfg);
    for (std::int32_t l = 0; l < cfg.num_layers; ++l) {
      pend[static_cast<std::size_t>(l)] = SequenceInputs::concat(cfg, r.history[static_cast<std::size_t>(l)],
                                                                 r.pending[static_cast<std::size_t>(l)]);
      if (!extra.empty())
        pend[static_cast<std::size_t>(l)] =
            SequenceInputs::concat(cfg, pend[static_cast<std::size_t>(l)], extra[static_cast<std::size_t>(l)]);
    }
    r.pending = pend;
    r.history = empty_layers(cfg);
    r.segments.clear();
    r.pending_fresh = true;
  };

  switch (c.kind) {
    case Cmd::Kind::Admit: {
      require(!requests_.count(c.req), "cmd.req", "request ", c.req, " already exists");
      check_slot(c.slot);
      require(c.prompt >= 1, "cmd.prompt", "must be >= 1");
      Request r;
      r.history = empty_layers(cfg);
      r.pending = empty_layers(cfg);
      std::vector<SequenceInputs> prompt;
      for (std::int32_t l = 0; l < cfg.num_layers; ++l) prompt.push_back(token_inputs(cfg, l, c.prompt, c.seed));
      start_fresh(r, c.slot, prompt);
      requests_[c.req] = std::move(r);
      return {};
    }
    case Cmd::Kind::Finish: {
      Request& r = get(c.req);
      require(r.slot != kPadSlot && !r.finished, "cmd.req", "request ", c.req, " is not running");
      r.finished = true;
      r.slot = kPadSlot;
      return {};
    }
    case Cmd::Kind::Continue: {
      Request& r = get(c.req);
      require(r.finished, "cmd.req", "request ", c.req, " is not finished");
      check_slot(c.slot);
      std::vector<SequenceInputs> turn;
      for (std::int32_t l = 0; l < cfg.num_layers; ++l) turn.push_back(token_inputs(cfg, l, c.prompt, c.seed));
      start_fresh(r, c.slot, turn);
      return {};
    }
    case Cmd::Kind::Copy: {
      Request& src = get(c.req);
      require(src.slot != kPadSlot && !src.finished, "cmd.req", "request ", c.req, " is not running");
      require(src.pending[0].T == 0, "cmd.req", "request ", c.req, " is still prefilling");
      require(!requests_.count(c.req2), "cmd.req2", "request ", c.req2, " already exists");
      check_slot(c.slot);
      target_->allocate(c.slot);
      target_->copy_slot(src.slot, c.slot);
      Request dst = src;
      dst.slot = c.slot;
      requests_[c.req2] = dst;
      last_written_ = {c.slot};
      return {};
    }
    case Cmd::Kind::Preempt: {
      Request& r = get(c.req);
      require(r.slot != kPadSlot && !r.finished, "cmd.req", "request ", c.req, " is not running");
      r.slot = kPadSlot;  // the slot is freed; history (and any pending prompt) is kept for re-prefill
      return {};
    }
    case Cmd::Kind::Resume: {
      Request& r = get(c.req);
      require(r.slot == kPadSlot && !r.finished, "cmd.req", "request ", c.req, " is not preempted");
      check_slot(c.slot);
      start_fresh(r, c.slot, {});
      return {};
    }
    case Cmd::Kind::Step: break;
  }

  // --- Step: build the batch (rows in command order, PAD rows inserted), pack the tokens -------------------
  std::vector<TargetRow> rows;
  std::vector<std::int32_t> row_req;  // request id per row, -1 for PAD
  std::vector<SequenceInputs> packed = empty_layers(cfg);
  std::vector<std::vector<SequenceInputs>> row_tokens;  // [row][layer]
  std::set<std::int32_t> seen;
  int pads_added = 0;
  auto add_pad = [&] {
    // Padding rows carry dummy tokens like CUDA-graph padding of spec rows: T = 1 .. max_T (cycling).
    const std::int32_t T = 1 + (pads_added++ % setup_.max_T);
    TargetRow t;
    t.row = BatchRow{kPadSlot, kPadSlot, T, packed[0].T, T};
    std::vector<SequenceInputs> tok;
    for (std::int32_t l = 0; l < cfg.num_layers; ++l) tok.push_back(token_inputs(cfg, l, T, 0xfadull));
    for (std::int32_t l = 0; l < cfg.num_layers; ++l)
      packed[static_cast<std::size_t>(l)] = SequenceInputs::concat(cfg, packed[static_cast<std::size_t>(l)], tok[static_cast<std::size_t>(l)]);
    rows.push_back(t);
    row_req.push_back(-1);
    row_tokens.push_back(tok);
  };
  for (std::size_t i = 0; i < c.rows.size(); ++i) {
    for (auto p : c.pad_at)
      if (p == static_cast<std::int32_t>(i)) add_pad();
    const RowSpec& rs = c.rows[i];
    require(seen.insert(rs.req).second, "cmd.rows", "request ", rs.req, " appears twice in one step");
    Request& r = get(rs.req);
    require(r.slot != kPadSlot && !r.finished, "cmd.rows", "request ", rs.req, " is not running");
    TargetRow t;
    std::vector<SequenceInputs> tok;
    if (r.pending[0].T > 0) {  // prefill chunk
      const std::int32_t n = std::min(std::max(rs.T, 1), r.pending[0].T);
      for (std::int32_t l = 0; l < cfg.num_layers; ++l) tok.push_back(r.pending[static_cast<std::size_t>(l)].slice(cfg, 0, n));
      t.kind = RowKind::Prefill;
      t.fresh = r.pending_fresh;
      t.row = BatchRow{r.slot, r.slot, n, packed[0].T, n};
    } else {
      require(rs.T >= 1 && rs.T <= setup_.max_T, "cmd.rows.T", "is ", rs.T, ", outside [1, max_T=", setup_.max_T, "]");
      require(rs.accepted >= 0 && rs.accepted <= rs.T, "cmd.rows.accepted", "is ", rs.accepted, ", outside [0, T=",
              rs.T, "]");
      require(rs.stop_at >= 0 && rs.stop_at <= rs.accepted, "cmd.rows.stop_at", "is ", rs.stop_at,
              ", outside [0, accepted=", rs.accepted, "]");
      for (std::int32_t l = 0; l < cfg.num_layers; ++l) tok.push_back(token_inputs(cfg, l, rs.T, rs.seed));
      t.kind = RowKind::Verify;
      t.row = BatchRow{r.slot, r.slot, rs.T, packed[0].T, rs.accepted};
    }
    for (std::int32_t l = 0; l < cfg.num_layers; ++l)
      packed[static_cast<std::size_t>(l)] = SequenceInputs::concat(cfg, packed[static_cast<std::size_t>(l)], tok[static_cast<std::size_t>(l)]);
    rows.push_back(t);
    row_req.push_back(rs.req);
    row_tokens.push_back(tok);
  }
  for (auto p : c.pad_at)
    if (p >= static_cast<std::int32_t>(c.rows.size())) add_pad();

  std::vector<BatchRow> plain;
  for (const auto& t : rows) plain.push_back(t.row);
  validate_batch(plain, PoolGeometry{cfg.num_layers, setup_.num_slots, setup_.slot_stride}, cfg, setup_.max_T,
                 packed[0].T, true);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    last_rows_.push_back(PackedRow{row_req[i], rows[i].row.token_offset, rows[i].row.T});
    if (rows[i].row.slot != kPadSlot) last_written_.push_back(rows[i].row.slot);
  }

  auto out = target_->step(rows, packed);

  // Accepted-length bookkeeping: an early stop at accepted token s trims the commit to s tokens.
  std::vector<std::int32_t> commit_n(rows.size(), 0);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (row_req[i] < 0 || rows[i].kind != RowKind::Verify) continue;
    const RowSpec* rs = nullptr;
    for (const auto& x : c.rows)
      if (x.req == row_req[i]) rs = &x;
    std::int32_t n = rs->accepted;
    if (rs->stop_at > 0 && fault_ != Fault::EarlyStopCommitsWholeRun) n = std::min(n, rs->stop_at);
    commit_n[i] = n;
    rows[i].row.accepted = n;
    if (n == 0) last_kept_.push_back(rows[i].row.slot);
  }
  target_->commit(rows);

  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (row_req[i] < 0) continue;
    Request& r = requests_.at(row_req[i]);
    const std::int32_t n = rows[i].kind == RowKind::Prefill ? rows[i].row.T : commit_n[i];
    for (std::int32_t l = 0; l < cfg.num_layers; ++l) {
      auto& h = r.history[static_cast<std::size_t>(l)];
      h = SequenceInputs::concat(cfg, h, row_tokens[i][static_cast<std::size_t>(l)].slice(cfg, 0, n));
      if (rows[i].kind == RowKind::Prefill) {
        auto& p = r.pending[static_cast<std::size_t>(l)];
        p = p.slice(cfg, n, p.T - n);
      }
    }
    if (rows[i].kind == RowKind::Prefill) r.pending_fresh = false;
    if (n > 0) r.segments.push_back(n);
    if (rows[i].kind == RowKind::Verify) {
      const RowSpec* rs = nullptr;
      for (const auto& x : c.rows)
        if (x.req == row_req[i]) rs = &x;
      if (rs->stop_at > 0) {  // the stop token was accepted: the request ends here
        r.finished = true;
        r.slot = kPadSlot;
      }
    }
  }
  return out;
}

std::vector<float> Engine::recompute(std::int32_t req, std::int32_t layer) const {
  const auto& cfg = setup_.cfg;
  const Request& r = requests_.at(req);
  const auto& h = r.history[static_cast<std::size_t>(layer)];
  std::vector<float> S(static_cast<std::size_t>(cfg.state_elems()), 0.0f), o;
  std::int32_t t0 = 0;
  for (auto n : r.segments) {
    run_recurrent<float>(cfg, setup_.params[static_cast<std::size_t>(layer)], h.slice(cfg, t0, n), S, o);
    round_to_state_dtype(cfg, S);
    t0 += n;
  }
  require(t0 == h.T, "history", "segments cover ", t0, " of ", h.T, " tokens");
  return S;
}

// --- Judge -------------------------------------------------------------------------------------------------
Judge::Judge(const EngineSetup& setup, const std::string& target_kind, Fault fault)
    : oracle_(make_target("full_state"), setup),
      sut_(make_target(target_kind, fault), setup, fault == Fault::EarlyStopCommitsWholeRun ? fault : Fault::None) {}

Tolerance storage_tolerance(double scale) { return Tolerance::allclose(std::ldexp(std::max(1.0, scale), -6), 0.0); }

namespace {
double max_abs(const std::vector<float>& x) {
  double m = 0;
  for (float e : x)
    if (std::isfinite(e)) m = std::max(m, static_cast<double>(std::fabs(e)));
  return m;
}
bool same_bits(const float* a, const float* b, std::size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }
}  // namespace

std::string Judge::apply(const Cmd& c) {
  executed_.push_back(c);
  const auto& cfg = oracle_.setup().cfg;
  const std::int32_t L = cfg.num_layers;
  std::vector<std::vector<float>> before_o, before_s;
  for (std::int32_t l = 0; l < L; ++l) {
    before_o.push_back(oracle_.target().pool(l));
    before_s.push_back(sut_.target().pool(l));
  }
  const auto out_o = oracle_.execute(c);  // an Error here means the command itself is invalid: propagate
  std::vector<std::vector<float>> out_s;
  try {
    out_s = sut_.execute(c);
  } catch (const Error& e) {
    return std::string("implementation raised an error the oracle did not: ") + e.what();
  }
  const bool exact = sut_.target().bit_exact();
  if (c.kind == Cmd::Kind::Step) {
    if (out_s.size() != out_o.size()) return "implementation returned outputs for " + std::to_string(out_s.size()) +
                                             " layers, expected " + std::to_string(out_o.size());
    for (std::size_t l = 0; l < out_o.size(); ++l)
      if (out_s[l].size() != out_o[l].size())
        return "layer " + std::to_string(l) + ": implementation returned " + std::to_string(out_s[l].size()) +
               " output values, expected " + std::to_string(out_o[l].size());
  }
  std::ostringstream why;
  auto cmp = [&](const std::vector<float>& ref, const std::vector<float>& got, bool state) {
    return compare(ref, got, exact ? Tolerance::exact() : sut_.target().tolerance(max_abs(ref), state));
  };

  // 1. Outputs: real rows equal, PAD rows exactly zero (on both sides).
  if (c.kind == Cmd::Kind::Step) {
    for (std::int32_t l = 0; l < L; ++l) {
      const std::size_t per = static_cast<std::size_t>(cfg.HV) * cfg.V;
      for (const auto& pr : oracle_.last_rows()) {
        const std::size_t b = static_cast<std::size_t>(pr.offset) * per, n = static_cast<std::size_t>(pr.T) * per;
        std::vector<float> ro(out_o[l].begin() + b, out_o[l].begin() + b + n);
        std::vector<float> so(out_s[l].begin() + b, out_s[l].begin() + b + n);
        if (pr.req < 0) {
          const std::vector<float> zeros(n, 0.0f);
          if (!bitwise_equal(ro, zeros) || !bitwise_equal(so, zeros)) {
            why << "layer " << l << ": PAD row outputs are not zero (oracle " << compare(zeros, ro, Tolerance::exact()).str()
                << "; implementation " << compare(zeros, so, Tolerance::exact()).str() << ")";
            return why.str();
          }
          continue;
        }
        const auto rep = cmp(ro, so, false);
        if (!rep.ok) {
          why << "layer " << l << ", request " << pr.req << ": outputs differ: " << rep.str();
          return why.str();
        }
      }
    }
  }
  // 2. Request tables agree (residency, slots, committed token counts).
  const auto& ro = oracle_.requests();
  const auto& rs = sut_.requests();
  for (const auto& [id, r] : ro) {
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
  // 3. Committed states of resident requests, and the oracle against its own recomputation.
  for (const auto& [id, r] : ro) {
    if (r.slot == kPadSlot) continue;
    for (std::int32_t l = 0; l < L; ++l) {
      const auto so = oracle_.target().committed_state(l, r.slot);
      if (r.pending[0].T == 0 || !r.pending_fresh) {
        const auto rc = compare(oracle_.recompute(id, l), so, Tolerance::exact());
        if (!rc.ok) {
          why << "oracle self-check failed: request " << id << " layer " << l << ": " << rc.str();
          return why.str();
        }
      }
      if (r.pending_fresh) continue;  // allocated, not prefilled yet: the slot holds garbage by design
      const auto rep = cmp(so, sut_.target().committed_state(l, r.slot), true);
      if (!rep.ok) {
        why << "request " << id << " (slot " << r.slot << ") layer " << l << ": committed state differs: " << rep.str();
        return why.str();
      }
    }
  }
  // 4. Untouched slots and gaps stay bitwise unchanged; n = 0 commits leave their slot's bytes unchanged.
  const std::int64_t elems = cfg.state_elems();
  const std::int64_t stride = oracle_.setup().slot_stride ? oracle_.setup().slot_stride : elems;
  for (int side = 0; side < 2; ++side) {
    const Engine& e = side == 0 ? oracle_ : sut_;
    const auto& before = side == 0 ? before_o : before_s;
    std::set<std::int32_t> allowed(e.last_written().begin(), e.last_written().end());
    std::set<std::int32_t> kept;
    if (e.target().name() != "ring") kept.insert(e.last_kept().begin(), e.last_kept().end());
    for (std::int32_t l = 0; l < L; ++l) {
      const auto now = e.target().pool(l);
      for (std::int32_t s = 0; s < oracle_.setup().num_slots; ++s) {
        const float* a = before[l].data() + s * stride;
        const float* b = now.data() + s * stride;
        if (!same_bits(a + elems, b + elems, static_cast<std::size_t>(stride - elems)))
          return std::string(side ? "implementation" : "oracle") + ": gap after slot " + std::to_string(s) +
                 " (layer " + std::to_string(l) + ") was written";
        if ((!allowed.count(s) || kept.count(s)) && !same_bits(a, b, static_cast<std::size_t>(elems)))
          return std::string(side ? "implementation" : "oracle") + ": slot " + std::to_string(s) + " (layer " +
                 std::to_string(l) + ") changed although the command " +
                 (kept.count(s) ? "committed n = 0 for it" : "must not touch it") + " [" + c.str() + "]";
      }
    }
  }
  return {};
}

}  // namespace replayssm::ref
