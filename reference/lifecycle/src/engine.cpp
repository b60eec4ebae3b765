// The lifecycle engine: one function per command, the step's packing and the accepted-length bookkeeping.
#include "replayssm/lifecycle/engine.hpp"

#include <algorithm>
#include <set>

#include "replayssm/error.hpp"
#include "replayssm/recurrence/inputs.hpp"
#include "replayssm/rng.hpp"

namespace replayssm::ref {

SequenceInputs token_inputs(const ModelConfig& cfg, std::int32_t layer, std::int32_t T, std::uint64_t seed,
                            GateRange gates) {
  return random_inputs(cfg, T, derive_seed(seed, 1000 + static_cast<std::uint64_t>(layer)), gates);
}

namespace {
std::vector<SequenceInputs> empty_layers(const ModelConfig& cfg) {
  std::vector<SequenceInputs> v(static_cast<std::size_t>(cfg.num_layers));
  for (auto& x : v) x.validate(cfg);
  return v;
}
// Appends y to x layer by layer.
void append(const ModelConfig& cfg, std::vector<SequenceInputs>& x, const std::vector<SequenceInputs>& y) {
  for (std::size_t l = 0; l < x.size(); ++l) x[l] = SequenceInputs::concat(cfg, x[l], y[l]);
}
bool running(const Engine::Request& r) { return r.slot != kPadSlot && !r.finished; }
// Seed of the dummy tokens of PAD rows.
constexpr std::uint64_t kPadSeed = 0xfadull;
}  // namespace

Engine::Engine(std::unique_ptr<Target> target, const EngineSetup& setup, Fault bookkeeping_fault)
    : target_(std::move(target)), setup_(setup), fault_(bookkeeping_fault) {
  setup_.validate();
  require(!setup_.conv || target_->conv_state(), "setup.conv", "target '", target_->name(),
          "' keeps no conv state: a setup with the conv component needs one that claims conv_state");
  target_->setup(setup_);
}

Engine::Request& Engine::request(std::int32_t id) {
  auto it = requests_.find(id);
  require(it != requests_.end(), "cmd.req", "unknown request ", id);
  return it->second;
}

void Engine::check_free_slot(std::int32_t s) const {
  require(s >= 0 && s < setup_.num_slots, "cmd.slot", "slot ", s, " outside [0, ", setup_.num_slots, ")");
  require(s != setup_.reserved_slot(), "cmd.slot", "slot ", s, " is reserved for PAD rows (pad_convention ",
          to_string(setup_.pad_convention), ")");
  for (const auto& [id, r] : requests_) require(r.slot != s, "cmd.slot", "slot ", s, " is in use");
}

std::vector<SequenceInputs> Engine::new_tokens(std::int32_t T, std::uint64_t seed) const {
  std::vector<SequenceInputs> tok;
  for (std::int32_t l = 0; l < setup_.cfg.num_layers; ++l) tok.push_back(token_inputs(setup_.cfg, l, T, seed, setup_.gates));
  return tok;
}

void Engine::start_fresh(Request& r, std::int32_t slot, const std::vector<SequenceInputs>& extra) {
  const auto& cfg = setup_.cfg;
  target_->allocate(slot);
  r.slot = slot;
  r.finished = false;
  std::vector<SequenceInputs> pend = r.history;
  append(cfg, pend, r.pending);
  if (!extra.empty()) append(cfg, pend, extra);
  r.pending = pend;
  r.history = empty_layers(cfg);
  r.segments.clear();
  r.pending_fresh = true;
}

void Engine::clear_last() {
  last_written_.clear();
  last_kept_.clear();
  last_read_only_.clear();
  last_rows_.clear();
  last_target_rows_.clear();
  last_inputs_.clear();
  last_conv_outputs_.clear();
  last_self_check_.clear();
  step_writes_ = StepWrites{};
}

std::vector<std::vector<float>> Engine::execute(const Cmd& c) {
  if (c.kind == Cmd::Kind::Step) {
    auto out = begin_step(c);
    finish_step();
    return out;
  }
  require(!in_step_, "cmd", "a step is in progress: only its commit (finish_step) may follow");
  clear_last();
  switch (c.kind) {
    case Cmd::Kind::Admit: admit(c); return {};
    case Cmd::Kind::Finish: finish(c); return {};
    case Cmd::Kind::Continue: continue_turn(c); return {};
    case Cmd::Kind::Copy: copy(c); return {};
    case Cmd::Kind::Preempt: preempt(c); return {};
    case Cmd::Kind::Resume: resume(c); return {};
    case Cmd::Kind::Step: break;  // handled above
    case Cmd::Kind::Capture: capture(c); return {};
    case Cmd::Kind::SelfCheck: self_check(c); return {};
  }
  fail("cmd.kind", "unknown command kind");
}

void Engine::admit(const Cmd& c) {
  require(!requests_.count(c.req), "cmd.req", "request ", c.req, " already exists");
  check_free_slot(c.slot);
  require(c.prompt >= 1, "cmd.prompt", "must be >= 1");
  Request r;
  r.history = empty_layers(setup_.cfg);
  r.pending = empty_layers(setup_.cfg);
  start_fresh(r, c.slot, new_tokens(c.prompt, c.seed));
  requests_[c.req] = std::move(r);
}

void Engine::capture(const Cmd& c) {
  require(target_->captures(), "cmd.kind", "target ", target_->name(), " does not capture CUDA-graph buckets");
  require(c.graph >= 1 && c.graph <= setup_.max_rows(), "cmd.graph", "is ", c.graph, ", outside [1, max_rows = ",
          setup_.max_rows(), "]");
  require(c.capture_T >= 1 && c.capture_T <= setup_.max_T, "cmd.T", "is ", c.capture_T, ", outside [1, max_T = ",
          setup_.max_T, "]");
  target_->capture(c.graph, c.capture_T);
  captured_.insert({c.graph, c.capture_T});
  // Nothing is written, except what any step may write: the dedicated pad slot.
  if (setup_.pad_convention == PadConvention::PadSlot) last_written_.push_back(setup_.pad_sentinel());
}

void Engine::finish(const Cmd& c) {
  Request& r = request(c.req);
  require(running(r), "cmd.req", "request ", c.req, " is not running");
  r.finished = true;
  r.slot = kPadSlot;
}

void Engine::continue_turn(const Cmd& c) {
  Request& r = request(c.req);
  require(r.finished, "cmd.req", "request ", c.req, " is not finished");
  check_free_slot(c.slot);
  start_fresh(r, c.slot, new_tokens(c.prompt, c.seed));
}

void Engine::copy(const Cmd& c) {
  Request& src = request(c.req);
  require(running(src), "cmd.req", "request ", c.req, " is not running");
  require(src.pending[0].T == 0, "cmd.req", "request ", c.req, " is still prefilling");
  require(!requests_.count(c.req2), "cmd.req2", "request ", c.req2, " already exists");
  check_free_slot(c.slot);
  target_->allocate(c.slot);
  target_->copy_slot(src.slot, c.slot);
  Request dst = src;
  dst.slot = c.slot;
  requests_[c.req2] = dst;
  last_written_ = {c.slot};
}

void Engine::preempt(const Cmd& c) {
  Request& r = request(c.req);
  require(running(r), "cmd.req", "request ", c.req, " is not running");
  r.slot = kPadSlot;  // the slot is freed; history (and any pending prompt) is kept for re-prefill
}

void Engine::resume(const Cmd& c) {
  Request& r = request(c.req);
  require(r.slot == kPadSlot && !r.finished, "cmd.req", "request ", c.req, " is not preempted");
  check_free_slot(c.slot);
  start_fresh(r, c.slot, {});
}

// --- step ----------------------------------------------------------------------------------------------------
Engine::PackedStep Engine::pack_step(const Cmd& c) const {
  const auto& cfg = setup_.cfg;
  PackedStep s;
  s.packed = empty_layers(cfg);
  int pads_added = 0;
  auto add = [&](const TargetRow& row, const RowSpec* spec, std::vector<SequenceInputs> tok) {
    append(cfg, s.packed, tok);
    s.rows.push_back(row);
    s.spec.push_back(spec);
    s.tokens.push_back(std::move(tok));
  };
  // Padding rows carry dummy tokens like CUDA-graph padding of spec rows: T = 1 .. max_T (cycling), or the
  // step's one width under step_mix.one_width.
  std::int32_t width = step_width(c);
  if (c.replay_T > 0) {  // a replayed bucket: every row, PAD and graph tail too, is replay_T wide
    check_replay(c);
    width = c.replay_T;
  }
  auto add_pad = [&] {
    const std::int32_t T = width > 0 ? width : 1 + (pads_added++ % setup_.max_T);
    TargetRow t;
    t.row = BatchRow{kPadSlot, kPadSlot, T, s.packed[0].T, T};
    add(t, nullptr, new_tokens(T, kPadSeed));
  };
  std::set<std::int32_t> seen;
  for (std::size_t i = 0; i < c.rows.size(); ++i) {
    for (auto p : c.pad_at)
      if (p == static_cast<std::int32_t>(i)) add_pad();
    const RowSpec& rs = c.rows[i];
    require(seen.insert(rs.req).second, "cmd.rows", "request ", rs.req, " appears twice in one step");
    const auto it = requests_.find(rs.req);
    require(it != requests_.end(), "cmd.req", "unknown request ", rs.req);
    const Request& r = it->second;
    require(running(r), "cmd.rows", "request ", rs.req, " is not running");
    TargetRow t;
    std::vector<SequenceInputs> tok;
    require(r.pending[0].T == 0 || rs.to_slot < 0, "cmd.rows.to_slot", "request ", rs.req,
            " is prefilling: only verify rows commit out of place");
    if (r.pending[0].T > 0) {  // prefill chunk: the whole chunk is committed
      const std::int32_t n = std::min(std::max(rs.T, 1), r.pending[0].T);
      for (const auto& p : r.pending) tok.push_back(p.slice(cfg, 0, n));
      t.kind = RowKind::Prefill;
      t.fresh = r.pending_fresh;
      t.row = BatchRow{r.slot, r.slot, n, s.packed[0].T, n};
    } else {
      require(rs.T >= 1 && rs.T <= setup_.max_T, "cmd.rows.T", "is ", rs.T, ", outside [1, max_T=", setup_.max_T, "]");
      require(rs.accepted >= 0 && rs.accepted <= rs.T, "cmd.rows.accepted", "is ", rs.accepted, ", outside [0, T=",
              rs.T, "]");
      require(rs.stop_at >= 0 && rs.stop_at <= rs.accepted, "cmd.rows.stop_at", "is ", rs.stop_at,
              ", outside [0, accepted=", rs.accepted, "]");
      tok = new_tokens(rs.T, rs.seed);
      t.kind = RowKind::Verify;
      if (rs.to_slot >= 0) check_free_slot(rs.to_slot);  // an out-of-place commit's destination
      t.row = BatchRow{r.slot, rs.to_slot >= 0 ? rs.to_slot : r.slot, rs.T, s.packed[0].T, rs.accepted};
    }
    add(t, &rs, std::move(tok));
  }
  for (auto p : c.pad_at)
    if (p >= static_cast<std::int32_t>(c.rows.size())) add_pad();
  if (c.graph > 0) add_graph_tail(c, s, width);
  std::vector<BatchRow> plain;
  for (const auto& t : canonical_rows(s.rows, setup_)) plain.push_back(t.row);
  validate_batch(plain, setup_.pool_geometry(), cfg, setup_.max_T, s.packed[0].T, true);
  return s;
}

std::int32_t Engine::step_width(const Cmd& c) const {
  const StepMix& mix = setup_.step_mix;
  if (mix.any()) return 0;
  std::int32_t width = 0, prefill = 0, verify = 0;
  for (const auto& rs : c.rows) {
    const auto it = requests_.find(rs.req);
    require(it != requests_.end(), "cmd.req", "unknown request ", rs.req);
    const std::int32_t pending = it->second.pending[0].T;
    const std::int32_t T = pending > 0 ? std::min(std::max(rs.T, 1), pending) : rs.T;  // a chunk's own length
    ++(pending > 0 ? prefill : verify);
    require(!mix.one_width || width == 0 || T == width, "cmd.rows.T", "request ", rs.req, "'s row is ", T,
            " tokens wide beside rows of ", width, ", and the setup's step_mix takes one width per step");
    if (width == 0) width = T;
  }
  require(!mix.prefill_apart || prefill == 0 || verify == 0, "cmd.rows", "mixes ", prefill, " prefill chunk(s) with ",
          verify, " verify row(s), and the setup's step_mix keeps prefill apart");
  require(!mix.prefill_apart || prefill == 0 || (c.pad_at.empty() && c.graph == 0),
          c.graph > 0 ? "cmd.graph" : "cmd.pad_at",
          "pads a prefill step, and under the setup's step_mix (prefill_apart) PAD rows and graph padding pad verify "
          "steps only");
  if (!mix.one_width) return 0;
  return width > 0 ? width : setup_.max_T;  // an all-PAD step: full windows
}

void Engine::check_replay(const Cmd& c) const {
  require(target_->graph_replay(), "cmd.replay_T", "target ", target_->name(), " does not replay captured buckets");
  require(c.graph > 0, "cmd.replay_T", "is set on an eager step (graph = 0)");
  require(captured_.count({c.graph, c.replay_T}) > 0, "cmd.replay_T", "replays the bucket rows=", c.graph,
          " T=", c.replay_T, ", which no capture of this case recorded");
  for (const auto& rs : c.rows) {
    const auto it = requests_.find(rs.req);
    require(it != requests_.end(), "cmd.req", "unknown request ", rs.req);
    require(it->second.pending[0].T == 0, "cmd.rows", "request ", rs.req,
            " is prefilling: a replayed bucket holds verify rows only");
    require(rs.T == c.replay_T, "cmd.rows.T", "request ", rs.req, "'s row is ", rs.T,
            " tokens wide in a replay of a bucket of ", c.replay_T);
  }
}

void Engine::add_graph_tail(const Cmd& c, PackedStep& s, std::int32_t width) const {
  const auto live = static_cast<std::int32_t>(s.rows.size());
  require(c.graph >= live && c.graph <= setup_.max_rows(), "cmd.graph", "is ", c.graph, ", outside [rows = ", live,
          ", max_rows = ", setup_.max_rows(), "]");
  // The buffer of this width under one_width, else the one buffer (key 0), replays included.
  const auto buffer = graph_buffers_.find(setup_.step_mix.one_width ? width : 0);
  for (std::int32_t i = live; i < c.graph; ++i) {
    TargetRow t;
    if (c.stale_tail && buffer != graph_buffers_.end()) {
      t = buffer->second[static_cast<std::size_t>(i)];
      if (c.replay_T > 0) {  // a replayed bucket's buffer rows have its shape: stale slot ids and counts
        t.row.T = width;
        t.row.accepted = std::min(t.row.accepted, width);
        t.kind = RowKind::Verify;
        t.fresh = false;
      }
    } else {  // a PAD sentinel row, T as the captured shape has it
      const std::int32_t T = width > 0 ? width : 1 + (i % setup_.max_T);
      t.row = BatchRow{kPadSlot, kPadSlot, T, 0, T};
    }
    t.graph_tail = true;
    t.row.token_offset = s.packed[0].T;  // dummy tokens after the live ones (the captured input buffer)
    auto tok = new_tokens(t.row.T, kPadSeed);
    append(setup_.cfg, s.packed, tok);
    s.rows.push_back(t);
    s.spec.push_back(nullptr);
    s.tokens.push_back(std::move(tok));
  }
}

std::vector<TargetRow> Engine::wire_rows(const std::vector<TargetRow>& rows) const {
  std::vector<TargetRow> w = rows;
  const std::int32_t sentinel = setup_.pad_sentinel();
  for (auto& t : w) {
    if (t.row.slot == kPadSlot) t.row.slot = sentinel;
    if (t.row.write_slot == kPadSlot) t.row.write_slot = sentinel;
  }
  return w;
}

std::int32_t Engine::commit_length(const RowSpec& rs) const {
  // An early stop at accepted token s trims the commit to s tokens.
  if (rs.stop_at > 0 && fault_ == Fault::StopTokenPlusOne) return std::min(rs.accepted, rs.stop_at + 1);
  if (rs.stop_at > 0 && fault_ != Fault::EarlyStopCommitsWholeRun) return std::min(rs.accepted, rs.stop_at);
  return rs.accepted;
}

std::vector<std::vector<float>> Engine::begin_step(const Cmd& c) {
  require(c.kind == Cmd::Kind::Step, "cmd.kind", "begin_step takes a step command");
  require(!in_step_, "cmd", "a step is in progress: only its commit (finish_step) may follow");
  clear_last();
  PackedStep s = pack_step(c);
  for (std::size_t i = 0; i < s.rows.size(); ++i) {
    const BatchRow& b = s.rows[i].row;
    PackedRow pr{s.spec[i] ? s.spec[i]->req : -1, b.token_offset, b.T,
                 s.spec[i] != nullptr && s.rows[i].kind == RowKind::Prefill};
    pr.graph_tail = s.rows[i].graph_tail;
    pr.stale_tail = s.rows[i].graph_tail && b.slot != kPadSlot;
    pr.out_of_place = s.spec[i] != nullptr && b.write_slot != b.slot;
    last_rows_.push_back(pr);
    if (s.spec[i]) last_written_.push_back(b.write_slot);  // an out-of-place row's read slot is not written
    if (s.spec[i] && b.write_slot != b.slot) target_->allocate(b.write_slot);  // the destination is (re)allocated
  }
  if (setup_.pad_convention == PadConvention::PadSlot) last_written_.push_back(setup_.pad_sentinel());
  last_target_rows_ = canonical_rows(s.rows, setup_);
  for (auto& r : last_target_rows_)
    if (r.kind == RowKind::Verify) r.row.accepted = 0;  // not known at step time
  step_writes_ = step_writes(last_target_rows_, setup_);
  if (c.replay_T > 0) target_->replaying(c.graph, c.replay_T);
  auto out = target_->step(wire_rows(s.rows), s.packed);
  last_inputs_ = s.packed;
  if (setup_.conv) last_conv_outputs_ = target_->conv_step(wire_rows(s.rows), s.packed);
  in_step_ = std::move(s);
  in_step_cmd_ = c;
  return out;
}

void Engine::finish_step() {
  require(in_step_.has_value(), "cmd", "no step in progress to commit");
  PackedStep s = std::move(*in_step_);
  in_step_.reset();
  const Cmd& c = in_step_cmd_;
  for (std::size_t i = 0; i < s.rows.size(); ++i)
    if (s.spec[i] && s.rows[i].kind == RowKind::Verify) {
      s.rows[i].row.accepted = commit_length(*s.spec[i]);
      last_rows_[i].accepted = s.rows[i].row.accepted;
      last_rows_[i].early_stop = s.spec[i]->stop_at > 0;
    }
  last_target_rows_ = canonical_rows(s.rows, setup_);
  const CommitKept kept = commit_kept(last_target_rows_);  // call_rules.hpp
  last_kept_ = kept.at_zero;
  last_read_only_ = kept.read_only;
  if (c.replay_T > 0) target_->replaying(c.graph, c.replay_T);
  target_->commit(wire_rows(s.rows));
  if (setup_.conv) target_->conv_commit(wire_rows(s.rows));
  record_commits(s);
  if (c.graph > 0) {  // the captured buffer keeps what this step wrote into its first c.graph rows
    const std::int32_t width = setup_.step_mix.one_width ? s.rows.front().row.T : 0;
    auto& buffer = graph_buffers_[width];
    if (buffer.empty())
      for (std::int32_t i = 0; i < setup_.max_rows(); ++i) {
        const std::int32_t T = width > 0 ? width : 1 + (i % setup_.max_T);
        buffer.push_back(TargetRow{BatchRow{kPadSlot, kPadSlot, T, 0, T}, RowKind::Verify, false, false});
      }
    for (std::size_t i = 0; i < s.rows.size(); ++i) {
      buffer[i] = s.rows[i];
      buffer[i].graph_tail = false;
    }
  }
}

void Engine::record_commits(const PackedStep& s) {
  const auto& cfg = setup_.cfg;
  for (std::size_t i = 0; i < s.rows.size(); ++i) {
    if (!s.spec[i]) continue;
    const TargetRow& t = s.rows[i];
    Request& r = requests_.at(s.spec[i]->req);
    const bool prefill = t.kind == RowKind::Prefill;
    const std::int32_t n = prefill ? t.row.T : t.row.accepted;
    for (std::size_t l = 0; l < r.history.size(); ++l) {
      r.history[l] = SequenceInputs::concat(cfg, r.history[l], s.tokens[i][l].slice(cfg, 0, n));
      if (prefill) r.pending[l] = r.pending[l].slice(cfg, n, r.pending[l].T - n);
    }
    if (prefill) r.pending_fresh = false;
    if (n > 0) r.segments.push_back(n);
    if (n > 0 && t.row.write_slot != t.row.slot) r.slot = t.row.write_slot;  // out of place: the request moves
    if (!prefill && s.spec[i]->stop_at > 0 && fault_ != Fault::RequestStaysAfterStop) {  // the stop token was accepted: the request ends here
      r.finished = true;
      r.slot = kPadSlot;
    }
  }
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

}  // namespace replayssm::ref
