// The reference targets: full-state oracle, raw-payload replay, corrected-update ring — each with the
// injectable faults of the teeth catalogue (see engine.hpp).
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>

#include "replayssm/error.hpp"
#include "replayssm/reference/engine.hpp"
#include "replayssm/reference/inputs.hpp"

namespace replayssm::ref {

namespace {

// Per-layer state pools: layers x num_slots x stride floats (values representable in the state dtype).
struct Pools {
  std::int64_t stride = 0, elems = 0;
  std::int32_t slots = 0;
  std::vector<std::vector<float>> data;
  void init(const EngineSetup& s) {
    elems = s.cfg.state_elems();
    stride = s.slot_stride ? s.slot_stride : elems;
    slots = s.num_slots;
    data.assign(static_cast<std::size_t>(s.cfg.num_layers),
                std::vector<float>(static_cast<std::size_t>(slots * stride), s.poison));
  }
  std::vector<float> get(std::int32_t l, std::int32_t slot) const {
    require(slot >= 0 && slot < slots, "slot", "is ", slot, ", outside [0, ", slots, ")");
    const auto& d = data[static_cast<std::size_t>(l)];
    return std::vector<float>(d.begin() + slot * stride, d.begin() + slot * stride + elems);
  }
  void put(std::int32_t l, std::int32_t slot, const std::vector<float>& S) {
    require(slot >= 0 && slot < slots, "slot", "is ", slot, ", outside [0, ", slots, ")");
    std::copy(S.begin(), S.end(), data[static_cast<std::size_t>(l)].begin() + slot * stride);
  }
};

SequenceInputs row_inputs(const ModelConfig& cfg, const SequenceInputs& packed, const BatchRow& r) {
  return packed.slice(cfg, r.token_offset, r.T);
}

void write_outputs(const ModelConfig& cfg, std::vector<float>& out, const BatchRow& r, const std::vector<float>& o) {
  std::copy(o.begin(), o.end(), out.begin() + static_cast<std::ptrdiff_t>(r.token_offset) * cfg.HV * cfg.V);
}

std::vector<std::vector<float>> zero_outputs(const ModelConfig& cfg, const std::vector<SequenceInputs>& inputs) {
  std::vector<std::vector<float>> out;
  for (const auto& in : inputs) out.emplace_back(static_cast<std::size_t>(in.T) * cfg.HV * cfg.V, 0.0f);
  return out;
}

// Prefill of one row: from a zero state (fresh: whatever the slot holds is ignored) or from current(), all
// tokens committed, the state rounded once to the state dtype.
template <class Current>
std::vector<float> prefill_state(const ModelConfig& cfg, const LayerParams& p, const SequenceInputs& in, bool fresh,
                                 Current&& current, std::vector<float>& o) {
  std::vector<float> S = fresh ? std::vector<float>(static_cast<std::size_t>(cfg.state_elems()), 0.0f) : current();
  run_recurrent<float>(cfg, p, in, S, o, nullptr, RecurrentOptions{false, true});
  round_to_state_dtype(cfg, S);
  return S;
}

// ---------------------------------------------------------------------------------------------------------
class FullStateTarget : public Target {
 public:
  std::string name() const override { return "full_state"; }
  bool bit_exact() const override { return true; }
  void setup(const EngineSetup& s) override {
    s_ = s;
    pools_.init(s);
  }
  void allocate(std::int32_t) override {}
  std::vector<std::vector<float>> step(const std::vector<TargetRow>& rows,
                                       const std::vector<SequenceInputs>& inputs) override {
    const auto& cfg = s_.cfg;
    auto out = zero_outputs(cfg, inputs);
    scratch_.assign(rows.size(), {});
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const auto& r = rows[i];
      if (r.row.slot == kPadSlot) continue;  // no read, no write, zero output
      for (std::int32_t l = 0; l < cfg.num_layers; ++l) {
        const auto in = row_inputs(cfg, inputs[static_cast<std::size_t>(l)], r.row);
        const auto& p = s_.params[static_cast<std::size_t>(l)];
        if (r.kind == RowKind::Prefill) {
          std::vector<float> o;
          pools_.put(l, r.row.slot, prefill_state(cfg, p, in, r.fresh, [&] { return pools_.get(l, r.row.slot); }, o));
          write_outputs(cfg, out[static_cast<std::size_t>(l)], r.row, o);
        } else {
          auto v = full_state_verify(cfg, p, in, pools_.get(l, r.row.slot), StateRounding::AtCommit);
          write_outputs(cfg, out[static_cast<std::size_t>(l)], r.row, v.o);
          scratch_[i].push_back(std::move(v));
        }
      }
    }
    return out;
  }
  void commit(const std::vector<TargetRow>& rows) override {
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const auto& r = rows[i];
      if (r.row.slot == kPadSlot || r.kind != RowKind::Verify || r.row.write_slot == kPadSlot) continue;
      require(i < scratch_.size() && !scratch_[i].empty(), "commit", "row ", i, " was not verified");
      for (std::int32_t l = 0; l < s_.cfg.num_layers; ++l) {
        const auto& v = scratch_[i][static_cast<std::size_t>(l)];
        const auto S0 = pools_.get(l, r.row.slot);
        const int n = r.row.accepted;
        if (n == 0 && r.row.write_slot == r.row.slot) continue;  // n = 0 in place: nothing is written
        pools_.put(l, r.row.write_slot, full_state_commit(v, S0, n));
      }
    }
  }
  void copy_slot(std::int32_t src, std::int32_t dst) override {
    for (std::int32_t l = 0; l < s_.cfg.num_layers; ++l) pools_.put(l, dst, pools_.get(l, src));
  }
  std::vector<float> committed_state(std::int32_t layer, std::int32_t slot) const override {
    return pools_.get(layer, slot);
  }
  std::vector<float> pool(std::int32_t layer) const override { return pools_.data[static_cast<std::size_t>(layer)]; }

 private:
  EngineSetup s_;
  Pools pools_;
  std::vector<std::vector<FullStateVerify>> scratch_;  // [row][layer]
};

// ---------------------------------------------------------------------------------------------------------
// Token step of the raw replay with the math faults of the catalogue. With Fault::None it is token_step.
void faulty_replay_token(const ModelConfig& cfg, const LayerParams& p, const SequenceInputs& in, int t,
                         std::vector<float>& S, Fault fault) {
  if (fault != Fault::GvaModulo && fault != Fault::MissingDecayInReplay && fault != Fault::BetaRoundingOnePath) {
    std::vector<float> o(static_cast<std::size_t>(cfg.HV) * cfg.V);
    token_step<float>(cfg, p, in, t, S.data(), o.data());
    return;
  }
  const int K = cfg.K, V = cfg.V;
  std::vector<float> kn(static_cast<std::size_t>(cfg.H) * K);
  for (int h = 0; h < cfg.H; ++h)
    l2normalize<float>(cfg, &in.k[(static_cast<std::size_t>(t) * cfg.H + h) * K], K, 1.0f,
                       &kn[static_cast<std::size_t>(h) * K]);
  std::vector<float> g(static_cast<std::size_t>(cfg.a_width())), alpha(static_cast<std::size_t>(K));
  for (int hv = 0; hv < cfg.HV; ++hv) {
    const int h = fault == Fault::GvaModulo ? hv % cfg.H : cfg.key_head(hv);
    const float* kh = &kn[static_cast<std::size_t>(h) * K];
    log_decay<float>(cfg, p, in, t, hv, g.data());
    for (int c = 0; c < K; ++c)
      alpha[c] = fault == Fault::MissingDecayInReplay ? 1.0f : std::exp(g[cfg.op == Op::GDN ? 0 : c]);
    float beta = beta_of<float>(cfg, in, t, hv);
    if (fault == Fault::BetaRoundingOnePath) beta = round_to(DType::BF16, beta);
    const float* vv = &in.v[(static_cast<std::size_t>(t) * cfg.HV + hv) * V];
    float* Sh = S.data() + static_cast<std::size_t>(hv) * K * V;
    for (int j = 0; j < V; ++j) {
      float kv = 0;
      for (int c = 0; c < K; ++c) {
        float& s = Sh[state_index(cfg, c, j)];
        s = alpha[c] * s;
        kv += s * kh[c];
      }
      const float d = beta * (vv[j] - kv);
      for (int c = 0; c < K; ++c) {
        float& s = Sh[state_index(cfg, c, j)];
        s = s + kh[c] * d;
      }
    }
  }
}

class ReplayTarget : public Target {
 public:
  explicit ReplayTarget(Fault f) : fault_(f) {}
  std::string name() const override { return "replay"; }
  bool bit_exact() const override { return true; }
  void setup(const EngineSetup& s) override {
    s_ = s;
    pools_.init(s);
    geo_.page_tokens = s.page_tokens;
    geo_.pages_per_row = (s.max_T + s.page_tokens - 1) / s.page_tokens;
    geo_.num_pages = 2 * (s.num_slots + 8) * geo_.pages_per_row;
    width_ = PayloadGeometry::row_width(s.cfg);
    payload_.assign(static_cast<std::size_t>(s.cfg.num_layers), {});
  }
  void allocate(std::int32_t) override {}

  std::vector<std::vector<float>> step(const std::vector<TargetRow>& rows,
                                       const std::vector<SequenceInputs>& inputs) override {
    const auto& cfg = s_.cfg;
    auto out = zero_outputs(cfg, inputs);
    // Fresh permuted page table for this step; pages not mapped stay NaN so a commit reading a page the
    // verify did not write would poison the state.
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
    page_table_.assign(rows.size() * static_cast<std::size_t>(geo_.pages_per_row), 0);
    require(page_table_.size() <= perm.size(), "rows", "more rows than payload pages");
    std::copy(perm.begin(), perm.begin() + static_cast<std::ptrdiff_t>(page_table_.size()), page_table_.begin());
    geo_.validate_page_table(page_table_, static_cast<std::int32_t>(rows.size()));
    for (auto& buf : payload_)
      buf.assign(static_cast<std::size_t>(geo_.num_pages) * geo_.page_tokens * width_,
                 std::numeric_limits<float>::quiet_NaN());

    for (std::size_t i = 0; i < rows.size(); ++i) {
      const auto& r = rows[i];
      std::int32_t slot = r.row.slot;
      if (slot == kPadSlot) {
        if (fault_ != Fault::PadRowWritesSlot0 || r.row.T == 0) continue;
        slot = 0;  // the fault: a padding row aliases slot 0
      }
      for (std::int32_t l = 0; l < cfg.num_layers; ++l) {
        const auto in = row_inputs(cfg, inputs[static_cast<std::size_t>(l)], r.row);
        const auto& p = s_.params[static_cast<std::size_t>(l)];
        std::vector<float> o;
        if (r.kind == RowKind::Prefill) {
          pools_.put(l, slot, prefill_state(cfg, p, in, r.fresh, [&] { return pools_.get(l, slot); }, o));
        } else {
          auto rv = replay_verify(cfg, p, in, pools_.get(l, slot));
          o = std::move(rv.o);
          capture(l, i, rv.payload);
        }
        if (r.row.slot != kPadSlot) write_outputs(cfg, out[static_cast<std::size_t>(l)], r.row, o);
      }
    }
    return out;
  }

  void commit(const std::vector<TargetRow>& rows) override {
    const auto& cfg = s_.cfg;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const auto& r = rows[i];
      if (r.kind != RowKind::Verify) continue;
      std::int32_t slot = r.row.slot, wslot = r.row.write_slot;
      if (slot == kPadSlot) {
        if (fault_ != Fault::PadRowWritesSlot0 || r.row.T == 0) continue;
        slot = wslot = 0;
      }
      if (wslot == kPadSlot) continue;
      int n = r.row.accepted;
      require(n >= 0 && n <= r.row.T, "rows[" + std::to_string(i) + "].accepted", "is ", n, ", outside [0, T=",
              r.row.T, "]");
      if (fault_ == Fault::OffByOneAccepted && n >= 1) n -= 1;
      if (fault_ == Fault::ZeroAcceptedAsOne && n == 0) n = 1;
      if (fault_ == Fault::FullAcceptClamped && n == r.row.T && n > 1) n -= 1;
      if (fault_ == Fault::PadRowWritesSlot0 && r.row.slot == kPadSlot) n = std::max(n, 1);
      if (n == 0 && wslot == slot) continue;  // nothing to replay, nothing is written
      for (std::int32_t l = 0; l < cfg.num_layers; ++l) {
        const RawPayload pl = read_payload(l, i, r.row.T);
        std::vector<float> S = pools_.get(l, slot);
        SequenceInputs in;
        in.T = pl.T;
        in.k = pl.k;
        in.v = pl.v;
        in.a = pl.a;
        in.b = pl.b;
        in.q.assign(pl.k.size(), 0.0f);
        for (int t = 0; t < n; ++t) faulty_replay_token(cfg, s_.params[static_cast<std::size_t>(l)], in, t, S, fault_);
        round_to_state_dtype(cfg, S);
        if (fault_ == Fault::TransposedLayout) {
          const StateLayout other = cfg.layout == StateLayout::KV ? StateLayout::VK : StateLayout::KV;
          S = convert_layout(cfg, S, cfg.layout, other);
        }
        pools_.put(l, wslot, S);
      }
    }
  }
  void copy_slot(std::int32_t src, std::int32_t dst) override {
    for (std::int32_t l = 0; l < s_.cfg.num_layers; ++l) pools_.put(l, dst, pools_.get(l, src));
  }
  std::vector<float> committed_state(std::int32_t layer, std::int32_t slot) const override {
    return pools_.get(layer, slot);
  }
  std::vector<float> pool(std::int32_t layer) const override { return pools_.data[static_cast<std::size_t>(layer)]; }

 private:
  std::size_t phys_row(std::size_t row, int t) const {
    const auto page = page_table_[row * static_cast<std::size_t>(geo_.pages_per_row) +
                                  static_cast<std::size_t>(t / geo_.page_tokens)];
    return static_cast<std::size_t>(page) * static_cast<std::size_t>(geo_.page_tokens) +
           static_cast<std::size_t>(t % geo_.page_tokens);
  }
  // Payload row layout: [k (H*K) | v (HV*V) | a (HV*a_width) | b (HV)], activation-dtype values.
  void capture(std::int32_t l, std::size_t row, const RawPayload& pl) {
    const auto& cfg = s_.cfg;
    const std::size_t nk = static_cast<std::size_t>(cfg.H) * cfg.K, nv = static_cast<std::size_t>(cfg.HV) * cfg.V,
                      na = static_cast<std::size_t>(cfg.HV) * cfg.a_width(), nb = static_cast<std::size_t>(cfg.HV);
    auto& buf = payload_[static_cast<std::size_t>(l)];
    for (int t = 0; t < pl.T; ++t) {
      float* dst = buf.data() + phys_row(row, t) * static_cast<std::size_t>(width_);
      std::copy_n(pl.k.begin() + static_cast<std::ptrdiff_t>(t * nk), nk, dst);
      std::copy_n(pl.v.begin() + static_cast<std::ptrdiff_t>(t * nv), nv, dst + nk);
      std::copy_n(pl.a.begin() + static_cast<std::ptrdiff_t>(t * na), na, dst + nk + nv);
      std::copy_n(pl.b.begin() + static_cast<std::ptrdiff_t>(t * nb), nb, dst + nk + nv + na);
    }
  }
  RawPayload read_payload(std::int32_t l, std::size_t row, int T) const {
    const auto& cfg = s_.cfg;
    const std::size_t nk = static_cast<std::size_t>(cfg.H) * cfg.K, nv = static_cast<std::size_t>(cfg.HV) * cfg.V,
                      na = static_cast<std::size_t>(cfg.HV) * cfg.a_width(), nb = static_cast<std::size_t>(cfg.HV);
    RawPayload pl;
    pl.T = T;
    const auto& buf = payload_[static_cast<std::size_t>(l)];
    for (int t = 0; t < T; ++t) {
      const float* src = buf.data() + phys_row(row, t) * static_cast<std::size_t>(width_);
      pl.k.insert(pl.k.end(), src, src + nk);
      pl.v.insert(pl.v.end(), src + nk, src + nk + nv);
      pl.a.insert(pl.a.end(), src + nk + nv, src + nk + nv + na);
      pl.b.insert(pl.b.end(), src + nk + nv + na, src + nk + nv + na + nb);
    }
    return pl;
  }

  Fault fault_;
  EngineSetup s_;
  Pools pools_;
  PayloadGeometry geo_;
  std::int64_t width_ = 0;
  std::vector<std::vector<float>> payload_;  // [layer][pages * page_tokens * width]
  std::vector<std::int32_t> page_table_;
  std::int64_t step_count_ = 0;
};

// ---------------------------------------------------------------------------------------------------------
class RingTarget : public Target {
 public:
  explicit RingTarget(Fault f) : fault_(f) {}
  std::string name() const override { return "ring"; }
  bool bit_exact() const override {
    return s_.recon == Reconstruction::Serial && s_.ring_record_dtype == DType::F32 &&
           s_.cfg.state_dtype == DType::F32;
  }
  void setup(const EngineSetup& s) override {
    s_ = s;
    s_.ring.validate();
    require(s_.ring.T >= s_.max_T, "ring.T", "must be >= max_T (", s_.max_T, "), got ", s_.ring.T);
    pools_.init(s);
    P_ = s_.ring.physical();
    cursors_.assign(static_cast<std::size_t>(s.num_slots), spec_ring_reset(s_.ring));
    records_.assign(static_cast<std::size_t>(s.num_slots),
                    std::vector<std::vector<Record>>(static_cast<std::size_t>(s.cfg.num_layers),
                                                     std::vector<Record>(static_cast<std::size_t>(P_))));
  }
  void allocate(std::int32_t slot) override {
    if (fault_ != Fault::StaleCursorOnSlotReuse) cursors_.at(static_cast<std::size_t>(slot)) = spec_ring_reset(s_.ring);
  }

  std::vector<std::vector<float>> step(const std::vector<TargetRow>& rows,
                                       const std::vector<SequenceInputs>& inputs) override {
    const auto& cfg = s_.cfg;
    auto out = zero_outputs(cfg, inputs);
    for (const auto& r : rows) {
      if (r.row.slot == kPadSlot) continue;
      const auto slot = static_cast<std::size_t>(r.row.slot);
      const SpecRingCursors cur = cursors_[slot];
      for (std::int32_t l = 0; l < cfg.num_layers; ++l) {
        const auto in = row_inputs(cfg, inputs[static_cast<std::size_t>(l)], r.row);
        const auto& p = s_.params[static_cast<std::size_t>(l)];
        if (r.kind == RowKind::Prefill) {
          // Prefill writes the checkpoint directly; the ring is empty here because allocation reset it
          // (cursors are per slot and reset exactly once, when the slot is allocated).
          std::vector<float> o;
          pools_.put(l, r.row.slot,
                     prefill_state(cfg, p, in, r.fresh, [&] { return committed_state(l, r.row.slot); }, o));
          write_outputs(cfg, out[static_cast<std::size_t>(l)], r.row, o);
          continue;
        }
        auto& rec = records_[slot][static_cast<std::size_t>(l)];
        std::vector<const Record*> hist;
        for (std::int32_t c = 0; c < cur.write_pos; ++c) hist.push_back(&rec[phys(cur.base + c)]);
        std::vector<float> base_state = pools_.get(l, r.row.slot);
        if (cur.is_flush) {  // fold the committed history into the checkpoint first
          base_state = reconstruct(cfg, base_state, hist, s_.recon);
          round_to_state_dtype(cfg, base_state);
          pools_.put(l, r.row.slot, base_state);
          hist.clear();
        }
        std::vector<Record> window(static_cast<std::size_t>(r.row.T));
        std::vector<float> o_all;
        for (int s = 0; s < r.row.T; ++s) {
          std::vector<const Record*> list = hist;
          for (int j = 0; j < s; ++j) list.push_back(&window[static_cast<std::size_t>(j)]);
          std::vector<float> S = reconstruct(cfg, base_state, list, s_.recon);
          auto o = ring_token(cfg, p, in, s, S, window[static_cast<std::size_t>(s)], s_.recon);
          round_record(window[static_cast<std::size_t>(s)], s_.ring_record_dtype);
          o_all.insert(o_all.end(), o.begin(), o.end());
        }
        // Window records go right after the (possibly folded) history, never over a live record.
        const std::int32_t start = (fault_ == Fault::FlushOverwritesLiveRecord && cur.is_flush) ? cur.base
                                                                                                : cur.base + cur.write_pos;
        for (int s = 0; s < r.row.T; ++s) rec[phys(start + s)] = window[static_cast<std::size_t>(s)];
        round_to_act_dtype(cfg, o_all);
        write_outputs(cfg, out[static_cast<std::size_t>(l)], r.row, o_all);
      }
    }
    return out;
  }

  void commit(const std::vector<TargetRow>& rows) override {
    for (const auto& r : rows) {
      if (r.row.slot == kPadSlot || r.kind != RowKind::Verify) continue;
      auto& cur = cursors_[static_cast<std::size_t>(r.row.slot)];
      const bool flushed = cur.is_flush;
      cur = spec_ring_commit(cur, s_.ring, r.row.accepted);
      if (fault_ == Fault::DoubleCursorAdvance && !flushed) {
        cur.write_pos += r.row.accepted;
        cur.is_flush = cur.write_pos + 2 * s_.ring.T > s_.ring.logical();
      }
    }
  }
  void copy_slot(std::int32_t src, std::int32_t dst) override {
    for (std::int32_t l = 0; l < s_.cfg.num_layers; ++l) pools_.put(l, dst, pools_.get(l, src));
    if (fault_ == Fault::CopyDropsRingRecords) {
      cursors_[static_cast<std::size_t>(dst)] = spec_ring_reset(s_.ring);
      return;
    }
    // A copy of an un-flushed source carries its live records and cursors with it.
    records_[static_cast<std::size_t>(dst)] = records_[static_cast<std::size_t>(src)];
    cursors_[static_cast<std::size_t>(dst)] = cursors_[static_cast<std::size_t>(src)];
  }
  std::vector<float> committed_state(std::int32_t layer, std::int32_t slot) const override {
    const auto& cur = cursors_.at(static_cast<std::size_t>(slot));
    const auto& rec = records_[static_cast<std::size_t>(slot)][static_cast<std::size_t>(layer)];
    std::vector<const Record*> hist;
    for (std::int32_t c = 0; c < cur.write_pos; ++c) hist.push_back(&rec[phys(cur.base + c)]);
    for (const Record* h : hist)
      if (h->u.empty()) return std::vector<float>(static_cast<std::size_t>(s_.cfg.state_elems()),
                                                  std::numeric_limits<float>::quiet_NaN());  // never written
    return reconstruct(s_.cfg, pools_.get(layer, slot), hist, s_.recon);
  }
  std::vector<float> pool(std::int32_t layer) const override { return pools_.data[static_cast<std::size_t>(layer)]; }

 private:
  std::size_t phys(std::int32_t logical) const { return static_cast<std::size_t>(logical & (P_ - 1)); }

  Fault fault_;
  EngineSetup s_;
  Pools pools_;
  std::int32_t P_ = 1;
  std::vector<SpecRingCursors> cursors_;                       // per slot (shared by all layers)
  std::vector<std::vector<std::vector<Record>>> records_;  // [slot][layer][physical position]
};

std::map<std::string, std::function<std::unique_ptr<Target>(Fault)>>& registry() {
  static std::map<std::string, std::function<std::unique_ptr<Target>(Fault)>> r{
      {"full_state", [](Fault) { return std::make_unique<FullStateTarget>(); }},
      {"replay", [](Fault f) { return std::make_unique<ReplayTarget>(f); }},
      {"ring", [](Fault f) { return std::make_unique<RingTarget>(f); }},
  };
  return r;
}

}  // namespace

bool register_target(const std::string& kind, std::function<std::unique_ptr<Target>(Fault)> factory) {
  registry()[kind] = std::move(factory);
  return true;
}

std::vector<std::string> target_kinds() {
  std::vector<std::string> k;
  for (const auto& [name, f] : registry()) k.push_back(name);
  return k;
}

std::unique_ptr<Target> make_target(const std::string& kind, Fault fault) {
  const auto it = registry().find(kind);
  if (it == registry().end()) {
    std::string known;
    for (const auto& n : target_kinds()) known += (known.empty() ? "" : ", ") + n;
    fail("target", "unknown target '", kind, "' (known: ", known, ")");
  }
  return it->second(fault);
}

}  // namespace replayssm::ref
