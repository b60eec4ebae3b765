// GPU fused step (verify_fused) against the separate ReplaySSM path (verify_replay + commit_replay), bit for
// bit, over two steps on the same inputs: step 1's commit is deferred into step 2's fused launch and step 2's
// into a standalone resolve (commit_replay). Outputs of both steps, step 2's payload capture, the pool after
// the fused launches (step 1 committed) and after the resolve are compared bitwise; every slot no commit
// writes and every slot_stride gap keeps its NaN marker bits; outputs outside every window keep theirs.
// The separate path itself is checked against full-state and the CPU reference by gpu_step_test.cpp.
//
// Case count: REPLAYSSM_GPU_CASES (default 48 per op); first seed: REPLAYSSM_GPU_SEED (default 1).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>

#include "gpu_support.hpp"
#include "replayssm/cuda/kernels.hpp"
#include "replayssm/error.hpp"
#include "replayssm/recurrence/inputs.hpp"
#include "replayssm/rng.hpp"

using namespace replayssm;
using namespace replayssm::testing;

namespace {

struct StepInputs {
  cuda::DeviceBuffer q, k, v, a, b;
  cuda::TokenInputs ptrs() const { return {q.get(), k.get(), v.get(), a.get(), b.get()}; }
};

cuda::DeviceBuffer upload_act(const std::vector<float>& x, DType t) {
  return to_device(encode(x.empty() ? std::vector<float>{0.f} : x, t));
}

bool pending(const BatchRow& b) { return b.slot != kPadSlot && b.write_slot != kPadSlot && b.accepted > 0; }

// Step 2 of a case: every row continues (a pending commit's row reads the slot it lands in; other rows keep
// their slot; PAD rows stay PAD), same windows, commits in place or not at all, accepted redrawn.
std::vector<BatchRow> next_rows(const StepCase& c, Rng& r) {
  std::vector<BatchRow> rows = c.rows;
  for (auto& b : rows) {
    if (b.slot == kPadSlot) continue;
    if (pending(b)) b.slot = b.write_slot;
    b.write_slot = r.uniform_int(0, 4) == 0 ? kPadSlot : b.slot;
    b.accepted = static_cast<std::int32_t>(r.uniform_int(0, b.T));
  }
  return rows;
}

void run_case(const StepCase& c, bool verbose) {
  Rng rng(derive_seed(c.seed, 4242));
  const std::vector<BatchRow> rows2 = next_rows(c, rng);
  std::string rows2_str;
  for (const auto& b : rows2)
    rows2_str += "(s" + std::to_string(b.slot) + " w" + std::to_string(b.write_slot) + " n" +
                 std::to_string(b.accepted) + ")";
  SCOPED_TRACE(c.describe() + " step2=[" + rows2_str + "] (reproduce: REPLAYSSM_GPU_SEED / this seed)");
  if (verbose) std::printf("case %s\n", c.describe().c_str());
  const ModelConfig& cfg = c.cfg;
  const DType sd = cfg.state_dtype, ad = cfg.act_dtype;
  const std::int64_t stride = c.pool.stride(cfg);
  const std::int64_t pool_elems = static_cast<std::int64_t>(c.pool.num_slots) * stride;
  const int L = cfg.num_layers, nrows = static_cast<int>(c.rows.size());
  const auto Ls = static_cast<std::size_t>(L);

  // Inputs of both steps, parameters, initial pools (markers everywhere, random states in the read slots).
  std::vector<StepInputs> in1(Ls), in2(Ls);
  std::vector<cuda::DeviceBuffer> A_log(Ls), dt_bias(Ls);
  std::vector<std::vector<std::uint8_t>> pool0(Ls);
  for (int l = 0; l < L; ++l) {
    const auto li = static_cast<std::size_t>(l);
    for (int step = 0; step < 2; ++step) {
      const auto x = ref::random_inputs(cfg, static_cast<int>(c.total_tokens), derive_seed(c.seed, 1000 + 10 * l + step));
      StepInputs& s = step ? in2[li] : in1[li];
      s.q = upload_act(x.q, ad), s.k = upload_act(x.k, ad), s.v = upload_act(x.v, ad);
      s.a = upload_act(x.a, ad), s.b = upload_act(x.b, ad);
    }
    const auto p = ref::random_params(cfg, derive_seed(c.seed, 2000 + l));
    A_log[li] = to_device(encode(p.A_log, DType::F32));
    dt_bias[li] = to_device(encode(p.dt_bias, DType::F32));
    auto& img = pool0[li];
    img.assign(static_cast<std::size_t>(pool_elems) * dsize(sd), 0);
    for (int s = 0; s < c.pool.num_slots; ++s) {
      fill_marker(img, s * stride, cfg.state_elems(), sd, slot_mark(sd));
      fill_marker(img, s * stride + cfg.state_elems(), stride - cfg.state_elems(), sd, gap_mark(sd));
    }
    for (int r = 0; r < nrows; ++r)
      if (c.rows[static_cast<std::size_t>(r)].slot != kPadSlot)
        put(img, c.rows[static_cast<std::size_t>(r)].slot * stride,
            ref::random_state(cfg, derive_seed(c.seed, 3000 + 100 * l + r)), sd);
  }
  const std::int64_t o_elems = c.total_tokens * cfg.HV * cfg.V;
  std::vector<std::uint8_t> o0(static_cast<std::size_t>(o_elems) * dsize(ad));
  fill_marker(o0, 0, o_elems, ad, out_mark(ad));
  const std::int64_t pay_elems = static_cast<std::int64_t>(c.pay.num_pages) * c.pay.page_tokens * PayloadGeometry::row_width(cfg);
  std::vector<std::uint8_t> pay0(static_cast<std::size_t>(pay_elems) * dsize(ad));
  fill_marker(pay0, 0, pay_elems, ad, out_mark(ad));

  // Path S (separate) and path F (fused): pools, two payload buffers each, outputs of both steps.
  struct Path {
    std::vector<cuda::DeviceBuffer> pool, pay0, pay1, o1, o2;
    std::vector<cuda::LayerPointers> lp0, lp1;  // payload buffer 0 / 1
  };
  Path S, F;
  for (Path* p : {&S, &F})
    for (int l = 0; l < L; ++l) {
      const auto li = static_cast<std::size_t>(l);
      p->pool.push_back(to_device(pool0[li]));
      p->pay0.push_back(to_device(pay0));
      p->pay1.push_back(to_device(pay0));
      p->o1.push_back(to_device(o0));
      p->o2.push_back(to_device(o0));
      cuda::LayerPointers x;
      x.pool = p->pool.back().get();
      x.A_log = A_log[li].as<const float>();
      x.dt_bias = dt_bias[li].as<const float>();
      x.payload = p->pay0.back().get();
      p->lp0.push_back(x);
      x.payload = p->pay1.back().get();
      p->lp1.push_back(x);
    }
  auto batch = [&](const std::vector<BatchRow>& rows, const std::vector<cuda::LayerPointers>& layers,
                   cuda::Schedule sched) {
    auto b = std::make_unique<cuda::DeviceBatch>(cfg, c.pool, c.pay, c.max_T, nrows);
    b->set_schedule(sched);
    b->set_rows(rows, c.pages, c.total_tokens);
    b->set_layers(layers);
    return b;
  };
  std::vector<BatchRow> rows0 = c.rows;  // "step 0": nothing pending
  for (auto& b : rows0) b.accepted = 0;
  auto s1 = batch(c.rows, S.lp0, c.sched_full), s2 = batch(rows2, S.lp1, c.sched_full);
  auto f0 = batch(rows0, F.lp1, c.sched_replay), f1 = batch(c.rows, F.lp0, c.sched_replay),
       f2 = batch(rows2, F.lp1, c.sched_replay);

  // Separate: verify 1, commit 1, verify 2, commit 2. Fused: fused 1 (nothing pending), fused 2 (commits step
  // 1), resolve step 2 with commit_replay.
  for (int l = 0; l < L; ++l) {
    const auto li = static_cast<std::size_t>(l);
    cuda::verify_replay(*s1, S.lp0[li], in1[li].ptrs(), S.o1[li].get());
    cuda::verify_fused(*f1, *f0, F.pay1[li].get(), F.lp0[li], in1[li].ptrs(), F.o1[li].get());
  }
  cuda::commit_replay(*s1);
  for (int l = 0; l < L; ++l) {
    const auto li = static_cast<std::size_t>(l);
    cuda::verify_replay(*s2, S.lp1[li], in2[li].ptrs(), S.o2[li].get());
    cuda::verify_fused(*f2, *f1, F.pay0[li].get(), F.lp1[li], in2[li].ptrs(), F.o2[li].get());
  }
  cuda::synchronize();

  // Slots each commit writes (heads only; the gaps never).
  std::set<std::int32_t> written1, written12;
  for (const auto& b : c.rows)
    if (pending(b)) written1.insert(b.write_slot);
  written12 = written1;
  for (const auto& b : rows2)
    if (pending(b)) written12.insert(b.write_slot);
  auto check_pool = [&](const std::vector<std::uint8_t>& got, const std::vector<std::uint8_t>& want,
                        const std::vector<std::uint8_t>& init, const std::set<std::int32_t>& written, int l,
                        const char* when) {
    if (got != want) {
      std::size_t i = 0;
      while (got[i] == want[i]) ++i;
      const std::int64_t e = static_cast<std::int64_t>(i / dsize(sd));
      FAIL() << "layer " << l << " " << when << ": fused pool differs from the separate path first at element " << e
             << " (slot " << e / stride << ", offset " << e % stride << ")";
    }
    const std::size_t es = dsize(sd);
    for (int s = 0; s < c.pool.num_slots; ++s) {
      const bool w = written.count(s) > 0;
      const std::size_t from = static_cast<std::size_t>(s * stride + (w ? cfg.state_elems() : 0)) * es;
      const std::size_t to = static_cast<std::size_t>((s + 1) * stride) * es;
      ASSERT_TRUE(std::equal(got.begin() + static_cast<std::ptrdiff_t>(from), got.begin() + static_cast<std::ptrdiff_t>(to),
                             init.begin() + static_cast<std::ptrdiff_t>(from)))
          << "layer " << l << " " << when << ": slot " << s << (w ? " gap" : "") << " changed";
    }
  };
  for (int l = 0; l < L; ++l) {
    const auto li = static_cast<std::size_t>(l);
    ASSERT_TRUE(to_host(F.o1[li]) == to_host(S.o1[li])) << "layer " << l << ": step 1 outputs differ";
    const auto fo2 = to_host(F.o2[li]);
    ASSERT_TRUE(fo2 == to_host(S.o2[li])) << "layer " << l << ": step 2 outputs differ";
    ASSERT_TRUE(to_host(F.pay0[li]) == to_host(S.pay0[li])) << "layer " << l << ": step 1 payload differs";
    ASSERT_TRUE(to_host(F.pay1[li]) == to_host(S.pay1[li])) << "layer " << l << ": step 2 payload differs";
    // Outputs of tokens outside every window keep their marker.
    std::vector<bool> in_window(static_cast<std::size_t>(c.total_tokens), false);
    for (const auto& b : rows2)
      for (int t = 0; t < b.T; ++t) in_window[static_cast<std::size_t>(b.token_offset + t)] = true;
    std::vector<std::uint8_t> mark(dsize(ad));
    fill_marker(mark, 0, 1, ad, out_mark(ad));
    const std::int64_t per_tok = static_cast<std::int64_t>(cfg.HV) * cfg.V;
    for (std::int64_t tok = 0; tok < c.total_tokens; ++tok)
      if (!in_window[static_cast<std::size_t>(tok)])
        for (std::int64_t e = 0; e < per_tok; ++e)
          ASSERT_EQ(std::memcmp(&fo2[static_cast<std::size_t>((tok * per_tok + e) * static_cast<std::int64_t>(dsize(ad)))],
                                mark.data(), dsize(ad)),
                    0)
              << "layer " << l << " token " << tok << " (no window) element " << e << " written";
    // Step 1 committed by the fused launch of step 2; the separate path's step 1 commit and verify 2 are done.
    check_pool(to_host(F.pool[li]), to_host(S.pool[li]), pool0[li], written1, l, "after step 2's fused launch");
    if (::testing::Test::HasFatalFailure()) return;
  }
  // Resolve step 2 on both paths.
  cuda::commit_replay(*s2);
  cuda::commit_replay(*f2);
  cuda::synchronize();
  for (int l = 0; l < L; ++l) {
    const auto li = static_cast<std::size_t>(l);
    check_pool(to_host(F.pool[li]), to_host(S.pool[li]), pool0[li], written12, l, "after the resolve of step 2");
    if (::testing::Test::HasFatalFailure()) return;
  }
}

void run_many(Op op, std::uint64_t salt, const CaseShape& shape = {}) {
  const std::uint64_t n = env_u64("REPLAYSSM_GPU_CASES", 48), seed0 = env_u64("REPLAYSSM_GPU_SEED", 1);
  const bool verbose = env_u64("REPLAYSSM_GPU_VERBOSE", 0) != 0;
  std::printf("GPU fused %s cases: %llu from seed %llu\n", to_string(op).c_str(), static_cast<unsigned long long>(n),
              static_cast<unsigned long long>(seed0 + salt));
  for (std::uint64_t i = 0; i < n; ++i) {
    run_case(make_case(seed0 + i + salt, op, shape), verbose);
    if (::testing::Test::HasFatalFailure()) break;
  }
}

}  // namespace

TEST(GpuFused, GdnFusedStepBitExactWithSeparateReplay) {
  REPLAYSSM_REQUIRE_GPU();
  run_many(Op::GDN, 3000000);
}

TEST(GpuFused, KdaFusedStepBitExactWithSeparateReplay) {
  REPLAYSSM_REQUIRE_GPU();
  run_many(Op::KDA, 4000000);
}

// Many tiles per persistent CTA (items > resident CTAs): the prefetch of the next item's checkpoint (the
// previous read slot of a pending row) and the skipping of PAD rows inside the loop.
TEST(GpuFused, PersistentLoopOverManyTiles) {
  REPLAYSSM_REQUIRE_GPU();
  for (std::uint64_t seed = 950; seed < 954; ++seed) {
    StepCase c = make_case(seed, seed % 2 ? Op::KDA : Op::GDN, CaseShape{128, 128, 24, 4, 4, 2});
    c.cfg.layout = StateLayout::VK;
    c.sched_full = seed % 2 ? cuda::Schedule::PerTile : cuda::Schedule::Persistent;
    c.sched_replay = seed % 2 ? cuda::Schedule::Persistent : cuda::Schedule::PerTile;
    run_case(c, false);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// The host refuses, naming the field, a fused launch that would commit into a slot the row does not read,
// a row count that does not match, and a capture into the buffer the commit replays from.
TEST(GpuFused, RefusesWhatItCannotFold) {
  REPLAYSSM_REQUIRE_GPU();
  ModelConfig cfg = preset("qwen3.5");
  cfg.HV = 4;
  cfg.H = 2;
  PoolGeometry pool{1, 6, 0};
  PayloadGeometry pay{4, 4, 1};
  auto field_of = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.field();
    }
    return "<no error>";
  };
  cuda::DeviceBuffer poolbuf(static_cast<std::size_t>(6 * cfg.state_elems() * 4)), params(4096), o(1 << 20),
      p0(1 << 20), p1(1 << 20);
  cuda::LayerPointers lp;
  lp.pool = poolbuf.get();
  lp.A_log = params.as<const float>();
  lp.dt_bias = params.as<const float>();
  lp.payload = p1.get();
  cuda::TokenInputs in{o.get(), o.get(), o.get(), o.get(), o.get()};
  cuda::DeviceBatch prev(cfg, pool, pay, 4, 2), b(cfg, pool, pay, 4, 2);
  prev.set_rows({{0, 2, 4, 0, 2}, {1, 1, 3, 4, 0}}, {0, 1}, 7);
  b.set_rows({{3, 3, 4, 0, 1}, {1, 1, 3, 4, 0}}, {2, 3}, 7);  // row 0's commit lands in 2, it reads 3
  EXPECT_EQ(field_of([&] { cuda::verify_fused(b, prev, p0.get(), lp, in, o.get()); }), "rows[0].slot");
  b.set_rows({{kPadSlot, 3, 4, 0, 0}, {1, 1, 3, 4, 0}}, {2, 3}, 7);  // the row left: resolve it first
  EXPECT_EQ(field_of([&] { cuda::verify_fused(b, prev, p0.get(), lp, in, o.get()); }), "rows[0].slot");
  b.set_rows({{2, 2, 4, 0, 1}, {1, 1, 3, 4, 0}}, {2, 3}, 7);
  EXPECT_EQ(field_of([&] { cuda::verify_fused(b, prev, p1.get(), lp, in, o.get()); }), "prev_payload");
  EXPECT_EQ(field_of([&] { cuda::verify_fused(b, prev, nullptr, lp, in, o.get()); }), "prev_payload");
  cuda::DeviceBatch b1(cfg, pool, pay, 4, 2);
  b1.set_rows({{2, 2, 4, 0, 1}}, {2}, 7);
  EXPECT_EQ(field_of([&] { cuda::verify_fused(b1, prev, p0.get(), lp, in, o.get()); }), "prev.rows");
  PayloadGeometry pay2{2, 4, 2};
  cuda::DeviceBatch b2(cfg, pool, pay2, 4, 2);
  b2.set_rows({{2, 2, 4, 0, 1}, {1, 1, 3, 4, 0}}, {2, 3, 0, 1}, 7);
  EXPECT_EQ(field_of([&] { cuda::verify_fused(b2, prev, p0.get(), lp, in, o.get()); }), "prev.payload");
  cuda::synchronize();
}
