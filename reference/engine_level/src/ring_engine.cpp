// The project's engine-level implementation on the spec-ring design (ReplaySSM design 2, vLLM / SGLang /
// ATOM style): every slot holds a checkpoint (the pool), a ring of corrected-update records (u, k, g) per
// layer and one set of cursors (base, write_pos, is_flush; core step.hpp). The cursors live here, in the
// engine under test: a verify reads the checkpoint and the live records (folding them into the checkpoint
// first on a flush step, spec_ring_verify), the commit advances the cursors by the ring's own rule
// (spec_ring_commit), in the step or at the start of the next one. Slots are in place only (records and
// cursors live with one slot). Bookkeeping as the reference engine's: LIFO free list, a persistent batch
// condensed when a request leaves, trimming at the stop token and the max_new cap.
//
// Prefix snapshots (EngineOptions::block, request_engine.hpp): a snapshot is a forced flush into the
// request's snapshot slot — the checkpoint with the live records and the window's records up to the block
// boundary folded in, rounded to the state dtype — so that it is a full state; a snapshot hit restores it into
// a private slot whose ring starts empty (cursors reset: the donor's records are not live history of the
// copy). A migration moves the checkpoint, every ring record and the cursors. The math is spec_ring.hpp's
// one definition; the faults change only what is copied or folded.
#include <algorithm>
#include <optional>

#include "replayssm/error.hpp"
#include "replayssm/lifecycle/engine.hpp"
#include "replayssm/engine_level/request_engine.hpp"
#include "replayssm/recurrence/spec_ring.hpp"
#include "layers.hpp"

namespace replayssm::ref::engine_level {

namespace {

class RingEngine : public RequestEngine {
 public:
  explicit RingEngine(EngineFault f) : fault_(f) {}
  std::string name() const override { return "ring"; }
  // Serial reconstruction of F32 records is the token step's own arithmetic; the checkpoint is rounded only
  // at flushes, so the ring equals the per-commit rounding of the truth bit for bit only with an F32 state.
  bool bit_exact() const override { return s_.base.cfg.state_dtype == DType::F32; }

  void setup(const EngineLevelSetup& s) override {
    s.validate();
    require(s.options.buffers == Buffering::InPlace, "options.buffers",
            "the spec ring commits in place (its records and cursors live with one slot)");
    s_ = s;
    const auto& b = s.base;
    geo_ = b.spec_ring;
    geo_.validate();
    require(geo_.T >= b.max_T, "ring.T", "must be >= max_T (", b.max_T, "), got ", geo_.T);
    stride_ = b.pool_geometry().stride(b.cfg);
    pools_.assign(static_cast<std::size_t>(b.cfg.num_layers),
                  std::vector<float>(static_cast<std::size_t>(b.num_slots * stride_), b.poison));
    cursors_.assign(static_cast<std::size_t>(b.num_slots), spec_ring_reset(geo_));
    records_.assign(static_cast<std::size_t>(b.num_slots),
                    std::vector<std::vector<Record>>(static_cast<std::size_t>(b.cfg.num_layers),
                                                     std::vector<Record>(static_cast<std::size_t>(geo_.physical()))));
    const std::int32_t snaps = s.options.block > 0 ? s.options.max_live : 0;
    free_.clear();
    snap_free_.clear();
    for (std::int32_t k = b.num_slots - snaps - 1; k >= 0; --k) free_.push_back(k);
    for (std::int32_t k = 0; k < snaps; ++k) snap_free_.push_back(b.num_slots - 1 - k);
    reqs_.clear();
    order_.clear();
  }

  void admit(std::int32_t req, const std::vector<SequenceInputs>& prompt, std::int32_t max_new) override {
    require(!reqs_.count(req), "admit.req", "request ", req, " already exists");
    require(max_new >= 1, "admit.max_new", "must be >= 1");
    check_inputs(prompt, "admit.prompt");
    Req r;
    r.history = empty_layers(cfg());
    r.pending = prompt;
    r.fresh = true;
    r.max_new = max_new;
    r.slot = allocate();
    reqs_[req] = std::move(r);
    order_.push_back(req);
  }

  void prefix_hit(std::int32_t req, std::int32_t from, const std::vector<SequenceInputs>& prompt,
                  std::int32_t max_new) override {
    require(max_new >= 1, "prefix_hit.max_new", "must be >= 1");
    check_inputs(prompt, "prefix_hit.prompt");
    Req& r = derive(req, from, "prefix_hit");
    r.pending = prompt;
    r.generated = 0;
    r.max_new = max_new;
  }
  void fork(std::int32_t req, std::int32_t from) override { derive(req, from, "fork"); }

  bool prefix_snapshots() const override { return true; }
  void snapshot_hit(std::int32_t req, std::int32_t from, const std::vector<SequenceInputs>& prompt,
                    std::int32_t max_new) override {
    require(!reqs_.count(req), "snapshot_hit.req", "request ", req, " already exists");
    require(max_new >= 1, "snapshot_hit.max_new", "must be >= 1");
    check_inputs(prompt, "snapshot_hit.prompt");
    const Req& src = at(from, "snapshot_hit.from");
    require(src.status == Status::Running && src.snap_slot >= 0, "snapshot_hit.from", "request ", from,
            " holds no snapshot");
    resolve(from);
    Req r;
    r.history = slice(cfg(), src.history, 0, src.snap_tokens);
    r.pending = prompt;
    r.max_new = max_new;
    r.slot = allocate();
    for (std::int32_t l = 0; l < cfg().num_layers; ++l) put(l, r.slot, get(l, src.snap_slot));
    if (fault_ == EngineFault::CowKeepsWritePos) {  // the fault: the donor's ring comes along as for a fork
      cursors_[u(r.slot)] = cursors_[u(src.slot)];
      records_[u(r.slot)] = records_[u(src.slot)];
    }
    reqs_[req] = std::move(r);
    order_.push_back(req);
  }
  std::int32_t snapshot_tokens(std::int32_t req) const override {
    const Req& r = at(req, "snapshot.req");
    require(r.status == Status::Running, "snapshot.req", "request ", req, " is not running");
    return r.snap_tokens;
  }
  std::vector<float> snapshot_state(std::int32_t req, std::int32_t layer) const override {
    const Req& r = at(req, "snapshot.req");
    require(r.status == Status::Running && r.snap_slot >= 0, "snapshot.req", "request ", req, " holds no snapshot");
    require(layer >= 0 && layer < cfg().num_layers, "snapshot.layer", "is ", layer);
    return get(layer, r.snap_slot);
  }

  bool migrates() const override { return true; }
  // The request moves to a newly allocated slot: checkpoint, every ring record and the cursors (a deferred
  // commit is keyed by request and moves with it); the old slot is freed untouched.
  void migrate(std::int32_t req) override {
    Req& r = at(req, "migrate.req");
    require(r.status == Status::Running, "migrate.req", "request ", req, " is not running");
    const std::int32_t to = allocate();
    for (std::int32_t l = 0; l < cfg().num_layers; ++l) put(l, to, get(l, r.slot));
    if (fault_ == EngineFault::MigrationDropsRingRecords) {
      cursors_[u(to)] = spec_ring_reset(geo_);  // the fault: a copy table of the pool alone
    } else {
      records_[u(to)] = records_[u(r.slot)];
      cursors_[u(to)] = cursors_[u(r.slot)];
    }
    free_.push_back(r.slot);
    r.slot = to;
  }

  std::vector<std::vector<std::vector<float>>> step(const std::vector<StepEntry>& entries,
                                                    const std::vector<std::vector<SequenceInputs>>& windows) override;

  void finish(std::int32_t req) override { release(req, Status::Finished, "finish"); }
  void preempt(std::int32_t req) override { release(req, Status::Preempted, "preempt"); }
  void resume(std::int32_t req) override {
    Req& r = at(req, "resume.req");
    require(r.status == Status::Preempted, "resume.req", "request ", req, " is not preempted");
    r.pending = concat(cfg(), r.history, r.pending);
    r.history = empty_layers(cfg());
    r.fresh = true;
    r.slot = allocate();
    r.status = Status::Running;
    order_.push_back(req);
  }

  std::map<std::int32_t, RequestStatus> requests() const override {
    std::map<std::int32_t, RequestStatus> m;
    for (const auto& [id, r] : reqs_)
      m[id] = RequestStatus{r.status, r.history[0].T + (r.deferred ? r.deferred_tokens[0].T : 0), r.pending[0].T,
                            r.generated};
    return m;
  }
  std::vector<float> committed_state(std::int32_t req, std::int32_t layer) const override {
    const Req& r = at(req, "committed_state.req");
    require(r.status == Status::Running, "committed_state.req", "request ", req, " holds no slot");
    require(layer >= 0 && layer < cfg().num_layers, "committed_state.layer", "is ", layer);
    return committed_state_of(r, layer);
  }
  std::map<std::int32_t, std::vector<std::int32_t>> slot_map() const override {
    std::map<std::int32_t, std::vector<std::int32_t>> m;
    for (const auto& [id, r] : reqs_)
      if (r.status == Status::Running) {
        m[id] = {r.slot};
        if (r.snap_slot >= 0) m[id].push_back(r.snap_slot);
      }
    return m;
  }
  std::vector<float> pool(std::int32_t layer) const override { return pools_.at(u(layer)); }

 private:
  struct Req {
    Status status = Status::Running;
    std::int32_t slot = -1;
    Layers history;  // committed tokens since the last fresh start (a deferred commit not included)
    Layers pending;  // prompt tokens still to prefill
    bool fresh = false;
    std::int32_t generated = 0, max_new = 1;
    bool deferred = false;   // a verify's cursor commit waiting for the next step (NextStep mode)
    std::int32_t deferred_n = 0;
    Layers deferred_tokens;  // its committed tokens (history once it lands)
    std::int32_t snap_slot = -1, snap_tokens = 0;
  };

  static std::size_t u(std::int32_t x) { return static_cast<std::size_t>(x); }
  const ModelConfig& cfg() const { return s_.base.cfg; }
  Req& at(std::int32_t req, const std::string& field) {
    auto it = reqs_.find(req);
    require(it != reqs_.end(), field, "unknown request ", req);
    return it->second;
  }
  const Req& at(std::int32_t req, const std::string& field) const {
    auto it = reqs_.find(req);
    require(it != reqs_.end(), field, "unknown request ", req);
    return it->second;
  }
  void check_inputs(const Layers& x, const std::string& field) const {
    require(static_cast<std::int32_t>(x.size()) == cfg().num_layers, field, "has ", x.size(), " layers, expected ",
            cfg().num_layers);
    for (std::size_t l = 0; l < x.size(); ++l) x[l].validate(cfg(), field + "[" + std::to_string(l) + "]");
    require(x[0].T >= 1, field, "must hold at least one token");
  }
  std::vector<float> get(std::int32_t l, std::int32_t slot) const {
    const auto a = pools_[u(l)].begin() + static_cast<std::ptrdiff_t>(slot * stride_);
    return std::vector<float>(a, a + static_cast<std::ptrdiff_t>(cfg().state_elems()));
  }
  void put(std::int32_t l, std::int32_t slot, const std::vector<float>& S) {
    std::copy(S.begin(), S.end(), pools_[u(l)].begin() + static_cast<std::ptrdiff_t>(slot * stride_));
  }
  std::int32_t allocate() {  // LIFO; a (re)allocated slot's ring starts empty
    require(!free_.empty(), "slots", "no free slot (max_live = ", s_.options.max_live, ")");
    const std::int32_t s = free_.back();
    free_.pop_back();
    cursors_[u(s)] = spec_ring_reset(geo_);
    return s;
  }
  std::vector<float> committed_state_of(const Req& r, std::int32_t l) const {
    return spec_ring_committed_state(cfg(), geo_, cursors_after_commit(r), get(l, r.slot), records_[u(r.slot)][u(l)],
                                     Reconstruction::Serial);
  }
  SpecRingCursors cursors_after_commit(const Req& r) const {
    const SpecRingCursors& c = cursors_[u(r.slot)];
    return r.deferred ? spec_ring_commit(c, geo_, r.deferred_n) : c;
  }
  // Lands deferred cursor commits (only `only`'s when >= 0).
  void resolve(std::int32_t only = -1) {
    for (auto& [id, r] : reqs_) {
      if (!r.deferred || (only >= 0 && id != only)) continue;
      cursors_[u(r.slot)] = spec_ring_commit(cursors_[u(r.slot)], geo_, r.deferred_n);
      r.history = concat(cfg(), r.history, r.deferred_tokens);
      r.deferred = false;
    }
  }
  void release(std::int32_t req, Status to, const char* what) {
    Req& r = at(req, std::string(what) + ".req");
    require(r.status == Status::Running, std::string(what) + ".req", "request ", req, " is not running");
    if (r.deferred) r.history = concat(cfg(), r.history, r.deferred_tokens);  // tokens kept; the slot goes
    r.deferred = false;
    r.status = to;
    free_.push_back(r.slot);
    r.slot = -1;
    drop_snapshot(r);
    auto it = std::find(order_.begin(), order_.end(), req);  // condense: the last row moves into the hole
    *it = order_.back();
    order_.pop_back();
  }
  void drop_snapshot(Req& r) {
    if (r.snap_slot >= 0) snap_free_.push_back(r.snap_slot);
    r.snap_slot = -1;
    r.snap_tokens = 0;
  }
  // Fork and prefix hit: a private slot holding the donor's checkpoint, live records and cursors.
  Req& derive(std::int32_t req, std::int32_t from, const std::string& what) {
    require(!reqs_.count(req), what + ".req", "request ", req, " already exists");
    const Req& src = at(from, what + ".from");
    require(src.status == Status::Running && src.pending[0].T == 0, what + ".from", "request ", from,
            " is not running with its prompt committed");
    resolve(from);
    Req r = src;
    r.snap_slot = -1;
    r.snap_tokens = 0;
    r.slot = allocate();
    for (std::int32_t l = 0; l < cfg().num_layers; ++l) put(l, r.slot, get(l, src.slot));
    records_[u(r.slot)] = records_[u(src.slot)];
    cursors_[u(r.slot)] = cursors_[u(src.slot)];
    order_.push_back(req);
    return reqs_[req] = r;
  }
  std::int32_t snapshot_slot(Req& r) {
    if (r.snap_slot < 0) {
      require(!snap_free_.empty(), "slots", "no free snapshot slot");
      r.snap_slot = snap_free_.back();
      snap_free_.pop_back();
    }
    return r.snap_slot;
  }
  // Prefill of a chunk: the committed state (zero on a fresh start) advanced token by token, the state at a
  // crossed block boundary copied into the snapshot slot on the way; the checkpoint takes the result, the
  // ring is empty again (the history is folded in).
  std::vector<std::vector<float>> prefill(Req& r, const Layers& in, std::int32_t snap_at);
  // A verify window of one layer; with snap_at > 0 the forced flush of the first snap_at window records.
  std::vector<float> verify(Req& r, std::int32_t l, const SequenceInputs& in, std::int32_t snap_at);

  EngineFault fault_;
  EngineLevelSetup s_;
  SpecRingGeometry geo_;
  std::int64_t stride_ = 0;
  std::vector<std::vector<float>> pools_;                  // [layer] checkpoints, slot_stride apart
  std::vector<SpecRingCursors> cursors_;                   // per slot (shared by the layers)
  std::vector<std::vector<std::vector<Record>>> records_;  // [slot][layer][physical position]
  std::vector<std::int32_t> free_, snap_free_;
  std::map<std::int32_t, Req> reqs_;
  std::vector<std::int32_t> order_;  // the persistent batch: running requests in row order
};

std::vector<std::vector<float>> RingEngine::prefill(Req& r, const Layers& in, std::int32_t snap_at) {
  std::vector<std::vector<float>> out;
  const RecurrentOptions opt{false, true};
  for (std::int32_t l = 0; l < cfg().num_layers; ++l) {
    std::vector<float> S = r.fresh ? std::vector<float>(static_cast<std::size_t>(cfg().state_elems()), 0.0f)
                                   : committed_state_of(r, l);
    const auto& x = in[u(l)];
    std::vector<float> o, o2;
    if (snap_at > 0) {
      run_recurrent<float>(cfg(), s_.base.params[u(l)], x.slice(cfg(), 0, snap_at), S, o, nullptr, opt);
      std::vector<float> snap = S;
      round_to_state_dtype(cfg(), snap);
      put(l, snapshot_slot(r), snap);
    }
    run_recurrent<float>(cfg(), s_.base.params[u(l)], x.slice(cfg(), snap_at, x.T - snap_at), S, o2, nullptr, opt);
    o.insert(o.end(), o2.begin(), o2.end());
    round_to_state_dtype(cfg(), S);
    put(l, r.slot, S);
    out.push_back(std::move(o));
  }
  cursors_[u(r.slot)] = spec_ring_reset(geo_);
  r.fresh = false;
  return out;
}

std::vector<float> RingEngine::verify(Req& r, std::int32_t l, const SequenceInputs& in, std::int32_t snap_at) {
  const SpecRingCursors cur = cursors_[u(r.slot)];
  auto& records = records_[u(r.slot)][u(l)];
  std::vector<float> checkpoint = get(l, r.slot);
  auto o = spec_ring_verify(cfg(), s_.base.params[u(l)], geo_, cur, in, checkpoint, records,
                            SpecRingStepOptions{Reconstruction::Serial, DType::F32, false});
  if (cur.is_flush) put(l, r.slot, checkpoint);  // the history was folded into the checkpoint
  if (snap_at > 0) {
    // Live after this verify: the history (none after a flush) and the window right behind it.
    std::vector<const Record*> live;
    for (std::int32_t i = cur.is_flush ? cur.write_pos : 0; i < cur.write_pos + snap_at; ++i)
      live.push_back(&records.at(spec_ring_phys(geo_, cur.base + i)));
    if (fault_ == EngineFault::SnapshotWithoutFlush) live.clear();  // the fault: the checkpoint alone
    std::vector<float> snap = reconstruct(cfg(), checkpoint, live, Reconstruction::Serial);
    round_to_state_dtype(cfg(), snap);
    put(l, snapshot_slot(r), snap);
  }
  return o;
}

std::vector<std::vector<std::vector<float>>> RingEngine::step(const std::vector<StepEntry>& entries,
                                                              const std::vector<std::vector<SequenceInputs>>& windows) {
  require(windows.size() == entries.size(), "step.windows", "has ", windows.size(), " entries, expected ",
          entries.size());
  std::map<std::int32_t, std::size_t> entry_of;  // request -> its entry (sampler order)
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    const std::string f = "step.entries[" + std::to_string(i) + "]";
    const auto it = reqs_.find(e.req);
    require(it != reqs_.end() && it->second.status == Status::Running, f + ".req", "request ", e.req,
            " is not running");
    require(entry_of.emplace(e.req, i).second, f + ".req", "request ", e.req, " appears twice");
    require(e.T >= 1 && e.T <= s_.base.max_T, f + ".T", "is ", e.T, ", outside [1, ", s_.base.max_T, "]");
    require(e.accepted >= 0 && e.accepted <= e.T, f + ".accepted", "is ", e.accepted, ", outside [0, T]");
    require(e.eog_at >= 0 && e.eog_at <= e.accepted, f + ".eog_at", "is ", e.eog_at, ", outside [0, accepted]");
    const bool prefill = it->second.pending[0].T > 0;
    const std::string w = "step.windows[" + std::to_string(i) + "]";
    require(static_cast<std::int32_t>(windows[i].size()) == cfg().num_layers, w, "has ", windows[i].size(),
            " layers, expected ", cfg().num_layers);
    for (std::size_t l = 0; l < windows[i].size(); ++l) windows[i][l].validate(cfg(), w + "[" + std::to_string(l) + "]");
    require(prefill ? windows[i][0].T == 0 : windows[i][0].T == e.T, w, "holds ", windows[i][0].T,
            " tokens, expected ", prefill ? 0 : e.T);
  }
  if (s_.options.commit == CommitMode::NextStep) resolve();  // the last step's cursor commits land first

  const std::int32_t B = s_.options.block;
  std::vector<std::vector<std::vector<float>>> result(entries.size());
  std::vector<std::int32_t> ended;
  for (const std::int32_t id : std::vector<std::int32_t>(order_)) {  // rows in the batch's order
    const auto it = entry_of.find(id);
    if (it == entry_of.end()) continue;
    Req& r = reqs_.at(id);
    const StepEntry& e = entries[it->second];
    const std::int32_t c0 = r.history[0].T;
    if (r.pending[0].T > 0) {  // a prefill chunk, committed now
      const std::int32_t k = std::min(e.T, r.pending[0].T);
      const Layers chunk = slice(cfg(), r.pending, 0, k);
      const std::int32_t snap_at = B > 0 && (c0 + k) / B > c0 / B ? (c0 + k) / B * B - c0 : 0;
      result[it->second] = prefill(r, chunk, snap_at);
      if (snap_at > 0) r.snap_tokens = c0 + snap_at;
      r.pending = slice(cfg(), r.pending, k, r.pending[0].T - k);
      r.history = concat(cfg(), r.history, chunk);
      continue;
    }
    // The committed length: the sampler's run cut at the stop token and at max_new (the earlier wins).
    std::int32_t n = e.accepted;
    bool ends = false;
    if (e.eog_at > 0) n = std::min(n, e.eog_at), ends = true;
    if (n >= r.max_new - r.generated) n = r.max_new - r.generated, ends = true;
    const std::int32_t snap_at = !ends && B > 0 && (c0 + n) / B > c0 / B ? (c0 + n) / B * B - c0 : 0;
    const Layers& win = windows[it->second];
    for (std::int32_t l = 0; l < cfg().num_layers; ++l) result[it->second].push_back(verify(r, l, win[u(l)], snap_at));
    if (snap_at > 0) r.snap_tokens = c0 + snap_at;
    r.generated += n;
    const Layers committed = slice(cfg(), win, 0, n);
    if (s_.options.commit == CommitMode::NextStep && !ends) {
      r.deferred = true;
      r.deferred_n = n;
      r.deferred_tokens = committed;
    } else {
      cursors_[u(r.slot)] = spec_ring_commit(cursors_[u(r.slot)], geo_, n);
      r.history = concat(cfg(), r.history, committed);
    }
    if (ends) ended.push_back(id);
  }
  for (const std::int32_t id : ended) release(id, Status::Finished, "step");
  return result;
}

}  // namespace

bool ring_engine_has_fault(EngineFault f) {
  return f == EngineFault::None || f == EngineFault::SnapshotWithoutFlush || f == EngineFault::CowKeepsWritePos ||
         f == EngineFault::MigrationDropsRingRecords;
}

std::unique_ptr<RequestEngine> make_ring_request_engine(EngineFault fault) {
  // A fault the engine does not carry would run as a correct engine and pass: refused instead.
  require(ring_engine_has_fault(fault), "fault", "'", to_string(fault),
          "' is a fault of the reference engine (engine:reference), not of the spec-ring engine, which carries "
          "snapshot_without_flush, cow_keeps_write_pos and migration_drops_ring_records");
  return std::make_unique<RingEngine>(fault);
}

}  // namespace replayssm::ref::engine_level
