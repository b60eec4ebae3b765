// The project's engine-level implementation: a request table, a slot allocator (LIFO free list), a persistent
// batch whose rows keep their positions and are condensed when a request leaves (the last row moves into the
// hole), in-place or ping-pong double-buffered slots, same-iteration or next-step commits, copy-on-write by
// eager copy, prefix snapshots by the track step rule in slots of their own (the last max_live slots; a
// snapshot is the row's payload replayed up to the block boundary into its snapshot slot) — over the
// batch-level raw-payload replay reference (batch::verify_replay / commit_replay). The
// engine-level faults of the catalogue (request_engine.hpp) change this bookkeeping only; the math is the
// batch-level reference's.
#include <algorithm>
#include <limits>
#include <optional>
#include <set>

#include "replayssm/error.hpp"
#include "replayssm/recurrence/batch.hpp"
#include "replayssm/lifecycle/engine.hpp"
#include "replayssm/engine_level/request_engine.hpp"
#include "layers.hpp"

namespace replayssm::ref::engine_level {

namespace {

class ReferenceEngine : public RequestEngine {
 public:
  explicit ReferenceEngine(EngineFault f) : fault_(f) {}
  std::string name() const override { return "reference"; }
  bool bit_exact() const override { return true; }

  void setup(const EngineLevelSetup& s) override {
    s.validate();
    s_ = s;
    const auto& b = s.base;
    stride_ = b.pool_geometry().stride(b.cfg);
    pools_.assign(static_cast<std::size_t>(b.cfg.num_layers),
                  std::vector<float>(static_cast<std::size_t>(b.num_slots * stride_), b.poison));
    dbl_ = s.options.buffers == Buffering::Double;
    const std::int32_t snaps = s.options.block > 0 ? s.options.max_live : 0;  // snapshot slots at the end
    homes_.assign(static_cast<std::size_t>(dbl_ ? (b.num_slots - snaps) / 2 : b.num_slots - snaps), Home{});
    free_.clear();
    for (std::int32_t h = static_cast<std::int32_t>(homes_.size()) - 1; h >= 0; --h) free_.push_back(h);
    snap_free_.clear();
    for (std::int32_t k = 0; k < snaps; ++k) snap_free_.push_back(b.num_slots - 1 - k);
    geo_ = PayloadGeometry::sized(b.page_tokens, b.max_T, s.options.max_live, 1);
    reqs_.clear();
    order_.clear();
    pending_.reset();
    steps_ = 0;
  }

  void admit(std::int32_t req, const std::vector<SequenceInputs>& prompt, std::int32_t max_new) override {
    require(!reqs_.count(req), "admit.req", "request ", req, " already exists");
    require(max_new >= 1, "admit.max_new", "must be >= 1");
    check_inputs(prompt, "admit.prompt", true);
    Req r;
    r.history = empty_layers(cfg());
    r.pending = prompt;
    r.fresh = true;
    r.max_new = max_new;
    r.home = allocate();
    reqs_[req] = std::move(r);
    order_.push_back(req);
  }

  void prefix_hit(std::int32_t req, std::int32_t from, const std::vector<SequenceInputs>& prompt,
                  std::int32_t max_new) override {
    require(max_new >= 1, "prefix_hit.max_new", "must be >= 1");
    check_inputs(prompt, "prefix_hit.prompt", true);
    Req& r = derive(req, from, "prefix_hit");
    r.pending = prompt;
    r.generated = 0;
    r.max_new = max_new;
  }

  void fork(std::int32_t req, std::int32_t from) override { derive(req, from, "fork"); }

  bool prefix_snapshots() const override { return true; }
  // A new request restored from `from`'s snapshot into a private home (buffer 0), its first X tokens as history.
  void snapshot_hit(std::int32_t req, std::int32_t from, const std::vector<SequenceInputs>& prompt,
                    std::int32_t max_new) override {
    require(!reqs_.count(req), "snapshot_hit.req", "request ", req, " already exists");
    require(max_new >= 1, "snapshot_hit.max_new", "must be >= 1");
    check_inputs(prompt, "snapshot_hit.prompt", true);
    const Req& src = at(from, "snapshot_hit.from");
    require(src.status == Status::Running && src.snap_slot >= 0, "snapshot_hit.from", "request ", from,
            " holds no snapshot");
    resolve(from);  // the history up to the boundary may still be a deferred commit
    Req r;
    r.history = slice(cfg(), src.history, 0, src.snap_tokens);
    r.pending = prompt;
    r.max_new = max_new;
    r.home = allocate();
    for (std::int32_t l = 0; l < cfg().num_layers; ++l) put(l, phys(r.home, 0), get(l, src.snap_slot));
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
    r.home = allocate();
    r.status = Status::Running;
    order_.push_back(req);
  }

  std::map<std::int32_t, RequestStatus> requests() const override {
    std::map<std::int32_t, RequestStatus> m;
    for (const auto& [id, r] : reqs_) {
      const auto p = pending_row(id);
      m[id] = RequestStatus{r.status, r.history[0].T + (p ? pending_->batch.rows[*p].accepted : 0), r.pending[0].T,
                            r.generated};
    }
    return m;
  }

  std::vector<float> committed_state(std::int32_t req, std::int32_t layer) const override {
    const Req& r = at(req, "committed_state.req");
    require(r.status == Status::Running, "committed_state.req", "request ", req, " holds no slot");
    require(layer >= 0 && layer < cfg().num_layers, "committed_state.layer", "is ", layer);
    const auto p = pending_row(req);
    if (!p) return get(layer, read_slot(r.home));
    // A deferred commit: computed on a copy of the pools, nothing written (the query must not resolve it).
    auto pools = pools_;
    auto payload = pending_->payload;
    batch::Batch one = pending_->batch;
    for (std::size_t i = 0; i < one.rows.size(); ++i)
      if (i != *p) one.rows[i].accepted = 0;
    batch::commit_replay(one, layer_views(pools, payload));
    const auto& row = one.rows[*p];
    const auto at0 = pools[static_cast<std::size_t>(layer)].begin() + static_cast<std::ptrdiff_t>(row.write_slot * stride_);
    return std::vector<float>(at0, at0 + static_cast<std::ptrdiff_t>(cfg().state_elems()));
  }

  std::map<std::int32_t, std::vector<std::int32_t>> slot_map() const override {
    std::map<std::int32_t, std::vector<std::int32_t>> m;
    for (const auto& [id, r] : reqs_)
      if (r.status == Status::Running) {
        m[id] = dbl_ ? std::vector<std::int32_t>{2 * r.home, 2 * r.home + 1} : std::vector<std::int32_t>{r.home};
        if (r.snap_slot >= 0) m[id].push_back(r.snap_slot);
      }
    return m;
  }

  std::vector<float> pool(std::int32_t layer) const override { return pools_.at(static_cast<std::size_t>(layer)); }

 private:
  // A request's slot home: one slot (in place) or a ping-pong pair whose buffer `cur` holds the state.
  struct Home {
    std::int32_t cur = 0;
    std::int32_t users = 0;
  };
  struct Req {
    Status status = Status::Running;
    std::int32_t home = -1;
    Layers history;   // committed tokens since the last fresh start (a pending deferred commit not included)
    Layers pending;   // prompt tokens still to prefill
    bool fresh = false;
    std::int32_t generated = 0, max_new = 1;
    std::int32_t snap_slot = -1, snap_tokens = 0;  // the prefix snapshot (block boundary; 0: none)
  };
  // The verify rows of the last step whose commit is deferred to the start of the next step (NextStep mode).
  struct Pending {
    batch::Batch batch;                     // accepted = the trimmed count to commit (0: nothing)
    std::vector<std::vector<float>> payload;  // [layer] the step's captured payload
    std::vector<std::int32_t> req;          // per row: the request whose tokens these are (-1: none)
    std::vector<Layers> tokens;             // per row: the committed tokens (history on resolution)
  };

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
  void check_inputs(const Layers& x, const std::string& field, bool nonempty) const {
    require(static_cast<std::int32_t>(x.size()) == cfg().num_layers, field, "has ", x.size(), " layers, expected ",
            cfg().num_layers);
    for (std::size_t l = 0; l < x.size(); ++l) x[l].validate(cfg(), field + "[" + std::to_string(l) + "]");
    require(!nonempty || x[0].T >= 1, field, "must hold at least one token");
  }

  std::int32_t phys(std::int32_t home, std::int32_t buf) const { return dbl_ ? 2 * home + buf : home; }
  std::int32_t read_slot(std::int32_t home) const { return phys(home, homes_[static_cast<std::size_t>(home)].cur); }
  std::int32_t write_slot(std::int32_t home) const {
    return dbl_ ? phys(home, 1 - homes_[static_cast<std::size_t>(home)].cur) : home;
  }

  std::int32_t allocate() {
    require(!free_.empty(), "slots", "no free slot (max_live = ", s_.options.max_live, ")");
    const std::int32_t h = free_.back();  // LIFO: the slot freed last is reused first
    free_.pop_back();
    Home& home = homes_[static_cast<std::size_t>(h)];
    if (fault_ != EngineFault::TenantInheritsBufferIndex) home.cur = 0;  // a fresh tenant starts at buffer 0
    home.users = 1;
    return h;
  }
  void free_home(std::int32_t h) {
    if (--homes_[static_cast<std::size_t>(h)].users == 0) free_.push_back(h);
  }
  void leave_batch(std::int32_t req) {  // condense: the last row moves into the hole
    auto it = std::find(order_.begin(), order_.end(), req);
    if (it == order_.end()) return;
    *it = order_.back();
    order_.pop_back();
  }

  std::vector<float> get(std::int32_t l, std::int32_t slot) const {
    const auto a = pools_[static_cast<std::size_t>(l)].begin() + static_cast<std::ptrdiff_t>(slot * stride_);
    return std::vector<float>(a, a + static_cast<std::ptrdiff_t>(cfg().state_elems()));
  }
  void put(std::int32_t l, std::int32_t slot, const std::vector<float>& S) {
    std::copy(S.begin(), S.end(), pools_[static_cast<std::size_t>(l)].begin() + static_cast<std::ptrdiff_t>(slot * stride_));
  }
  std::vector<batch::Layer> layer_views(std::vector<std::vector<float>>& pools,
                                        std::vector<std::vector<float>>& payload) const {
    std::vector<batch::Layer> v;
    for (std::size_t l = 0; l < pools.size(); ++l) {
      batch::Layer layer;
      layer.params = &s_.base.params[l];
      layer.pool = &pools[l];
      layer.payload = &payload[l];
      v.push_back(layer);
    }
    return v;
  }

  std::optional<std::size_t> pending_row(std::int32_t req) const {
    if (!pending_) return std::nullopt;
    for (std::size_t i = 0; i < pending_->req.size(); ++i)
      if (pending_->req[i] == req && pending_->batch.rows[i].accepted > 0) return i;
    return std::nullopt;
  }

  // Lands the deferred commits (only `req`'s when req >= 0): replays into the write slots, flips the
  // ping-pong index, appends the tokens to the history. Rows of requests that no longer run were dropped when
  // they left, unless the DeferredCommitAfterFree fault kept them: those still write the slot they named.
  void resolve(std::int32_t only = -1) {
    if (!pending_) return;
    batch::Batch now = pending_->batch;
    for (std::size_t i = 0; i < now.rows.size(); ++i)
      if (only >= 0 && pending_->req[i] != only) now.rows[i].accepted = 0;
    batch::commit_replay(now, layer_views(pools_, pending_->payload));
    for (std::size_t i = 0; i < now.rows.size(); ++i) {
      if (now.rows[i].accepted == 0) continue;
      pending_->batch.rows[i].accepted = 0;
      const std::int32_t id = pending_->req[i];
      if (id < 0) continue;  // an orphaned row (fault): written by slot, no request's bookkeeping
      Req& r = reqs_.at(id);
      r.history = concat(cfg(), r.history, pending_->tokens[i]);
      if (dbl_) homes_[static_cast<std::size_t>(r.home)].cur ^= 1;
    }
    bool any = false;
    for (const auto& row : pending_->batch.rows) any = any || row.accepted > 0;
    if (!any) pending_.reset();
  }

  // A request leaving its slot with a deferred commit outstanding: its tokens are committed (bookkeeping),
  // the state write is dropped. Faults: the write is kept and lands later by slot; or preemption drops the
  // tokens too.
  void drop_pending(std::int32_t req, bool preempting) {
    const auto p = pending_row(req);
    if (!p) return;
    Req& r = reqs_.at(req);
    const bool lose = preempting && fault_ == EngineFault::PendingCommitLostOnPreempt;
    if (!lose) r.history = concat(cfg(), r.history, pending_->tokens[*p]);
    if (fault_ == EngineFault::DeferredCommitAfterFree)
      pending_->req[*p] = -1;  // the commit stays queued under its slot
    else
      pending_->batch.rows[*p].accepted = 0;
  }

  void release(std::int32_t req, Status to, const char* what) {
    Req& r = at(req, std::string(what) + ".req");
    require(r.status == Status::Running, std::string(what) + ".req", "request ", req, " is not running");
    drop_pending(req, to == Status::Preempted);
    r.status = to;
    free_home(r.home);
    r.home = -1;
    drop_snapshot(r);
    leave_batch(req);
  }
  void drop_snapshot(Req& r) {
    if (r.snap_slot >= 0) snap_free_.push_back(r.snap_slot);
    r.snap_slot = -1;
    r.snap_tokens = 0;
  }

  // Fork and prefix hit: a new running request holding `from`'s committed state in a home of its own (the
  // copy path writes buffer 0 of the new home); the PrefixHitSharesSlot fault shares `from`'s home instead.
  Req& derive(std::int32_t req, std::int32_t from, const std::string& what) {
    require(!reqs_.count(req), what + ".req", "request ", req, " already exists");
    Req& src = at(from, what + ".from");
    require(src.status == Status::Running && src.pending[0].T == 0, what + ".from", "request ", from,
            " is not running with its prompt committed");
    resolve(from);  // the copy needs the donor's committed state in its slot
    Req r = src;
    r.snap_slot = -1;  // the snapshot stays the donor's
    r.snap_tokens = 0;
    if (fault_ == EngineFault::PrefixHitSharesSlot) {
      ++homes_[static_cast<std::size_t>(src.home)].users;
    } else {
      r.home = allocate();
      for (std::int32_t l = 0; l < cfg().num_layers; ++l) put(l, phys(r.home, 0), get(l, read_slot(src.home)));
    }
    order_.push_back(req);
    return reqs_[req] = r;
  }

  // The track step: a row whose commit of k tokens takes its request from c0 to c0 + k committed tokens
  // across a block boundary gets a snapshot of the state at the last boundary X crossed: its payload replayed
  // X - c0 tokens from the read slot into the request's snapshot slot, before any commit of the step (one
  // commit_replay call over the step's batch, every other row committing nothing). Rows whose request ends in
  // the step take none. Faults: the whole run replayed (SnapshotAtRunEnd); the crossing and X decided on the
  // verify window's T tokens, rejected drafts included (SnapshotCountsRejectedDrafts).
  void take_snapshots(const batch::Batch& b, const std::vector<batch::Layer>& views, const std::vector<std::int32_t>& row_req,
                      const std::vector<bool>& row_prefill, const std::vector<std::int32_t>& n, const std::vector<bool>& ends) {
    const std::int32_t B = s_.options.block;
    if (B <= 0) return;
    batch::Batch snap = b;
    bool any = false;
    for (std::size_t i = 0; i < b.rows.size(); ++i) {
      snap.rows[i].accepted = 0;
      if (ends[i]) continue;
      Req& r = reqs_.at(row_req[i]);
      const std::int32_t c0 = r.history[0].T, k = row_prefill[i] ? b.rows[i].T : n[i];
      const std::int32_t reach = fault_ == EngineFault::SnapshotCountsRejectedDrafts ? c0 + b.rows[i].T : c0 + k;
      if (reach / B == c0 / B) continue;
      const std::int32_t X = reach / B * B;
      if (r.snap_slot < 0) {
        require(!snap_free_.empty(), "slots", "no free snapshot slot");
        r.snap_slot = snap_free_.back();
        snap_free_.pop_back();
      }
      r.snap_tokens = X;
      snap.rows[i].write_slot = r.snap_slot;
      snap.rows[i].accepted = fault_ == EngineFault::SnapshotAtRunEnd ? k : X - c0;
      any = true;
    }
    if (any) batch::commit_replay(snap, views);
  }

  // A fresh page table: a permutation of the payload's pages that changes every step.
  std::vector<std::int32_t> page_table(std::size_t rows) {
    std::vector<std::int32_t> perm(static_cast<std::size_t>(geo_.num_pages));
    for (std::size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<std::int32_t>(i);
    std::uint64_t x = 0x9e3779b97f4a7c15ull * static_cast<std::uint64_t>(++steps_);
    for (std::size_t i = perm.size(); i > 1; --i) {
      x ^= x >> 31;
      x *= 0xbf58476d1ce4e5b9ull;
      x ^= x >> 29;
      std::swap(perm[i - 1], perm[x % i]);
    }
    perm.resize(rows * static_cast<std::size_t>(geo_.pages_per_row));
    return perm;
  }

  EngineFault fault_;
  EngineLevelSetup s_;
  std::int64_t stride_ = 0;
  bool dbl_ = false;
  std::vector<std::vector<float>> pools_;
  std::vector<Home> homes_;
  std::vector<std::int32_t> free_;
  std::vector<std::int32_t> snap_free_;  // free snapshot slots (LIFO)
  PayloadGeometry geo_;
  std::map<std::int32_t, Req> reqs_;
  std::vector<std::int32_t> order_;  // the persistent batch: running requests in row order
  std::optional<Pending> pending_;
  std::int64_t steps_ = 0;
};

std::vector<std::vector<std::vector<float>>> ReferenceEngine::step(
    const std::vector<StepEntry>& entries, const std::vector<std::vector<SequenceInputs>>& windows) {
  const auto& c = cfg();
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
    check_inputs(windows[i], "step.windows[" + std::to_string(i) + "]", false);
    const bool prefill = it->second.pending[0].T > 0;
    require(prefill ? windows[i][0].T == 0 : windows[i][0].T == e.T, "step.windows[" + std::to_string(i) + "]",
            "holds ", windows[i][0].T, " tokens, expected ", prefill ? 0 : e.T);
  }
  if (s_.options.commit == CommitMode::NextStep) resolve();  // the last step's commits land first

  // Rows in the persistent batch's order (not the sampler's).
  batch::Batch b;
  b.cfg = c;
  b.pool = s_.base.pool_geometry();
  b.max_T = s_.base.max_T;
  std::vector<std::int32_t> row_req;
  std::vector<Layers> row_tokens;
  std::vector<bool> row_prefill;
  Layers packed = empty_layers(c);
  for (std::int32_t id : order_) {
    const auto it = entry_of.find(id);
    if (it == entry_of.end()) continue;
    Req& r = reqs_.at(id);
    const StepEntry& e = entries[it->second];
    const bool prefill = r.pending[0].T > 0;
    Layers tok = prefill ? slice(c, r.pending, 0, std::min(e.T, r.pending[0].T)) : windows[it->second];
    const std::int32_t T = tok[0].T;
    if (prefill && r.fresh)  // a fresh start: zero state whatever the slot held
      for (auto& pool : pools_)
        std::fill_n(pool.begin() + static_cast<std::ptrdiff_t>(read_slot(r.home) * stride_), c.state_elems(), 0.0f);
    b.rows.push_back(BatchRow{read_slot(r.home), write_slot(r.home), T, packed[0].T, prefill ? T : 0});
    packed = concat(c, packed, tok);
    row_req.push_back(id);
    row_tokens.push_back(std::move(tok));
    row_prefill.push_back(prefill);
  }
  b.total_tokens = packed[0].T;
  b.payload = geo_;
  b.page_table = page_table(b.rows.size());
  b.validate();
  std::vector<std::vector<float>> payload(static_cast<std::size_t>(c.num_layers),
                                          std::vector<float>(static_cast<std::size_t>(geo_.elems(c)),
                                                             std::numeric_limits<float>::quiet_NaN()));
  const auto views = layer_views(pools_, payload);
  std::vector<std::vector<float>> out(views.size());
  for (std::size_t l = 0; l < views.size(); ++l) {
    out[l].assign(static_cast<std::size_t>(b.total_tokens) * c.HV * c.V, 0.0f);
    batch::verify_replay(b, views[l], packed[l], out[l]);
  }

  // The committed length of every verify row: the sampler's run, cut at the stop token and at max_new.
  std::vector<std::int32_t> n(b.rows.size(), 0);
  std::vector<bool> ends(b.rows.size(), false);
  for (std::size_t i = 0; i < b.rows.size(); ++i) {
    if (row_prefill[i]) continue;
    const Req& r = reqs_.at(row_req[i]);
    // The sampler's count of this row's request — or, with the fault, of whatever entry sits at this row's
    // position in sampler order.
    const StepEntry& own = entries[entry_of.at(row_req[i])];
    const std::int32_t accepted =
        fault_ == EngineFault::AcceptedByRowPosition ? entries[i].accepted : own.accepted;
    const std::int32_t left = r.max_new - r.generated;
    std::int32_t k = accepted;
    if (fault_ == EngineFault::StopTokenIgnoredAtCap && own.eog_at > 0 && accepted >= left) {
      k = left;  // the fault: the cap alone trims the run, the stop token before it is passed over
      ends[i] = true;
    } else {
      if (own.eog_at > 0) {  // nothing after the end-of-generation token is committed
        k = std::min(k, own.eog_at);
        ends[i] = true;
      }
      if (k >= left) {  // the max_new cap
        k = left;
        ends[i] = true;
      }
    }
    n[i] = k;
  }

  take_snapshots(b, views, row_req, row_prefill, n, ends);
  // Prefill chunks commit in the step; verify rows now (same iteration) or at the next step.
  const bool defer = s_.options.commit == CommitMode::NextStep;
  batch::Batch now = b;
  for (std::size_t i = 0; i < b.rows.size(); ++i) now.rows[i].accepted = row_prefill[i] ? b.rows[i].T : defer ? 0 : n[i];
  batch::commit_replay(now, views);
  Pending later{b, std::move(payload), row_req, {}};
  for (std::size_t i = 0; i < b.rows.size(); ++i) {
    Req& r = reqs_.at(row_req[i]);
    const std::int32_t k = row_prefill[i] ? b.rows[i].T : n[i];
    if (dbl_ && now.rows[i].accepted > 0) homes_[static_cast<std::size_t>(r.home)].cur ^= 1;
    Layers committed = slice(c, row_tokens[i], 0, k);
    if (row_prefill[i]) {
      r.pending = slice(c, r.pending, k, r.pending[0].T - k);
      r.fresh = false;
    } else {
      r.generated += k;
    }
    const bool deferred = defer && !row_prefill[i];
    later.batch.rows[i].accepted = deferred ? k : 0;
    if (deferred && !ends[i]) {
      later.tokens.push_back(std::move(committed));
      continue;
    }
    r.history = concat(c, r.history, committed);
    later.tokens.emplace_back();
    if (deferred) {  // the request ends here: its deferred commit is dropped (or, with the fault, orphaned)
      if (fault_ == EngineFault::DeferredCommitAfterFree)
        later.req[i] = -1;
      else
        later.batch.rows[i].accepted = 0;
    }
  }
  if (defer) pending_ = std::move(later);
  for (std::size_t i = 0; i < b.rows.size(); ++i)
    if (ends[i]) {
      Req& r = reqs_.at(row_req[i]);
      r.status = Status::Finished;
      free_home(r.home);
      r.home = -1;
      drop_snapshot(r);
      leave_batch(row_req[i]);
    }

  // Outputs back in sampler order, per entry and layer.
  std::vector<std::vector<std::vector<float>>> result(entries.size());
  const std::size_t per = static_cast<std::size_t>(c.HV) * c.V;
  for (std::size_t i = 0; i < b.rows.size(); ++i) {
    auto& dst = result[entry_of.at(row_req[i])];
    for (std::size_t l = 0; l < out.size(); ++l) {
      const auto a = out[l].begin() + static_cast<std::ptrdiff_t>(b.rows[i].token_offset * per);
      dst.emplace_back(a, a + static_cast<std::ptrdiff_t>(b.rows[i].T * per));
    }
  }
  return result;
}

}  // namespace

std::unique_ptr<RequestEngine> make_reference_request_engine(EngineFault fault) {
  return std::make_unique<ReferenceEngine>(fault);
}

}  // namespace replayssm::ref::engine_level
