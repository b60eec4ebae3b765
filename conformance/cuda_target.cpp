#include "cuda_target.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include "cuda_bytes.hpp"
#include "cuda_target_base.hpp"
#include "replayssm/cuda/kernels.hpp"
#include "replayssm/error.hpp"
#include "replayssm/tensor.hpp"
#include "replayssm/lifecycle/target.hpp"

namespace replayssm::conformance {

namespace {

using ref::RowKind;
using ref::SequenceInputs;
using ref::TargetRow;

class CudaTarget : public CudaTargetBase {
 public:
  explicit CudaTarget(bool replay) : replay_(replay) {}
  std::string name() const override { return replay_ ? "cuda" : "cuda_full_state"; }
  std::string design() const override { return replay_ ? "replay" : "full_state"; }

  void setup(const ref::EngineSetup& s) override {
    s_ = s;
    cuda::check_supported(s.cfg);
    const auto& cfg = s.cfg;
    pool_geo_ = s.pool_geometry();
    stride_ = pool_geo_.stride(cfg);
    max_rows_ = s.max_rows();
    payload_ = s.payload_geometry();
    batch_ = std::make_unique<cuda::DeviceBatch>(cfg, pool_geo_, payload_, s.max_T, max_rows_);
    const std::size_t ssz = dtype_size(cfg.state_dtype);
    pools_.clear();
    bufs_.clear();
    std::vector<float> poison(static_cast<std::size_t>(s.num_slots * stride_), s.poison);
    const auto poison_bytes = encode_values(cfg.state_dtype, poison);
    for (int l = 0; l < cfg.num_layers; ++l) {
      pools_.emplace_back(static_cast<std::size_t>(s.num_slots * stride_) * ssz);
      pools_.back().upload(poison_bytes.data(), poison_bytes.size());
      Layer L;
      L.A_log = cuda::DeviceBuffer(s.params[l].A_log.size() * 4);
      L.A_log.upload(s.params[l].A_log.data(), s.params[l].A_log.size() * 4);
      L.dt_bias = cuda::DeviceBuffer(s.params[l].dt_bias.size() * 4);
      L.dt_bias.upload(s.params[l].dt_bias.data(), s.params[l].dt_bias.size() * 4);
      if (replay_)
        L.work = cuda::DeviceBuffer(static_cast<std::size_t>(cuda::payload_bytes(cfg, payload_)));
      else
        L.work = cuda::DeviceBuffer(static_cast<std::size_t>(cuda::full_state_scratch_bytes(cfg, max_rows_, s.max_T)));
      bufs_.push_back(std::move(L));
    }
    std::vector<cuda::LayerPointers> ptrs;
    for (int l = 0; l < cfg.num_layers; ++l) ptrs.push_back(layer_ptrs(l));
    batch_->set_layers(ptrs);
  }
  void allocate(std::int32_t) override {}

  std::vector<std::vector<float>> step(const std::vector<TargetRow>& rows,
                                       const std::vector<SequenceInputs>& inputs) override {
    const auto& cfg = s_.cfg;
    const std::size_t ssz = dtype_size(cfg.state_dtype);
    const std::int64_t total = inputs.empty() ? 0 : inputs[0].T;
    // Fresh prefill rows start from a zero state whatever the slot held.
    for (const auto& r : rows)
      if (r.row.slot != kPadSlot && r.kind == RowKind::Prefill && r.fresh) {
        const std::vector<std::uint8_t> zeros(static_cast<std::size_t>(cfg.state_elems()) * ssz, 0);
        for (int l = 0; l < cfg.num_layers; ++l)
          pools_[l].upload(zeros.data(), zeros.size(), static_cast<std::size_t>(r.row.slot * stride_) * ssz);
      }
    rows_.clear();
    for (const auto& r : rows) {
      BatchRow b = r.row;
      b.accepted = r.kind == RowKind::Prefill ? b.T : 0;  // prefill chunks are committed inside the step
      rows_.push_back(b);
    }
    // A fresh, permuted page table every step (rows never share a page).
    ++step_;
    std::vector<std::int32_t> pages;
    if (replay_) {
      std::vector<std::int32_t> perm(static_cast<std::size_t>(payload_.num_pages));
      for (std::int32_t i = 0; i < payload_.num_pages; ++i) perm[static_cast<std::size_t>(i)] = i;
      std::rotate(perm.begin(), perm.begin() + (7 * step_) % payload_.num_pages, perm.end());
      std::reverse(perm.begin(), perm.end());
      pages.assign(perm.begin(), perm.begin() + static_cast<std::ptrdiff_t>(rows.size() * static_cast<std::size_t>(payload_.pages_per_row)));
    }
    batch_->set_rows(rows_, pages, total);
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
      if (total > 0) {
        if (replay_) cuda::verify_replay(*batch_, layer_ptrs(l), ti, o.get());
        else cuda::verify_full_state(*batch_, layer_ptrs(l), ti, o.get());
      }
      cuda::synchronize();
      std::vector<std::uint8_t> ob(o_elems * asz);
      if (!ob.empty()) o.download(ob.data(), ob.size());
      out.push_back(decode_values(cfg.act_dtype, ob));
    }
    commit_now();
    return out;
  }

  void commit(const std::vector<TargetRow>& rows) override {
    std::vector<std::int32_t> acc;
    for (std::size_t i = 0; i < rows.size(); ++i)
      acc.push_back(rows[i].kind == RowKind::Verify && rows[i].row.slot != kPadSlot ? rows[i].row.accepted : 0);
    batch_->set_accepted(acc);
    commit_now();
  }
  void copy_slot(std::int32_t src, std::int32_t dst) override {
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
    pools_[layer].download(tmp.data(), n, static_cast<std::size_t>(slot * stride_) * ssz);
    return decode_values(s_.cfg.state_dtype, tmp);
  }
  std::vector<float> pool(std::int32_t layer) const override {
    std::vector<std::uint8_t> tmp(pools_[layer].bytes());
    pools_[layer].download(tmp.data(), tmp.size());
    return decode_values(s_.cfg.state_dtype, tmp);
  }

 private:
  struct Layer {
    cuda::DeviceBuffer A_log, dt_bias, work;
  };
  cuda::LayerPointers layer_ptrs(int l) const {
    cuda::LayerPointers p;
    p.pool = pools_[l].get();
    p.A_log = bufs_[l].A_log.as<const float>();
    p.dt_bias = bufs_[l].dt_bias.as<const float>();
    (replay_ ? p.payload : p.scratch) = bufs_[l].work.get();
    return p;
  }
  void commit_now() {
    if (replay_) cuda::commit_replay(*batch_);
    else cuda::commit_copy(*batch_);
    cuda::synchronize();
  }

  bool replay_;
  std::int64_t stride_ = 0;
  PoolGeometry pool_geo_;
  PayloadGeometry payload_;
  std::int32_t max_rows_ = 0;
  std::int32_t step_ = 0;
  std::unique_ptr<cuda::DeviceBatch> batch_;
  std::vector<cuda::DeviceBuffer> pools_;
  std::vector<Layer> bufs_;
  std::vector<BatchRow> rows_;
};

}  // namespace

int register_cuda_targets() {
  ref::register_target("cuda", [](ref::Fault f) -> std::unique_ptr<ref::Target> {
    require(f == ref::Fault::None, "fault", "the cuda targets carry no injected faults");
    return std::make_unique<CudaTarget>(true);
  });
  ref::register_target("cuda_full_state", [](ref::Fault f) -> std::unique_ptr<ref::Target> {
    require(f == ref::Fault::None, "fault", "the cuda targets carry no injected faults");
    return std::make_unique<CudaTarget>(false);
  });
  register_cuda_fused_target();
  return cuda::device_count();
}

}  // namespace replayssm::conformance
