// ReplaySSM design 1 (raw payload): verify captures (k, v, a, b) into a paged payload, commit replays the
// accepted prefix — the batch-level reference of the CUDA verify_replay / commit_replay kernels — with the
// teeth catalogue's replay faults: accepted-count and PAD faults change the descriptors, math faults enter
// through the token step's hook, the layout fault transposes what the commit stored.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <set>

#include "pooled.hpp"
#include "replayssm/error.hpp"
#include "replayssm/tier.hpp"

namespace replayssm::ref {

namespace {

// TF32 operands: a float rounded to 10 explicit mantissa bits, to nearest with ties away from zero (what
// cvt.rna.tf32.f32 does before a tensor-core MMA); NaN and Inf pass unchanged.
struct Tf32Operands : TokenHook {
  double dot_operand(double x) const override {
    const float f = static_cast<float>(x);
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) == 0x7f800000u) return x;
    u = (u + 0x1000u) & ~0x1fffu;
    float r;
    std::memcpy(&r, &u, 4);
    return r;
  }
};

class ReplayTarget : public PooledTarget {
 public:
  // precision: an emulation of a kernel's arithmetic applied to every token step (the tf32 variant), or null.
  ReplayTarget(Fault f, const TokenHook* precision) : fault_(f), precision_(precision) { conv_fault_ = f; }
  std::string name() const override { return precision_ ? "replay_tf32" : "replay"; }
  std::string design() const override { return "replay"; }
  bool bit_exact() const override { return precision_ == nullptr; }
  Tolerance tolerance(const std::vector<double>& term_scale, bool state) const override {
    return tier_tolerance(Tier::Tf32, s_.cfg, term_scale, state);  // only used by the tf32 variant
  }
  void setup(const EngineSetup& s) override {
    PooledTarget::setup(s);
    geo_ = s.payload_geometry();
    payload_.assign(static_cast<std::size_t>(s.cfg.num_layers), {});
    baked_.clear();
  }

  std::vector<std::vector<float>> step(const std::vector<TargetRow>& sent,
                                       const std::vector<SequenceInputs>& inputs) override {
    const auto wire = replayed_rows(sent, false);
    const auto rows = canonical_rows(wire, s_, fault_ == Fault::PadSentinelZero);
    if (fault_ == Fault::GraphTailProcessed) tail_inputs_ = inputs;
    if (fault_ == Fault::CaptureWritesLiveState) {  // what the persistent index buffer holds after this step
      index_buffer_.clear();
      for (const auto& r : rows)
        if (r.row.slot != kPadSlot) index_buffer_.push_back(r);
    }
    auto out = zero_outputs(inputs);
    zero_fresh_slots(rows);
    batch_ = step_batch(rows, inputs.empty() ? 0 : inputs[0].T);
    if (fault_ == Fault::VerifyScratchInIdleSlot) borrow_idle_slot();
    if (fault_ == Fault::WidthCappedAt8)  // the fault: a verify window wider than the compiled one is cut
      for (std::size_t i = 0; i < rows.size(); ++i)
        if (rows[i].kind == RowKind::Verify) batch_.rows[i].T = std::min(batch_.rows[i].T, kFaultWidthCap);
    batch_.payload = geo_;
    batch_.page_table = fresh_page_table(rows.size());
    batch_.validate();
    // Pages not mapped stay NaN, so a commit reading a page the verify did not write poisons the state.
    for (auto& buf : payload_)
      buf.assign(static_cast<std::size_t>(geo_.elems(s_.cfg)), std::numeric_limits<float>::quiet_NaN());
    const auto ls = layers(nullptr, &payload_);
    for (std::size_t l = 0; l < ls.size(); ++l)
      batch::verify_replay(batch_, ls[l], inputs[l], out[l], batch::Store::Rounded,
                           precision_ ? precision_ : verify_fault_hook(fault_));
    if (fault_ == Fault::PadOutputsFromZeroState) pad_outputs_from_zero_state(rows, inputs, out);
    if (fault_ == Fault::PadRowWritesSlot0 || fault_ == Fault::PadIndexWraps) {
      // The fault: padding rows alias slot 0 or, indexed with -1, the last slot (their outputs are discarded).
      const batch::Batch alias = pad_rows_alias(batch_, false, wire);
      for (std::size_t l = 0; l < ls.size(); ++l) {
        std::vector<float> discarded(out[l].size());
        batch::verify_replay(alias, ls[l], inputs[l], discarded);
      }
    }
    if (fault_ != Fault::PrefillCommittedAtCommit)
      batch::commit_replay(batch_, ls, precision_);  // prefill chunks: their whole window
    return out;
  }

  void allocate(std::int32_t slot) override {
    allocated_.insert(slot);
    if (fault_ == Fault::AllocateZeroesNextSlot)  // the fault: the reset lands on the next slot
      for (std::int32_t l = 0; l < s_.cfg.num_layers; ++l)
        put(l, (slot + 1) % s_.num_slots, std::vector<float>(static_cast<std::size_t>(s_.cfg.state_elems()), 0.0f));
  }

  void capture(std::int32_t rows, std::int32_t T) override {
    if (fault_ != Fault::CaptureWritesLiveState) return PooledTarget::capture(rows, T);
    check_capture(rows, T);
    // The fault: the warm-up runs on the index buffer as it is (the last step's slots, up to `rows` of them)
    // instead of PAD rows, with T dummy tokens each, and its commit accepts the whole dummy window.
    std::vector<TargetRow> warm;
    std::int32_t offset = 0;
    for (const auto& r : index_buffer_) {
      if (static_cast<std::int32_t>(warm.size()) == rows) break;
      TargetRow w{BatchRow{r.row.slot, r.row.write_slot, T, offset, 0}, RowKind::Verify, false, false};
      warm.push_back(w);
      offset += T;
    }
    if (warm.empty()) return PooledTarget::capture(rows, T);
    step(warm, capture_inputs(offset));
    for (auto& w : warm) w.row.accepted = T;
    commit(warm);
  }

  void commit(const std::vector<TargetRow>& sent) override {
    const auto wire = replayed_rows(sent, true);
    const auto rows = canonical_rows(wire, s_, fault_ == Fault::PadSentinelZero);
    set_commit_counts(batch_, rows);
    for (std::size_t i = 0; i < rows.size(); ++i) {
      if (rows[i].kind == RowKind::Verify && rows[i].row.slot != kPadSlot)
        batch_.rows[i].accepted = faulty_count(batch_.rows[i].accepted, batch_.rows[i].T);
      if (fault_ == Fault::PrefillCommittedAtCommit && rows[i].kind == RowKind::Prefill && rows[i].row.slot != kPadSlot)
        batch_.rows[i].accepted = batch_.rows[i].T;  // the fault: the step left its prefill chunk to the commit
    }
    if (fault_ == Fault::VerifyScratchInIdleSlot) return_idle_slot();
    const batch::Batch b =
        fault_ == Fault::PadRowWritesSlot0 || fault_ == Fault::PadIndexWraps ? pad_rows_alias(batch_, true, wire) : batch_;
    batch::commit_replay(b, layers(nullptr, &payload_), precision_ ? precision_ : fault_hook(fault_));
    if (fault_ == Fault::TransposedLayout) {
      const StateLayout other = s_.cfg.layout == StateLayout::KV ? StateLayout::VK : StateLayout::KV;
      for (const auto& r : b.rows) {
        if (r.slot == kPadSlot || r.write_slot == kPadSlot || r.accepted == 0) continue;
        for (std::int32_t l = 0; l < s_.cfg.num_layers; ++l)
          put(l, r.write_slot, convert_layout(s_.cfg, get(l, r.write_slot), s_.cfg.layout, other));
      }
    }
    if (fault_ == Fault::GraphTailProcessed) commit_graph_tail(wire);
    if (fault_ == Fault::CommitWritesReadSlot)  // the fault: the new state lands in the read slot too
      for (const auto& r : b.rows)
        if (r.slot != kPadSlot && r.write_slot != kPadSlot && r.write_slot != r.slot && r.accepted > 0)
          for (std::int32_t l = 0; l < s_.cfg.num_layers; ++l) put(l, r.slot, get(l, r.write_slot));
    if (fault_ == Fault::ZeroAcceptedWritesDestination)  // the fault: n = 0 still fills the destination slot
      for (std::size_t i = 0; i < b.rows.size(); ++i) {
        const auto& r = b.rows[i];
        if (rows[i].kind == RowKind::Verify && r.slot != kPadSlot && r.write_slot != kPadSlot && r.write_slot != r.slot &&
            r.accepted == 0)
          for (std::int32_t l = 0; l < s_.cfg.num_layers; ++l) put(l, r.write_slot, get(l, r.slot));
      }
    if (fault_ == Fault::CommitSpillsIntoGap) spill_into_gaps(b);
  }

 private:
  // What a graph replay fault keeps of a bucket's first replay after its capture: the rows as sent (slots,
  // PAD and tail rows), the live row count, the commit's accepted counts; `committed` once that replay's commit ran.
  struct Baked {
    std::vector<TargetRow> rows;
    std::int32_t live = 0;
    std::vector<std::int32_t> accepted;
    bool committed = false;
  };
  // The rows the faulty graph runs for a replayed step (commit: its commit): the first replay of a bucket as
  // sent, and every later one with the baked values. Without a graph replay fault, or for an eager step, `sent`.
  std::vector<TargetRow> replayed_rows(const std::vector<TargetRow>& sent, bool commit) {
    const auto bucket = take_replay();
    if (!bucket || !graph_replay_fault(fault_)) return sent;
    const bool first = !baked_.count(*bucket);
    Baked& b = baked_[*bucket];
    if (first) {
      b.rows = sent;
      while (b.live < static_cast<std::int32_t>(sent.size()) && !sent[static_cast<std::size_t>(b.live)].graph_tail) ++b.live;
    }
    if (first || !b.committed) {  // the first replay runs as sent; its commit's counts are what the graph keeps
      if (commit) {
        for (const auto& t : sent) b.accepted.push_back(t.row.accepted);
        b.committed = true;
      }
      return sent;
    }
    std::vector<TargetRow> rows = sent;
    require(rows.size() == b.rows.size(), "rows", "a replay of bucket rows=", bucket->first, " has ", rows.size(), " rows");
    for (std::size_t i = 0; i < rows.size(); ++i) {
      if (fault_ == Fault::GraphReplaySlotsBaked) {
        rows[i].row.slot = b.rows[i].row.slot;
        rows[i].row.write_slot = b.rows[i].row.write_slot;
        rows[i].graph_tail = b.rows[i].graph_tail;
      }
      if (fault_ == Fault::GraphReplayLiveRowsBaked && static_cast<std::int32_t>(i) >= b.live) rows[i].graph_tail = true;
      if (fault_ == Fault::GraphReplayAcceptedBaked && commit)
        rows[i].row.accepted = std::min(b.accepted[i], rows[i].row.T);
    }
    return rows;
  }
  // A fresh permuted page table for this step's rows: rows never share a page, and the pages differ from
  // step to step.
  std::vector<std::int32_t> fresh_page_table(std::size_t rows) {
    ++step_count_;
    std::vector<std::int32_t> perm(static_cast<std::size_t>(geo_.num_pages));
    for (std::int32_t i = 0; i < geo_.num_pages; ++i) perm[static_cast<std::size_t>(i)] = i;
    std::uint64_t x = 0x9e3779b97f4a7c15ull * static_cast<std::uint64_t>(step_count_);
    for (std::size_t i = perm.size(); i > 1; --i) {
      x ^= x >> 29;
      x *= 0xbf58476d1ce4e5b9ull;
      x ^= x >> 32;
      std::swap(perm[i - 1], perm[x % i]);
    }
    const std::size_t n = rows * static_cast<std::size_t>(geo_.pages_per_row);
    require(n <= perm.size(), "rows", "more rows than payload pages");
    return std::vector<std::int32_t>(perm.begin(), perm.begin() + static_cast<std::ptrdiff_t>(n));
  }
  // The accepted-count faults of the catalogue.
  std::int32_t faulty_count(std::int32_t n, std::int32_t T) const {
    if (fault_ == Fault::OffByOneAccepted && n >= 1) n -= 1;
    if (fault_ == Fault::ZeroAcceptedAsOne && n == 0) n = 1;
    if (fault_ == Fault::FullAcceptClamped && n == T && n > 1) n -= 1;
    if (fault_ == Fault::WidthCappedAt8) n = std::min(n, kFaultWidthCap);
    return n;
  }
  // GraphTailProcessed: the kernel runs the whole captured batch, so every graph tail row that holds a slot
  // id (a stale row of an earlier, larger batch) is verified and committed with its stale accepted count
  // into that slot, one row at a time (as a grid over the captured capacity would).
  void commit_graph_tail(const std::vector<TargetRow>& wire) {
    const std::int32_t sentinel = s_.pad_sentinel();
    for (const auto& t : wire) {
      if (!t.graph_tail || t.row.slot == sentinel || t.row.slot < 0 || t.row.slot >= s_.num_slots) continue;
      const std::int32_t n = t.kind == RowKind::Prefill ? t.row.T : t.row.accepted;
      if (n <= 0 || t.row.write_slot < 0 || t.row.write_slot >= s_.num_slots) continue;
      batch::Batch one = batch_;
      one.rows = {BatchRow{t.row.slot, t.row.write_slot, t.row.T, t.row.token_offset, 0}};
      one.page_table = fresh_page_table(1);
      one.validate();
      if (t.kind == RowKind::Prefill && t.fresh) zero_fresh_slots({TargetRow{one.rows[0], RowKind::Prefill, true, false}});
      std::vector<std::vector<float>> payload(pools_.size(), std::vector<float>(static_cast<std::size_t>(geo_.elems(s_.cfg))));
      const auto ls = layers(nullptr, &payload);
      for (std::size_t l = 0; l < ls.size(); ++l) {
        std::vector<float> discarded(tail_inputs_[l].T * static_cast<std::size_t>(s_.cfg.HV * s_.cfg.V));
        batch::verify_replay(one, ls[l], tail_inputs_[l], discarded);
      }
      one.rows[0].accepted = n;
      batch::commit_replay(one, ls);
    }
  }
  // PadRowWritesSlot0 / PadIndexWraps: every PAD row with a window reads (and, committing, writes) slot 0, or
  // under the -1 convention the last slot (pool[-1]); in verify every real row is left out (it was verified
  // already), in commit it stays as it is.
  batch::Batch pad_rows_alias(const batch::Batch& b, bool commit, const std::vector<TargetRow>& wire) const {
    batch::Batch alias = b;
    const std::int32_t to = fault_ == Fault::PadRowWritesSlot0 ? 0 : s_.num_slots - 1;
    for (std::size_t i = 0; i < alias.rows.size(); ++i) {
      BatchRow& r = alias.rows[i];
      const bool wraps = fault_ == Fault::PadRowWritesSlot0 || wire[i].row.slot == -1;
      if (b.rows[i].slot == kPadSlot && r.T > 0 && wraps) {
        r.slot = r.write_slot = to;
        r.accepted = std::max(r.T, 1);  // a PAD row carries accepted = T
      } else if (!commit) {
        r.slot = r.write_slot = kPadSlot;
      }
    }
    return alias;
  }

  // VerifyScratchInIdleSlot: the highest slot never allocated holds the step's scratch (zeros) until the commit
  // puts its bytes back.
  void borrow_idle_slot() {
    borrowed_ = -1;
    for (std::int32_t s = s_.num_slots - 1; s >= 0 && borrowed_ < 0; --s)
      if (!allocated_.count(s)) borrowed_ = s;
    if (borrowed_ < 0) return;
    saved_.clear();
    for (std::int32_t l = 0; l < s_.cfg.num_layers; ++l) {
      saved_.push_back(get(l, borrowed_));
      put(l, borrowed_, std::vector<float>(static_cast<std::size_t>(s_.cfg.state_elems()), 0.0f));
    }
  }
  void return_idle_slot() {
    if (borrowed_ < 0) return;
    for (std::int32_t l = 0; l < s_.cfg.num_layers; ++l) put(l, borrowed_, saved_[static_cast<std::size_t>(l)]);
    borrowed_ = -1;
  }
  // CommitSpillsIntoGap: every written slot's last state element is also stored one past the state.
  void spill_into_gaps(const batch::Batch& b) {
    const std::int64_t E = s_.cfg.state_elems(), stride = s_.pool_geometry().stride(s_.cfg);
    if (stride == E) return;
    for (const auto& r : b.rows)
      if (r.slot != kPadSlot && r.write_slot != kPadSlot && r.accepted > 0)
        for (auto& pool : pools_) pool[static_cast<std::size_t>(r.write_slot * stride + E)] = pool[static_cast<std::size_t>(r.write_slot * stride + E - 1)];
  }
  // PadOutputsFromZeroState: each PAD row's window run from a zero state, its outputs stored as the real rows'.
  void pad_outputs_from_zero_state(const std::vector<TargetRow>& rows, const std::vector<SequenceInputs>& inputs,
                                   std::vector<std::vector<float>>& out) const {
    const auto& cfg = s_.cfg;
    const std::size_t per = static_cast<std::size_t>(cfg.HV) * cfg.V;
    for (const auto& r : rows) {
      if (r.row.slot != kPadSlot) continue;
      for (std::size_t l = 0; l < inputs.size(); ++l) {
        std::vector<float> S(static_cast<std::size_t>(cfg.state_elems()), 0.0f), o;
        run_recurrent<float>(cfg, s_.params[l], inputs[l].slice(cfg, r.row.token_offset, r.row.T), S, o);
        round_to_act_dtype(cfg, o);
        std::copy(o.begin(), o.end(), out[l].begin() + static_cast<std::ptrdiff_t>(r.row.token_offset * per));
      }
    }
  }

  Fault fault_;
  const TokenHook* precision_;
  std::set<std::int32_t> allocated_;  // VerifyScratchInIdleSlot
  std::int32_t borrowed_ = -1;
  std::vector<std::vector<float>> saved_;
  PayloadGeometry geo_;
  batch::Batch batch_;
  std::vector<std::vector<float>> payload_;  // [layer][num_pages * page_tokens * row_width]
  std::vector<SequenceInputs> tail_inputs_;  // GraphTailProcessed: the last step's packed tokens
  std::vector<TargetRow> index_buffer_;      // CaptureWritesLiveState: the last step's real rows
  std::map<std::pair<std::int32_t, std::int32_t>, Baked> baked_;  // GraphReplay*: per bucket (rows, T)
  std::int64_t step_count_ = 0;
};

}  // namespace

std::unique_ptr<Target> make_replay_target(Fault fault) { return std::make_unique<ReplayTarget>(fault, nullptr); }

std::unique_ptr<Target> make_replay_tf32_target() {
  static const Tf32Operands tf32;
  return std::make_unique<ReplayTarget>(Fault::None, &tf32);
}

}  // namespace replayssm::ref
