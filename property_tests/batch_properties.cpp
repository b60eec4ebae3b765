// The batch-level reference (reference/batch.hpp) over the kernels' descriptors: the ReplaySSM functions
// are bit-identical to the full-state ones at the batch level (paged payload, PAD rows, permuted slots and
// pages, out-of-place commits), every byte they must not touch keeps its poison bits, and the decode ring
// in the CUDA kernel's summation order tracks the recurrence within the closed form's stated bound.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "gen.hpp"
#include "replayssm/compare.hpp"
#include "replayssm/recurrence/batch.hpp"
#include "replayssm/recurrence/inputs.hpp"
#include "replayssm/rng.hpp"

using namespace replayssm;
using namespace replayssm::ref;

namespace {

// Distinct NaN payloads: a stray read poisons a result, a stray write changes the bits.
float poison(std::uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
const float kSlotPoison = poison(0x7fc0beefu), kGapPoison = poison(0x7f80deadu), kOutPoison = poison(0xfff0cafeu);

bool same_bits(const std::vector<float>& a, std::size_t from, const std::vector<float>& b, std::size_t n) {
  return std::memcmp(a.data() + from, b.data() + from, n * sizeof(float)) == 0;
}

double max_abs_finite(const std::vector<float>& x) {
  double m = 0;
  for (float e : x)
    if (std::isfinite(e)) m = std::max(m, static_cast<double>(std::fabs(e)));
  return m;
}

std::vector<std::int32_t> permutation(int n) {
  std::vector<std::int32_t> p(static_cast<std::size_t>(n));
  std::iota(p.begin(), p.end(), 0);
  for (std::size_t i = p.size(); i > 1; --i) std::swap(p[i - 1], p[static_cast<std::size_t>(*testgen::in(0, static_cast<int>(i)))]);
  return p;
}

// A random step: 1..5 rows, PAD rows with T in 0..max_T, permuted slots, in-place / out-of-place / no-write
// commits, token windows in permuted order with gaps, permuted pages of 1..4 tokens.
batch::Batch random_batch(const ModelConfig& cfg) {
  batch::Batch b;
  b.cfg = cfg;
  b.max_T = *testgen::in(1, 7);
  const int nrows = *testgen::in(1, 6);
  b.pool = PoolGeometry{cfg.num_layers, 2 * nrows + 2, cfg.state_elems() + *testgen::in(0, 3)};
  const auto slots = permutation(b.pool.num_slots);
  for (int i = 0; i < nrows; ++i) {
    BatchRow r;
    if (*testgen::in(0, 5) == 0) {
      r.slot = kPadSlot;
      r.T = *testgen::in(0, b.max_T + 1);
      r.write_slot = slots[static_cast<std::size_t>(*testgen::in(0, b.pool.num_slots))];  // must be ignored
    } else {
      r.slot = slots[static_cast<std::size_t>(i)];
      r.T = *testgen::in(1, b.max_T + 1);
      const int w = *testgen::in(0, 6);
      r.write_slot = w <= 2 ? r.slot : w <= 4 ? slots[static_cast<std::size_t>(nrows + i)] : kPadSlot;
    }
    r.accepted = *testgen::in(0, r.T + 1);
    b.rows.push_back(r);
  }
  std::int64_t off = 0;
  for (auto i : permutation(nrows)) {
    off += *testgen::in(0, 3);
    b.rows[static_cast<std::size_t>(i)].token_offset = static_cast<std::int32_t>(off);
    off += b.rows[static_cast<std::size_t>(i)].T;
  }
  b.total_tokens = std::max<std::int64_t>(1, off + *testgen::in(0, 3));
  b.payload = PayloadGeometry::sized(*testgen::in(1, 5), b.max_T, nrows);
  b.payload.num_pages += *testgen::in(0, 3);
  const auto pages = permutation(b.payload.num_pages);
  b.page_table.assign(pages.begin(), pages.begin() + nrows * b.payload.pages_per_row);
  b.validate();
  return b;
}

}  // namespace

RC_GTEST_PROP(BatchReference, ReplayFunctionsAreBitIdenticalToFullStateOnes, ()) {
  ModelConfig cfg = *testgen::small_config();
  cfg.state_dtype = *rc::gen::element(DType::F32, DType::BF16);
  cfg.num_layers = *testgen::in(1, 3);
  const batch::Batch b = random_batch(cfg);
  const std::uint64_t seed = *testgen::seed();
  const auto stride = static_cast<std::size_t>(b.pool.stride(cfg)), E = static_cast<std::size_t>(cfg.state_elems());
  const std::size_t per_token = static_cast<std::size_t>(cfg.HV) * cfg.V;
  const auto lay = PayloadGeometry::row_layout(cfg);
  std::vector<LayerParams> params;
  std::vector<SequenceInputs> tokens;
  std::vector<std::vector<float>> pool0, poolF, poolR, scratch, payload;
  for (int l = 0; l < cfg.num_layers; ++l) {
    params.push_back(random_params(cfg, derive_seed(seed, 10 + l)));
    tokens.push_back(random_inputs(cfg, static_cast<int>(b.total_tokens), derive_seed(seed, 20 + l)));
    std::vector<float> pool(static_cast<std::size_t>(b.pool.num_slots) * stride, kSlotPoison);
    for (int s = 0; s < b.pool.num_slots; ++s)
      std::fill(pool.begin() + static_cast<std::ptrdiff_t>(s * stride + E),
                pool.begin() + static_cast<std::ptrdiff_t>((s + 1) * stride), kGapPoison);
    for (std::size_t r = 0; r < b.rows.size(); ++r)
      if (b.rows[r].slot != kPadSlot) {
        auto S = random_state(cfg, derive_seed(seed, 100 * (l + 1) + r));
        round_to_state_dtype(cfg, S);
        std::copy(S.begin(), S.end(), pool.begin() + static_cast<std::ptrdiff_t>(b.rows[r].slot * stride));
      }
    pool0.push_back(pool);
    scratch.emplace_back(b.rows.size() * static_cast<std::size_t>(b.max_T) * E, kOutPoison);
    payload.emplace_back(static_cast<std::size_t>(b.payload.elems(cfg)), kOutPoison);
  }
  poolF = pool0;
  poolR = pool0;
  std::vector<batch::Layer> LF, LR;
  for (int l = 0; l < cfg.num_layers; ++l) {
    const auto i = static_cast<std::size_t>(l);
    LF.push_back(batch::Layer{&params[i], &poolF[i], nullptr, &scratch[i]});
    LR.push_back(batch::Layer{&params[i], &poolR[i], &payload[i], nullptr});
  }
  for (int l = 0; l < cfg.num_layers; ++l) {
    const auto i = static_cast<std::size_t>(l);
    std::vector<float> oF(static_cast<std::size_t>(b.total_tokens) * per_token, kOutPoison), oR = oF;
    batch::verify_full_state(b, LF[i], tokens[i], oF);
    batch::verify_replay(b, LR[i], tokens[i], oR);
    RC_ASSERT(std::memcmp(oF.data(), oR.data(), oF.size() * 4) == 0);
    RC_ASSERT(same_bits(poolF[i], 0, pool0[i], pool0[i].size()));  // verify never writes the pool
    RC_ASSERT(same_bits(poolR[i], 0, pool0[i], pool0[i].size()));
    std::vector<int> owner(static_cast<std::size_t>(b.total_tokens), -1);
    for (std::size_t r = 0; r < b.rows.size(); ++r)
      for (int t = 0; t < b.rows[r].T; ++t) owner[static_cast<std::size_t>(b.rows[r].token_offset + t)] = static_cast<int>(r);
    for (std::int64_t tok = 0; tok < b.total_tokens; ++tok) {
      const int r = owner[static_cast<std::size_t>(tok)];
      const std::size_t at = static_cast<std::size_t>(tok) * per_token;
      if (r < 0) {
        RC_ASSERT(std::memcmp(oF.data() + at, std::vector<float>(per_token, kOutPoison).data(), per_token * 4) == 0);
      } else if (b.rows[static_cast<std::size_t>(r)].slot == kPadSlot) {
        RC_ASSERT(std::memcmp(oF.data() + at, std::vector<float>(per_token, 0.0f).data(), per_token * 4) == 0);
      }
    }
    // Payload rows hold the raw inputs of every real window token, in the one row layout.
    for (std::size_t r = 0; r < b.rows.size(); ++r) {
      if (b.rows[r].slot == kPadSlot) continue;
      for (int t = 0; t < b.rows[r].T; ++t) {
        const auto row = static_cast<std::size_t>(b.payload.physical_row(b.page_table, static_cast<std::int32_t>(r), t) *
                                                  lay.width);
        const auto tok = static_cast<std::size_t>(b.rows[r].token_offset + t);
        const auto& in = tokens[i];
        RC_ASSERT(std::equal(in.k.begin() + tok * (lay.v - lay.k), in.k.begin() + (tok + 1) * (lay.v - lay.k),
                             payload[i].begin() + row + lay.k));
        RC_ASSERT(std::equal(in.v.begin() + tok * (lay.a - lay.v), in.v.begin() + (tok + 1) * (lay.a - lay.v),
                             payload[i].begin() + row + lay.v));
        RC_ASSERT(std::equal(in.a.begin() + tok * (lay.b - lay.a), in.a.begin() + (tok + 1) * (lay.b - lay.a),
                             payload[i].begin() + row + lay.a));
        RC_ASSERT(std::equal(in.b.begin() + tok * (lay.width - lay.b), in.b.begin() + (tok + 1) * (lay.width - lay.b),
                             payload[i].begin() + row + lay.b));
      }
    }
  }
  batch::commit_copy(b, LF);
  batch::commit_replay(b, LR);
  for (int l = 0; l < cfg.num_layers; ++l) {
    const auto i = static_cast<std::size_t>(l);
    RC_ASSERT(same_bits(poolF[i], 0, poolR[i], poolR[i].size()));
    for (int s = 0; s < b.pool.num_slots; ++s) {
      bool written = false;
      for (const auto& r : b.rows) written = written || (r.slot != kPadSlot && r.write_slot == s && r.accepted > 0);
      const std::size_t from = static_cast<std::size_t>(s) * stride + (written ? E : 0);
      RC_ASSERT(same_bits(poolR[i], from, pool0[i], static_cast<std::size_t>(s + 1) * stride - from));
    }
    // Each committed head is the per-request full-state commit of its row.
    for (const auto& r : b.rows) {
      if (r.slot == kPadSlot || r.write_slot == kPadSlot || r.accepted == 0) continue;
      const std::vector<float> S0(pool0[i].begin() + static_cast<std::ptrdiff_t>(r.slot * stride),
                                  pool0[i].begin() + static_cast<std::ptrdiff_t>(r.slot * stride + E));
      const auto want = full_state_commit(
          full_state_verify(cfg, params[i], tokens[i].slice(cfg, r.token_offset, r.T), S0, StateRounding::AtCommit), S0,
          r.accepted);
      RC_ASSERT(std::memcmp(poolR[i].data() + static_cast<std::size_t>(r.write_slot) * stride, want.data(), E * 4) == 0);
    }
  }
}

// Decode ring in the CUDA kernel's order (suffix sums) against the recurrence, over several steps with
// staggered cursors and flushes. F32 storage; the bound is the closed form's (mtp_properties.cpp,
// DecodeRing.ClosedFormWithinStatedBound): the same sums in another order, a few ulps of the largest
// magnitude: |got - ref| <= 2e-5 * max(1, max|ref|).
RC_GTEST_PROP(BatchReference, RingDecodeTracksTheRecurrence, ()) {
  ModelConfig cfg = *testgen::small_config();
  cfg.state_dtype = DType::F32;
  cfg.act_dtype = DType::F32;
  cfg.round_beta_to_act = false;
  const int ring_len = *testgen::in(1, 9), steps = *testgen::in(1, 3 * ring_len + 3);
  const std::uint64_t seed = *testgen::seed();
  batch::Batch b;
  b.cfg = cfg;
  b.pool = PoolGeometry{1, 5, cfg.state_elems() + 1};
  const std::int32_t slot_of[] = {3, 0, kPadSlot, 1};  // row 2 is PAD; row i joins at step i
  const auto params = random_params(cfg, seed);
  const auto stride = static_cast<std::size_t>(b.pool.stride(cfg)), E = static_cast<std::size_t>(cfg.state_elems());
  std::vector<float> pool(5 * stride, kSlotPoison);
  std::vector<std::vector<float>> S(4);
  for (int i : {0, 1, 3}) {
    S[static_cast<std::size_t>(i)] = random_state(cfg, derive_seed(seed, 7 + i));
    std::copy(S[static_cast<std::size_t>(i)].begin(), S[static_cast<std::size_t>(i)].end(),
              pool.begin() + static_cast<std::ptrdiff_t>(slot_of[i] * stride));
  }
  const auto pool0 = pool;
  auto records = batch::DecodeRingRecords::zeros(cfg, b.pool.num_slots, ring_len);
  std::vector<std::int32_t> wp(4, 0);
  batch::Layer layer{&params, &pool, nullptr, nullptr};
  for (int step = 0; step < steps; ++step) {
    b.rows.clear();
    std::vector<std::int32_t> cursors;
    std::int32_t tok = 0;
    for (int i = 0; i < 4; ++i) {
      const bool live = slot_of[i] != kPadSlot && step >= i;
      b.rows.push_back(BatchRow{live ? slot_of[i] : kPadSlot, live ? slot_of[i] : kPadSlot, 1, tok, 0});
      ++tok;
      cursors.push_back(live ? wp[static_cast<std::size_t>(i)] : 0);
    }
    b.total_tokens = tok;
    b.max_T = 1;
    b.validate();
    const auto in = random_inputs(cfg, tok, derive_seed(seed, 1000 + step));
    std::vector<float> o(static_cast<std::size_t>(tok) * cfg.HV * cfg.V, kOutPoison);
    batch::ring_decode(b, layer, cursors, records, in, o);
    for (int i = 0; i < 4; ++i) {
      const auto& r = b.rows[static_cast<std::size_t>(i)];
      const std::vector<float> got(o.begin() + static_cast<std::ptrdiff_t>(r.token_offset) * cfg.HV * cfg.V,
                                   o.begin() + static_cast<std::ptrdiff_t>(r.token_offset + 1) * cfg.HV * cfg.V);
      if (r.slot == kPadSlot) {
        RC_ASSERT(std::all_of(got.begin(), got.end(), [](float x) { return x == 0.0f && !std::signbit(x); }));
        continue;
      }
      std::vector<float> want;
      run_recurrent<float>(cfg, params, in.slice(cfg, r.token_offset, 1), S[static_cast<std::size_t>(i)], want);
      const auto rep = compare(want, got, Tolerance::allclose(2e-5 * std::max(1.0, max_abs_finite(want)), 0));
      RC_LOG() << "step " << step << " row " << i << " write_pos " << wp[static_cast<std::size_t>(i)] << ": " << rep.str();
      RC_ASSERT(rep.ok);
      auto& w = wp[static_cast<std::size_t>(i)];
      if (w == ring_len - 1) {  // flushed: the checkpoint holds the state
        const std::vector<float> ck(pool.begin() + static_cast<std::ptrdiff_t>(r.slot * stride),
                                    pool.begin() + static_cast<std::ptrdiff_t>(r.slot * stride + E));
        const auto& Sr = S[static_cast<std::size_t>(i)];
        RC_ASSERT(compare(Sr, ck, Tolerance::allclose(2e-5 * std::max(1.0, max_abs_finite(Sr)), 0)).ok);
        w = 0;
      } else {
        ++w;
      }
    }
  }
  // Slots no row owns (2, 4) and every gap keep their poison bits.
  for (int s = 0; s < 5; ++s) {
    const bool owned = s == 3 || s == 0 || s == 1;
    const std::size_t from = static_cast<std::size_t>(s) * stride + (owned ? E : 0);
    RC_ASSERT(same_bits(pool, from, pool0, static_cast<std::size_t>(s + 1) * stride - from));
  }
}
