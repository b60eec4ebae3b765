// The "cuda_fused" lifecycle target: the fused ReplaySSM step (cuda::verify_fused) behind the reference's
// Target interface, with its commits deferred to the next step (docs/lifecycle.md, "Deferred commits").
//
// A step's commit() launches nothing: the rows and their accepted counts become the pending commit, whose
// records stay in the payload buffer that step captured into. The next step's fused launches replay them at
// the start of its verify, for every row that continues in the slot its commit lands in; the other pending
// rows (the request left the batch, finished, was preempted, or its slot is refilled by a fresh prefill) are
// resolved first with a standalone commit_replay on exactly those rows. allocate() and copy_slot() resolve
// every pending commit before the slot is reused or read. Reads by the judge (committed_state, pool) see the
// resolved view: the raw pool with the pending commit replayed into a copy, never into the pool itself; a
// wrong fused commit therefore shows up one step later, in that step's outputs and in the view built on the
// checkpoint it stored.
//
// Fault::OffByOneAccepted is this target's seeded slip (the teeth of the deferred rule): the fused launches
// replay n - 1 of a pending commit's n records (standalone resolves and the judge's view keep n), as a fused
// kernel committing the wrong count would.
#include <algorithm>
#include <memory>
#include <set>

#include "cuda_bytes.hpp"
#include "cuda_target_base.hpp"
#include "cuda_target.hpp"
#include "replayssm/cuda/kernels.hpp"
#include "replayssm/error.hpp"
#include "replayssm/lifecycle/target.hpp"

namespace replayssm::conformance {

namespace {

using ref::RowKind;
using ref::SequenceInputs;
using ref::TargetRow;

bool pending_row(const BatchRow& b) { return b.slot != kPadSlot && b.write_slot != kPadSlot && b.accepted > 0; }

class CudaFusedTarget : public CudaTargetBase {
 public:
  explicit CudaFusedTarget(bool slip) : slip_(slip) {}
  std::string name() const override { return "cuda_fused"; }
  std::string design() const override { return "replay"; }

  void setup(const ref::EngineSetup& s) override {
    s_ = s;
    cuda::check_supported(s.cfg);
    const auto& cfg = s.cfg;
    geo_ = s.pool_geometry();
    stride_ = geo_.stride(cfg);
    pay_ = s.payload_geometry();
    const std::int32_t rows = s.max_rows();
    cur_ = std::make_unique<cuda::DeviceBatch>(cfg, geo_, pay_, s.max_T, rows);
    prev_ = std::make_unique<cuda::DeviceBatch>(cfg, geo_, pay_, s.max_T, rows);
    res_ = std::make_unique<cuda::DeviceBatch>(cfg, geo_, pay_, s.max_T, rows);
    const std::vector<float> poison(static_cast<std::size_t>(s.num_slots * stride_), s.poison);
    const auto poison_bytes = encode_values(cfg.state_dtype, poison);
    pools_.clear();
    views_.clear();
    params_.clear();
    payloads_[0].clear();
    payloads_[1].clear();
    for (int l = 0; l < cfg.num_layers; ++l) {
      pools_.emplace_back(poison_bytes.size());
      pools_.back().upload(poison_bytes.data(), poison_bytes.size());
      views_.emplace_back(poison_bytes.size());
      Params p;
      p.A_log = cuda::DeviceBuffer(s.params[l].A_log.size() * 4);
      p.A_log.upload(s.params[l].A_log.data(), s.params[l].A_log.size() * 4);
      p.dt_bias = cuda::DeviceBuffer(s.params[l].dt_bias.size() * 4);
      p.dt_bias.upload(s.params[l].dt_bias.data(), s.params[l].dt_bias.size() * 4);
      params_.push_back(std::move(p));
      for (auto& b : payloads_) b.emplace_back(static_cast<std::size_t>(cuda::payload_bytes(cfg, pay_)));
    }
    pending_.clear();
    view_valid_ = false;
  }
  // The slot is (re)allocated to a request: no pending commit may land in it afterwards.
  void allocate(std::int32_t) override { resolve(all_pending()); }

  std::vector<std::vector<float>> step(const std::vector<TargetRow>& rows,
                                       const std::vector<SequenceInputs>& inputs) override {
    const auto& cfg = s_.cfg;
    view_valid_ = false;
    const std::int64_t total = inputs.empty() ? 0 : inputs[0].T;
    const auto nrows = rows.size();
    // Which pending row each row continues: a real, non-fresh row whose slot a pending commit lands in.
    std::vector<int> from(nrows, -1);
    std::vector<bool> folded(pending_.size(), false);
    for (std::size_t j = 0; j < nrows; ++j) {
      const auto& r = rows[j];
      if (r.row.slot == kPadSlot || (r.kind == RowKind::Prefill && r.fresh)) continue;
      for (std::size_t i = 0; i < pending_.size(); ++i)
        if (!folded[i] && pending_row(pending_[i]) && pending_[i].write_slot == r.row.slot) {
          from[j] = static_cast<int>(i);
          folded[i] = true;
          break;
        }
    }
    std::vector<std::size_t> rest;  // pending commits this step cannot fold: resolved standalone, first
    for (std::size_t i = 0; i < pending_.size(); ++i)
      if (pending_row(pending_[i]) && !folded[i]) rest.push_back(i);
    resolve(rest);
    // Fresh prefill rows start from a zero state whatever the slot held.
    const std::size_t ssz = dtype_size(cfg.state_dtype);
    for (const auto& r : rows)
      if (r.row.slot != kPadSlot && r.kind == RowKind::Prefill && r.fresh) {
        const std::vector<std::uint8_t> zeros(static_cast<std::size_t>(cfg.state_elems()) * ssz, 0);
        for (int l = 0; l < cfg.num_layers; ++l)
          pools_[l].upload(zeros.data(), zeros.size(), static_cast<std::size_t>(r.row.slot * stride_) * ssz);
      }
    // This step's rows and page table (a fresh rotation of the pages every step, as the "cuda" target).
    std::vector<BatchRow> now;
    for (const auto& r : rows) now.push_back(BatchRow{r.row.slot, r.row.write_slot, r.row.T, r.row.token_offset, 0});
    ++step_;
    std::vector<std::int32_t> perm(static_cast<std::size_t>(pay_.num_pages));
    for (std::int32_t i = 0; i < pay_.num_pages; ++i) perm[static_cast<std::size_t>(i)] = i;
    std::rotate(perm.begin(), perm.begin() + (7 * step_) % pay_.num_pages, perm.end());
    std::reverse(perm.begin(), perm.end());
    const auto ppr = static_cast<std::size_t>(pay_.pages_per_row);
    std::vector<std::int32_t> pages(perm.begin(), perm.begin() + static_cast<std::ptrdiff_t>(nrows * ppr));
    // The previous step aligned with this one: row j is the pending row it continues (with that row's pages),
    // or an empty PAD row on pages no folded row uses.
    std::vector<BatchRow> prev_rows;
    std::vector<std::int32_t> prev_pages;
    std::set<std::int32_t> used;
    for (std::size_t j = 0; j < nrows; ++j)
      if (from[j] >= 0)
        for (std::size_t p = 0; p < ppr; ++p) used.insert(pending_pages_[static_cast<std::size_t>(from[j]) * ppr + p]);
    std::int32_t spare = 0;
    for (std::size_t j = 0; j < nrows; ++j) {
      if (from[j] >= 0) {
        BatchRow b = pending_[static_cast<std::size_t>(from[j])];
        if (slip_) b.accepted -= 1;  // the seeded slip: one record short
        if (!pending_row(b)) b = BatchRow{kPadSlot, kPadSlot, 0, 0, 0};  // n - 1 = 0: nothing replayed
        prev_rows.push_back(b);
        for (std::size_t p = 0; p < ppr; ++p)
          prev_pages.push_back(pending_pages_[static_cast<std::size_t>(from[j]) * ppr + p]);
      } else {
        prev_rows.push_back(BatchRow{kPadSlot, kPadSlot, 0, 0, 0});
        for (std::size_t p = 0; p < ppr; ++p) {
          while (used.count(spare)) ++spare;
          prev_pages.push_back(spare++);
        }
      }
    }
    if (!nrows) prev_pages.clear();
    cur_->set_rows(now, pages, total);
    prev_->set_rows(prev_rows, prev_pages, std::max<std::int64_t>(pending_total_, 0));
    const std::size_t asz = dtype_size(cfg.act_dtype);
    std::vector<std::vector<float>> out;
    for (int l = 0; l < cfg.num_layers; ++l) {
      const auto& in = inputs[static_cast<std::size_t>(l)];
      cuda::DeviceBuffer q(in.q.size() * asz + 16), k(in.k.size() * asz + 16), v(in.v.size() * asz + 16),
          a(in.a.size() * asz + 16), b(in.b.size() * asz + 16);
      const auto up = [&](cuda::DeviceBuffer& d, const std::vector<float>& x) {
        const auto e = encode_values(cfg.act_dtype, x);
        if (!e.empty()) d.upload(e.data(), e.size());
      };
      up(q, in.q), up(k, in.k), up(v, in.v), up(a, in.a), up(b, in.b);
      const std::size_t o_elems = static_cast<std::size_t>(total) * cfg.HV * cfg.V;
      cuda::DeviceBuffer o(o_elems * asz + 16);
      o.fill_bytes(0xff);  // NaN in F32 and BF16: PAD rows must really be written with zeros
      const cuda::TokenInputs ti{q.get(), k.get(), v.get(), a.get(), b.get()};
      if (total > 0)
        cuda::verify_fused(*cur_, *prev_, payloads_[1 - cur_buf_][l].get(), layer(l, pools_, cur_buf_), ti, o.get());
      cuda::synchronize();
      std::vector<std::uint8_t> ob(o_elems * asz);
      if (!ob.empty()) o.download(ob.data(), ob.size());
      out.push_back(decode_values(cfg.act_dtype, ob));
    }
    // Every folded commit has landed (or total == 0 and there was none: a row needs a window).
    pending_ = now;
    pending_pages_ = pages;
    pending_total_ = total;
    // A prefill chunk is committed by its step (the protocol's rule, judged between a step and its commit): its
    // whole window is pending from now on, so the view shows it before the commit call; it still lands with the
    // next fused launch or a standalone resolve, like a verify row's commit.
    for (std::size_t j = 0; j < nrows && j < pending_.size(); ++j)
      if (rows[j].row.slot != kPadSlot && rows[j].kind == RowKind::Prefill) pending_[j].accepted = rows[j].row.T;
    if (total == 0) pending_.clear();
    cur_buf_ = 1 - cur_buf_;  // the pending records live in payloads_[1 - cur_buf_]
    return out;
  }

  // The commit is deferred: the rows' accepted counts (a prefill chunk: all T) become the pending commit.
  void commit(const std::vector<TargetRow>& rows) override {
    view_valid_ = false;
    for (std::size_t i = 0; i < rows.size() && i < pending_.size(); ++i) {
      const auto& r = rows[i];
      pending_[i].accepted = r.row.slot == kPadSlot ? 0 : r.kind == RowKind::Prefill ? r.row.T : r.row.accepted;
    }
  }
  void copy_slot(std::int32_t src, std::int32_t dst) override {
    resolve(all_pending());
    const std::size_t ssz = dtype_size(s_.cfg.state_dtype), n = static_cast<std::size_t>(s_.cfg.state_elems()) * ssz;
    std::vector<std::uint8_t> tmp(n);
    for (int l = 0; l < s_.cfg.num_layers; ++l) {
      pools_[l].download(tmp.data(), n, static_cast<std::size_t>(src * stride_) * ssz);
      pools_[l].upload(tmp.data(), n, static_cast<std::size_t>(dst * stride_) * ssz);
    }
  }
  std::vector<float> committed_state(std::int32_t layer, std::int32_t slot) const override {
    const std::size_t ssz = dtype_size(s_.cfg.state_dtype), n = static_cast<std::size_t>(s_.cfg.state_elems()) * ssz;
    std::vector<std::uint8_t> tmp(n);
    view(layer).download(tmp.data(), n, static_cast<std::size_t>(slot * stride_) * ssz);
    return decode_values(s_.cfg.state_dtype, tmp);
  }
  std::vector<float> pool(std::int32_t layer) const override {
    const cuda::DeviceBuffer& v = view(layer);
    std::vector<std::uint8_t> tmp(v.bytes());
    v.download(tmp.data(), tmp.size());
    return decode_values(s_.cfg.state_dtype, tmp);
  }

 private:
  struct Params {
    cuda::DeviceBuffer A_log, dt_bias;
  };
  cuda::LayerPointers layer(int l, const std::vector<cuda::DeviceBuffer>& pools, int buf) const {
    cuda::LayerPointers p;
    p.pool = pools[static_cast<std::size_t>(l)].get();
    p.A_log = params_[static_cast<std::size_t>(l)].A_log.as<const float>();
    p.dt_bias = params_[static_cast<std::size_t>(l)].dt_bias.as<const float>();
    p.payload = payloads_[buf][static_cast<std::size_t>(l)].get();
    return p;
  }
  std::vector<std::size_t> all_pending() const {
    std::vector<std::size_t> v;
    for (std::size_t i = 0; i < pending_.size(); ++i)
      if (pending_row(pending_[i])) v.push_back(i);
    return v;
  }
  // commit_replay of the pending rows `which` (their pages, the pending payload buffer) into `pools`.
  void replay_pending(const std::vector<std::size_t>& which, const std::vector<cuda::DeviceBuffer>& pools) const {
    const auto ppr = static_cast<std::size_t>(pay_.pages_per_row);
    std::vector<BatchRow> rows;
    std::vector<std::int32_t> pages;
    for (auto i : which) {
      rows.push_back(pending_[i]);
      for (std::size_t p = 0; p < ppr; ++p) pages.push_back(pending_pages_[i * ppr + p]);
    }
    res_->set_rows(rows, pages, pending_total_);
    std::vector<cuda::LayerPointers> lp;
    for (int l = 0; l < s_.cfg.num_layers; ++l) lp.push_back(layer(l, pools, 1 - cur_buf_));
    res_->set_layers(lp);
    cuda::commit_replay(*res_);
    cuda::synchronize();
  }
  // Lands the pending rows `which` in the pool and drops them from the pending commit.
  void resolve(const std::vector<std::size_t>& which) {
    if (which.empty()) return;
    view_valid_ = false;
    replay_pending(which, pools_);
    for (auto i : which) pending_[i].accepted = 0;
  }
  // The pool as the judge sees it: the raw pool with the pending commit replayed into a copy.
  const cuda::DeviceBuffer& view(std::int32_t layer) const {
    const auto li = static_cast<std::size_t>(layer);
    if (all_pending().empty()) return pools_[li];
    if (!view_valid_) {
      std::vector<std::uint8_t> tmp(pools_[0].bytes());
      for (std::size_t l = 0; l < pools_.size(); ++l) {
        pools_[l].download(tmp.data(), tmp.size());
        views_[l].upload(tmp.data(), tmp.size());
      }
      replay_pending(all_pending(), views_);
      view_valid_ = true;
    }
    return views_[li];
  }

  bool slip_;
  PoolGeometry geo_;
  PayloadGeometry pay_;
  std::int64_t stride_ = 0;
  std::int32_t step_ = 0;
  int cur_buf_ = 0;  // the payload buffer this step captures into
  std::unique_ptr<cuda::DeviceBatch> cur_, prev_;
  mutable std::unique_ptr<cuda::DeviceBatch> res_;  // resolves and the judge's view
  std::vector<cuda::DeviceBuffer> pools_;
  mutable std::vector<cuda::DeviceBuffer> views_;
  mutable bool view_valid_ = false;
  std::vector<Params> params_;
  std::vector<cuda::DeviceBuffer> payloads_[2];
  std::vector<BatchRow> pending_;  // the last step's rows with their accepted counts (0: nothing pending)
  std::vector<std::int32_t> pending_pages_;
  std::int64_t pending_total_ = 0;
};

}  // namespace

void register_cuda_fused_target() {
  ref::register_target("cuda_fused", [](ref::Fault f) -> std::unique_ptr<ref::Target> {
    require(f == ref::Fault::None || f == ref::Fault::OffByOneAccepted, "fault",
            "the cuda_fused target carries one seeded slip, off_by_one_accepted in its fused launches");
    return std::make_unique<CudaFusedTarget>(f == ref::Fault::OffByOneAccepted);
  });
}

}  // namespace replayssm::conformance
