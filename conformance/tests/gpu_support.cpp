#include "gpu_support.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "replayssm/dtype.hpp"
#include "replayssm/rng.hpp"
#include "replayssm/tensor.hpp"

namespace replayssm::testing {

std::uint64_t env_u64(const char* name, std::uint64_t def) {
  const char* s = std::getenv(name);
  if (!s || !*s) return def;
  return std::strtoull(s, nullptr, 10);
}

std::size_t dsize(DType t) { return dtype_size(t); }

std::vector<std::uint8_t> encode(const std::vector<float>& x, DType t) {
  return Tensor::from_f32(t, {static_cast<std::int64_t>(x.size())}, x).data;
}

std::vector<float> decode(const std::uint8_t* bytes, std::size_t n, DType t) {
  Tensor x;
  x.dtype = t;
  x.shape = {static_cast<std::int64_t>(n)};
  x.data.assign(bytes, bytes + n * dsize(t));
  return x.to_f32();
}

void put(std::vector<std::uint8_t>& img, std::int64_t at, const std::vector<float>& x, DType t) {
  const auto b = encode(x, t);
  std::memcpy(img.data() + at * static_cast<std::int64_t>(dsize(t)), b.data(), b.size());
}

std::vector<float> get(const std::vector<std::uint8_t>& img, std::int64_t at, std::size_t n, DType t) {
  return decode(img.data() + at * static_cast<std::int64_t>(dsize(t)), n, t);
}

void fill_marker(std::vector<std::uint8_t>& img, std::int64_t at, std::int64_t n, DType t, std::uint32_t bits) {
  for (std::int64_t i = at; i < at + n; ++i) {
    if (t == DType::BF16) {
      const std::uint16_t h = static_cast<std::uint16_t>(bits);
      std::memcpy(&img[2 * i], &h, 2);
    } else {
      std::memcpy(&img[4 * i], &bits, 4);
    }
  }
}

std::uint32_t slot_mark(DType t) { return t == DType::BF16 ? kSlotMarkBF16 : kSlotMarkF32; }
std::uint32_t gap_mark(DType t) { return t == DType::BF16 ? kGapMarkBF16 : kGapMarkF32; }
std::uint32_t out_mark(DType t) { return t == DType::BF16 ? kOutMarkBF16 : kOutMarkF32; }

cuda::DeviceBuffer to_device(const std::vector<std::uint8_t>& img) {
  cuda::DeviceBuffer b(img.size());
  b.upload(img.data(), img.size());
  return b;
}
std::vector<std::uint8_t> to_host(const cuda::DeviceBuffer& b) {
  std::vector<std::uint8_t> img(b.bytes());
  b.download(img.data(), img.size());
  return img;
}

namespace {
template <class T>
void shuffle(std::vector<T>& x, Rng& r) {
  for (std::size_t i = x.size(); i > 1; --i) std::swap(x[i - 1], x[static_cast<std::size_t>(r.uniform_int(0, static_cast<std::int64_t>(i) - 1))]);
}
}  // namespace

StepCase make_case(std::uint64_t seed, Op op, const CaseShape& shape) {
  Rng r(derive_seed(seed, 77));
  StepCase c;
  c.seed = seed;
  ModelConfig& m = c.cfg;
  m.name = "gpu-case";
  m.op = op;
  m.H = static_cast<int>(r.uniform_int(1, 2));
  static const int kG[] = {1, 2, 3, 4, 8};
  m.HV = m.H * kG[r.uniform_int(0, 4)];
  if (shape.H) m.H = shape.H;
  if (shape.G) m.HV = m.H * shape.G;
  m.K = shape.K ? shape.K : (r.uniform_int(0, 1) ? 128 : 64);
  m.V = shape.V ? shape.V : (r.uniform_int(0, 1) ? 128 : 64);
  m.state_dtype = r.uniform_int(0, 1) ? DType::BF16 : DType::F32;
  m.act_dtype = r.uniform_int(0, 1) ? DType::BF16 : DType::F32;
  m.layout = r.uniform_int(0, 3) == 0 ? StateLayout::KV : StateLayout::VK;
  m.l2norm = r.uniform_int(0, 1) ? L2Norm::RsqrtMul : L2Norm::DivSqrt;
  m.round_beta_to_act = r.uniform_int(0, 3) == 0;
  m.kda_gate = r.uniform_int(0, 1) ? KdaGate::Softplus : KdaGate::LowerBoundSigmoid;
  m.num_layers = static_cast<int>(r.uniform_int(1, 3));
  if (shape.layers) m.num_layers = shape.layers;
  c.max_T = static_cast<std::int32_t>(r.uniform_int(1, 8));
  const int nrows = shape.rows ? shape.rows : static_cast<int>(r.uniform_int(1, 5));
  c.pool.num_layers = m.num_layers;
  c.pool.num_slots = 2 * nrows + 3;
  c.pool.slot_stride = m.state_elems() + 4 * r.uniform_int(0, 2);
  std::vector<std::int32_t> perm(static_cast<std::size_t>(c.pool.num_slots));
  for (std::size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<std::int32_t>(i);
  shuffle(perm, r);
  c.rows.resize(static_cast<std::size_t>(nrows));
  for (int i = 0; i < nrows; ++i) {
    BatchRow& b = c.rows[static_cast<std::size_t>(i)];
    const bool pad = r.uniform_int(0, 4) == 0;
    if (pad) {
      b.slot = kPadSlot;
      b.T = static_cast<std::int32_t>(r.uniform_int(0, c.max_T));
      b.write_slot = perm[static_cast<std::size_t>(r.uniform_int(0, c.pool.num_slots - 1))];  // must be ignored
      b.accepted = static_cast<std::int32_t>(r.uniform_int(0, b.T));
    } else {
      b.slot = perm[static_cast<std::size_t>(i)];
      b.T = static_cast<std::int32_t>(r.uniform_int(1, c.max_T));
      const auto w = r.uniform_int(0, 5);
      b.write_slot = w <= 2 ? b.slot : w <= 4 ? perm[static_cast<std::size_t>(nrows + i)] : kPadSlot;
      b.accepted = static_cast<std::int32_t>(r.uniform_int(0, b.T));
    }
  }
  // Token windows in a permuted row order with random gaps.
  std::vector<int> order(static_cast<std::size_t>(nrows));
  for (int i = 0; i < nrows; ++i) order[static_cast<std::size_t>(i)] = i;
  shuffle(order, r);
  std::int64_t off = 0;
  for (int i : order) {
    off += r.uniform_int(0, 2);
    c.rows[static_cast<std::size_t>(i)].token_offset = static_cast<std::int32_t>(off);
    off += c.rows[static_cast<std::size_t>(i)].T;
  }
  c.total_tokens = off + r.uniform_int(0, 2);
  if (c.total_tokens == 0) c.total_tokens = 1;
  c.pay.page_tokens = static_cast<std::int32_t>(r.uniform_int(1, 4));
  c.pay.pages_per_row = (c.max_T + c.pay.page_tokens - 1) / c.pay.page_tokens;
  c.pay.num_pages = nrows * c.pay.pages_per_row + static_cast<std::int32_t>(r.uniform_int(0, 3));
  std::vector<std::int32_t> pp(static_cast<std::size_t>(c.pay.num_pages));
  for (std::size_t i = 0; i < pp.size(); ++i) pp[i] = static_cast<std::int32_t>(i);
  shuffle(pp, r);
  c.pages.assign(pp.begin(), pp.begin() + nrows * c.pay.pages_per_row);
  // Schedules mixed per batch: Auto (per-tile) or the other one there is, persistent for [V,K] (PerTile for [K,V],
  // which has no persistent kernels).
  const cuda::Schedule other = c.cfg.layout == StateLayout::VK ? cuda::Schedule::Persistent : cuda::Schedule::PerTile;
  c.sched_full = r.uniform_int(0, 1) ? other : cuda::Schedule::Auto;
  c.sched_replay = r.uniform_int(0, 1) ? other : cuda::Schedule::Auto;
  return c;
}

std::string StepCase::describe() const {
  std::ostringstream os;
  os << "seed=" << seed << " op=" << to_string(cfg.op) << " H=" << cfg.H << " HV=" << cfg.HV << " K=" << cfg.K
     << " V=" << cfg.V << " state=" << dtype_name(cfg.state_dtype) << " act=" << dtype_name(cfg.act_dtype)
     << " layout=" << to_string(cfg.layout) << " l2=" << to_string(cfg.l2norm)
     << " beta_act=" << cfg.round_beta_to_act;
  if (cfg.op == Op::KDA) os << " gate=" << to_string(cfg.kda_gate);
  os << " layers=" << cfg.num_layers << " max_T=" << max_T << " stride=" << pool.slot_stride
     << " page_tokens=" << pay.page_tokens << " sched=" << cuda::to_string(sched_full) << "/"
     << cuda::to_string(sched_replay) << " rows=[";
  for (const auto& b : rows)
    os << "(s" << b.slot << " w" << b.write_slot << " T" << b.T << " @" << b.token_offset << " n" << b.accepted
       << ")";
  os << "]";
  return os.str();
}

// Justification (docs/cuda.md, "Numerics"): the GPU and the CPU float reference perform the same
// operations with different summation trees (16-term FMA chains + butterfly vs one sequential sum), FMA
// instead of separate multiply and add, and CUDA's expf/log1pf/sigmoid (<= 2 ulp) instead of libm. Over
// <= 8 tokens on O(1) values that moves fp32 results by ~1e-6 absolute; 1e-5 leaves a 10x margin (measured
// worst printed by the tests). A quantity stored in bf16 is additionally rounded once (RNE) from the GPU's
// fp32 value, i.e. within half a bf16 ulp, <= 2^-8 relative, of it: rtol 2^-8 plus the fp32 slack.
Tolerance gpu_vs_cpu_tolerance(DType stored) {
  return stored == DType::BF16 ? Tolerance::allclose(1e-5, 0.00390625 + 2e-5) : Tolerance::allclose(1e-5, 1e-5);
}

void WorstTracker::add(const std::string& what, const CompareReport& r, const std::vector<float>& ref,
                       const std::vector<float>& got) {
  Entry* e = nullptr;
  for (auto& x : entries)
    if (x.what == what) e = &x;
  if (!e) {
    Entry fresh;
    fresh.what = what;
    entries.push_back(fresh);
    e = &entries.back();
  }
  double rel = 0;
  for (std::size_t i = 0; i < ref.size() && i < got.size(); ++i) {
    const double d = std::fabs(static_cast<double>(got[i]) - ref[i]);
    if (std::fabs(ref[i]) > 1e-3) rel = std::max(rel, d / std::fabs(ref[i]));
  }
  e->max_rel = std::max(e->max_rel, rel);
  e->max_rel_rms = std::max(e->max_rel_rms, r.rel_rms);
  if (r.max_abs >= e->max_abs) {
    e->max_abs = r.max_abs;
  }
  if (r.worst_excess > e->worst_excess || !r.ok || e->report.empty() ||
      (r.worst_excess == 0 && r.rel_rms >= e->max_rel_rms)) {
    e->worst_excess = r.worst_excess;
    e->report = r.str();
  }
}

void WorstTracker::print() const {
  for (const auto& e : entries)
    std::printf("[measured] %-28s max|d|=%.3e  max rel (|ref|>1e-3)=%.3e  max rel_rms=%.3e  worst/tol=%.3f\n    %s\n",
                e.what.c_str(), e.max_abs, e.max_rel, e.max_rel_rms, e.worst_excess, e.report.c_str());
}

}  // namespace replayssm::testing
