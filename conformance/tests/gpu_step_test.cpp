// GPU verify + commit: ReplaySSM (verify_replay + commit_replay) against full-state (verify_full_state +
// commit_copy) bit for bit, both against the CPU float reference within a stated tolerance, and every
// byte the kernels must not touch (other slots, slot_stride gaps, outputs outside windows) unchanged.
//
// Case count: REPLAYSSM_GPU_CASES (default 48 per test), REPLAYSSM_GPU_BIG_CASES (default 4); first seed:
// REPLAYSSM_GPU_SEED (default 1).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <set>

#include "gpu_support.hpp"
#include "replayssm/compare.hpp"
#include "replayssm/cuda/kernels.hpp"
#include "replayssm/error.hpp"
#include "replayssm/recurrence/batch.hpp"
#include "replayssm/recurrence/gdn.hpp"
#include "replayssm/recurrence/inputs.hpp"
#include "replayssm/rng.hpp"

using namespace replayssm;
using namespace replayssm::testing;

namespace {

struct LayerHost {
  ref::SequenceInputs in;  // all total_tokens tokens, packed
  ref::LayerParams params;
  cuda::DeviceBuffer q, k, v, a, b, A_log, dt_bias;
};

cuda::DeviceBuffer upload_act(const std::vector<float>& x, DType t) {
  return to_device(encode(x.empty() ? std::vector<float>{0.f} : x, t));
}

// Runs one case through both paths; checks bit-exactness, untouched memory and (when cpu_check) the CPU
// float reference. Returns false after the first failed assertion group.
void run_case(const StepCase& c, WorstTracker& worst, bool verbose) {
  SCOPED_TRACE(c.describe());
  if (verbose) std::printf("case %s\n", c.describe().c_str());
  const ModelConfig& cfg = c.cfg;
  const DType sd = cfg.state_dtype, ad = cfg.act_dtype;
  const std::int64_t stride = c.pool.stride(cfg), head = static_cast<std::int64_t>(cfg.K) * cfg.V;
  const std::int64_t pool_elems = static_cast<std::int64_t>(c.pool.num_slots) * stride;
  const int L = cfg.num_layers;
  const int nrows = static_cast<int>(c.rows.size());

  // Host data per layer.
  std::vector<LayerHost> lh(static_cast<std::size_t>(L));
  std::vector<std::vector<std::uint8_t>> pool0(static_cast<std::size_t>(L));
  for (int l = 0; l < L; ++l) {
    auto& h = lh[static_cast<std::size_t>(l)];
    h.in = ref::random_inputs(cfg, static_cast<int>(c.total_tokens), derive_seed(c.seed, 1000 + l));
    h.params = ref::random_params(cfg, derive_seed(c.seed, 2000 + l));
    h.q = upload_act(h.in.q, ad);
    h.k = upload_act(h.in.k, ad);
    h.v = upload_act(h.in.v, ad);
    h.a = upload_act(h.in.a, ad);
    h.b = upload_act(h.in.b, ad);
    h.A_log = to_device(encode(h.params.A_log, DType::F32));
    h.dt_bias = to_device(encode(h.params.dt_bias, DType::F32));
    auto& img = pool0[static_cast<std::size_t>(l)];
    img.assign(static_cast<std::size_t>(pool_elems) * dsize(sd), 0);
    for (int s = 0; s < c.pool.num_slots; ++s) {
      fill_marker(img, s * stride, cfg.state_elems(), sd, slot_mark(sd));
      fill_marker(img, s * stride + cfg.state_elems(), stride - cfg.state_elems(), sd, gap_mark(sd));
    }
    for (int r = 0; r < nrows; ++r) {
      const BatchRow& b = c.rows[static_cast<std::size_t>(r)];
      if (b.slot == kPadSlot) continue;
      put(img, b.slot * stride, ref::random_state(cfg, derive_seed(c.seed, 3000 + 100 * l + r)), sd);
    }
  }

  // Device buffers: pools for each path, scratch, payload, outputs.
  const std::int64_t o_elems = c.total_tokens * cfg.HV * cfg.V;
  std::vector<std::uint8_t> o0(static_cast<std::size_t>(o_elems) * dsize(ad));
  fill_marker(o0, 0, o_elems, ad, out_mark(ad));
  const std::int64_t row_w = PayloadGeometry::row_width(cfg);
  const std::int64_t pay_elems = static_cast<std::int64_t>(c.pay.num_pages) * c.pay.page_tokens * row_w;
  std::vector<std::uint8_t> pay0(static_cast<std::size_t>(pay_elems) * dsize(ad));
  fill_marker(pay0, 0, pay_elems, ad, out_mark(ad));

  std::vector<cuda::DeviceBuffer> poolA, poolB, scratch, payload, oA, oB;
  std::vector<cuda::LayerPointers> LA, LB;
  for (int l = 0; l < L; ++l) {
    const auto& h = lh[static_cast<std::size_t>(l)];
    poolA.push_back(to_device(pool0[static_cast<std::size_t>(l)]));
    poolB.push_back(to_device(pool0[static_cast<std::size_t>(l)]));
    scratch.emplace_back(static_cast<std::size_t>(cuda::full_state_scratch_bytes(cfg, nrows, c.max_T)));
    scratch.back().fill_bytes(0xff);
    payload.push_back(to_device(pay0));
    oA.push_back(to_device(o0));
    oB.push_back(to_device(o0));
    cuda::LayerPointers a;
    a.pool = poolA.back().get();
    a.scratch = scratch.back().get();
    a.A_log = h.A_log.as<const float>();
    a.dt_bias = h.dt_bias.as<const float>();
    LA.push_back(a);
    cuda::LayerPointers b = a;
    b.pool = poolB.back().get();
    b.scratch = nullptr;
    b.payload = payload.back().get();
    LB.push_back(b);
  }
  cuda::DeviceBatch bf(cfg, c.pool, c.pay, c.max_T, nrows), br(cfg, c.pool, c.pay, c.max_T, nrows);
  bf.set_schedule(c.sched_full);
  br.set_schedule(c.sched_replay);
  bf.set_rows(c.rows, {}, c.total_tokens);
  br.set_rows(c.rows, c.pages, c.total_tokens);
  bf.set_layers(LA);
  br.set_layers(LB);

  for (int l = 0; l < L; ++l) {
    const auto& h = lh[static_cast<std::size_t>(l)];
    cuda::TokenInputs in{h.q.get(), h.k.get(), h.v.get(), h.a.get(), h.b.get()};
    cuda::verify_full_state(bf, LA[static_cast<std::size_t>(l)], in, oA[static_cast<std::size_t>(l)].get());
    cuda::verify_replay(br, LB[static_cast<std::size_t>(l)], in, oB[static_cast<std::size_t>(l)].get());
  }
  cuda::synchronize();

  std::vector<std::vector<std::uint8_t>> scratch_h(static_cast<std::size_t>(L)), oh(static_cast<std::size_t>(L)),
      pay_h(static_cast<std::size_t>(L));
  for (int l = 0; l < L; ++l) {
    const auto li = static_cast<std::size_t>(l);
    const auto ob = to_host(oB[li]);
    oh[li] = to_host(oA[li]);
    ASSERT_TRUE(oh[li] == ob) << "layer " << l << ": replay verify outputs differ from full-state outputs";
    ASSERT_TRUE(to_host(poolB[li]) == pool0[li]) << "layer " << l << ": replay verify modified the pool";
    ASSERT_TRUE(to_host(poolA[li]) == pool0[li]) << "layer " << l << ": full-state verify modified the pool";
    scratch_h[li] = to_host(scratch[li]);
    pay_h[li] = to_host(payload[li]);
  }

  // Outputs: PAD windows zero, tokens outside every window untouched, real windows written.
  std::vector<int> owner(static_cast<std::size_t>(c.total_tokens), -1);
  for (int r = 0; r < nrows; ++r)
    for (int t = 0; t < c.rows[static_cast<std::size_t>(r)].T; ++t)
      owner[static_cast<std::size_t>(c.rows[static_cast<std::size_t>(r)].token_offset + t)] = r;
  for (int l = 0; l < L; ++l) {
    const auto& img = oh[static_cast<std::size_t>(l)];
    std::vector<std::uint8_t> mark(dsize(ad));
    fill_marker(mark, 0, 1, ad, out_mark(ad));
    for (std::int64_t tok = 0; tok < c.total_tokens; ++tok) {
      const int r = owner[static_cast<std::size_t>(tok)];
      const std::int64_t n = static_cast<std::int64_t>(cfg.HV) * cfg.V;
      for (std::int64_t e = 0; e < n; ++e) {
        const std::uint8_t* p = &img[static_cast<std::size_t>((tok * n + e) * static_cast<std::int64_t>(dsize(ad)))];
        const bool is_mark = std::memcmp(p, mark.data(), dsize(ad)) == 0;
        if (r < 0) {
          ASSERT_TRUE(is_mark) << "layer " << l << " token " << tok << " (no window) element " << e << " written";
        } else if (c.rows[static_cast<std::size_t>(r)].slot == kPadSlot) {
          std::uint32_t bits = 0;
          std::memcpy(&bits, p, dsize(ad));
          ASSERT_EQ(bits, 0u) << "layer " << l << " PAD row " << r << " token " << tok << " element " << e;
        } else {
          ASSERT_FALSE(is_mark) << "layer " << l << " row " << r << " token " << tok << " element " << e
                                << " not written";
        }
      }
    }
  }

  // Payload capture: raw input bits at the paged position of every real row's window token.
  for (int l = 0; l < L; ++l) {
    const auto& h = lh[static_cast<std::size_t>(l)];
    const auto& img = pay_h[static_cast<std::size_t>(l)];
    for (int r = 0; r < nrows; ++r) {
      const BatchRow& b = c.rows[static_cast<std::size_t>(r)];
      if (b.slot == kPadSlot) continue;
      for (int t = 0; t < b.T; ++t) {
        const std::int64_t prow =
            static_cast<std::int64_t>(c.pages[static_cast<std::size_t>(r * c.pay.pages_per_row + t / c.pay.page_tokens)]) *
                c.pay.page_tokens + t % c.pay.page_tokens;
        const auto got = get(img, prow * row_w, static_cast<std::size_t>(row_w), ad);
        std::vector<float> want;
        const std::int64_t tok = b.token_offset + t;
        auto app = [&](const std::vector<float>& x, std::int64_t w) {
          want.insert(want.end(), x.begin() + tok * w, x.begin() + (tok + 1) * w);
        };
        app(h.in.k, static_cast<std::int64_t>(cfg.H) * cfg.K);
        app(h.in.v, static_cast<std::int64_t>(cfg.HV) * cfg.V);
        app(h.in.a, static_cast<std::int64_t>(cfg.HV) * cfg.a_width());
        app(h.in.b, cfg.HV);
        ASSERT_TRUE(bitwise_equal(got, want)) << "layer " << l << " row " << r << " token " << t << " payload row";
      }
    }
  }

  // Commit both paths.
  cuda::commit_copy(bf);
  cuda::commit_replay(br);
  cuda::synchronize();

  // Which heads each layer's commit may write: (write_slot) of real rows with n > 0.
  std::vector<std::int32_t> written;
  for (const auto& b : c.rows)
    if (b.slot != kPadSlot && b.write_slot != kPadSlot && b.accepted > 0) written.push_back(b.write_slot);
  for (int l = 0; l < L; ++l) {
    const auto li = static_cast<std::size_t>(l);
    const auto pa = to_host(poolA[li]);
    const auto pb = to_host(poolB[li]);
    ASSERT_TRUE(pa == pb) << "layer " << l << ": committed pools differ between ReplaySSM and full-state";
    // Untouched: every element outside the written heads equals its initial bits (other slots, gaps).
    const std::size_t es = dsize(sd);
    for (int s = 0; s < c.pool.num_slots; ++s) {
      const bool w = std::find(written.begin(), written.end(), s) != written.end();
      const std::size_t from = static_cast<std::size_t>(s * stride + (w ? cfg.state_elems() : 0)) * es;
      const std::size_t to = static_cast<std::size_t>((s + 1) * stride) * es;
      ASSERT_TRUE(std::equal(pb.begin() + static_cast<std::ptrdiff_t>(from), pb.begin() + static_cast<std::ptrdiff_t>(to),
                             pool0[li].begin() + static_cast<std::ptrdiff_t>(from)))
          << "layer " << l << " slot " << s << (w ? " gap" : "") << " changed";
    }
  }

  // CPU float reference: the batch-level reference of the same kernels over the same descriptors
  // (reference/batch.hpp), storing the F32 values before the kernels' one rounding (Store::Unrounded; the
  // tolerance includes that rounding). Skipped when beta is rounded to bf16: see gpu_vs_cpu_tolerance / docs.
  if (cfg.round_beta_to_act) return;
  const Tolerance to = gpu_vs_cpu_tolerance(ad), ts = gpu_vs_cpu_tolerance(sd);
  ref::batch::Batch rb;
  rb.cfg = cfg;
  rb.pool = c.pool;
  rb.payload = c.pay;
  rb.max_T = c.max_T;
  rb.rows = c.rows;
  rb.page_table = c.pages;
  rb.total_tokens = c.total_tokens;
  rb.validate();
  std::vector<std::vector<float>> ref_pool(static_cast<std::size_t>(L)), ref_scratch(static_cast<std::size_t>(L)),
      ref_o(static_cast<std::size_t>(L));
  std::vector<ref::batch::Layer> ref_layers;
  for (int l = 0; l < L; ++l) {
    const auto li = static_cast<std::size_t>(l);
    ref_pool[li] = get(pool0[li], 0, static_cast<std::size_t>(pool_elems), sd);
    ref_scratch[li].assign(static_cast<std::size_t>(nrows) * static_cast<std::size_t>(c.max_T * cfg.state_elems()), 0.f);
    ref_o[li].assign(static_cast<std::size_t>(o_elems), 0.f);
    ref_layers.push_back(ref::batch::Layer{&lh[li].params, &ref_pool[li], nullptr, &ref_scratch[li]});
    ref::batch::verify_full_state(rb, ref_layers[li], lh[li].in, ref_o[li], ref::batch::Store::Unrounded);
  }
  ref::batch::commit_copy(rb, ref_layers);
  const auto slice = [](const std::vector<float>& x, std::int64_t at, std::int64_t n) {
    return std::vector<float>(x.begin() + at, x.begin() + at + n);
  };
  for (int l = 0; l < L; ++l) {
    const auto li = static_cast<std::size_t>(l);
    const auto pb = to_host(poolB[li]);
    for (int r = 0; r < nrows; ++r) {
      const BatchRow& b = c.rows[static_cast<std::size_t>(r)];
      if (b.slot == kPadSlot) continue;
      const std::int64_t ob = static_cast<std::int64_t>(b.token_offset) * cfg.HV * cfg.V,
                         on = static_cast<std::int64_t>(b.T) * cfg.HV * cfg.V;
      const auto o = slice(ref_o[li], ob, on);
      const auto og = get(oh[li], ob, static_cast<std::size_t>(on), ad);
      const auto ro = compare(o, og, to);
      worst.add(std::string("o ") + std::string(dtype_name(ad)), ro, o, og);
      EXPECT_TRUE(ro.ok) << "layer " << l << " row " << r << " outputs: " << ro.str();
      for (int t = 0; t < b.T; ++t) {
        const std::int64_t at = ((static_cast<std::int64_t>(r) * c.max_T + t) * cfg.HV) * head;
        const auto want = slice(ref_scratch[li], at, cfg.state_elems());
        const auto sg = get(scratch_h[li], at, static_cast<std::size_t>(cfg.state_elems()), sd);
        const auto rs = compare(want, sg, ts);
        worst.add(std::string("S_t ") + std::string(dtype_name(sd)), rs, want, sg);
        EXPECT_TRUE(rs.ok) << "layer " << l << " row " << r << " state after token " << t << ": " << rs.str();
      }
      if (b.write_slot != kPadSlot && b.accepted > 0) {
        const auto want = slice(ref_pool[li], b.write_slot * stride, cfg.state_elems());
        const auto cg = get(pb, b.write_slot * stride, static_cast<std::size_t>(cfg.state_elems()), sd);
        const auto rc = compare(want, cg, ts);
        worst.add(std::string("S_commit ") + std::string(dtype_name(sd)), rc, want, cg);
        EXPECT_TRUE(rc.ok) << "layer " << l << " row " << r << " committed state (n=" << b.accepted << "): " << rc.str();
      }
    }
  }
}

void run_many(Op op, std::uint64_t salt) {
  const std::uint64_t n = env_u64("REPLAYSSM_GPU_CASES", 48), seed0 = env_u64("REPLAYSSM_GPU_SEED", 1);
  const bool verbose = env_u64("REPLAYSSM_GPU_VERBOSE", 0) != 0;
  WorstTracker worst;
  std::printf("GPU %s cases: %llu from seed %llu (REPLAYSSM_GPU_CASES / REPLAYSSM_GPU_SEED)\n", to_string(op).c_str(),
              static_cast<unsigned long long>(n), static_cast<unsigned long long>(seed0));
  for (std::uint64_t i = 0; i < n; ++i) {
    const std::uint64_t seed = seed0 + i + salt;
    run_case(make_case(seed, op), worst, verbose);
    if (::testing::Test::HasFatalFailure()) break;
  }
  worst.print();
}

}  // namespace

TEST(GpuStep, GdnReplayBitExactWithFullStateAndNearReference) {
  REPLAYSSM_REQUIRE_GPU();
  run_many(Op::GDN, 0);
}

TEST(GpuStep, KdaReplayBitExactWithFullStateAndNearReference) {
  REPLAYSSM_REQUIRE_GPU();
  run_many(Op::KDA, 1000000);
}

// The large-head decomposition (K = 256: 16 lanes per row, V split into tiles) and K != V with 256.
TEST(GpuStep, Head256) {
  REPLAYSSM_REQUIRE_GPU();
  WorstTracker worst;
  const int shapes[][2] = {{256, 256}, {256, 64}, {64, 256}, {128, 256}};
  std::uint64_t seed = 500;
  for (const auto& kv : shapes)
    for (int rep = 0; rep < 2; ++rep) {
      run_case(make_case(seed++, Op::GDN, CaseShape{kv[0], kv[1]}), worst, false);
      if (HasFatalFailure()) return;
    }
  run_case(make_case(seed++, Op::KDA, CaseShape{256, 256}), worst, false);
  worst.print();
}

// Enough tiles that each persistent CTA loops over several of them (items > resident CTAs), so the
// prefetch of the next tile and the PAD / n = 0 skipping inside the loop are exercised; the two paths
// draw their schedules independently, and a forced mix checks persistent against per-tile bitwise.
TEST(GpuStep, PersistentScheduleLoopsOverManyTiles) {
  REPLAYSSM_REQUIRE_GPU();
  WorstTracker worst;
  const std::uint64_t n = env_u64("REPLAYSSM_GPU_BIG_CASES", 4);
  for (std::uint64_t seed = 900; seed < 900 + n; ++seed) {
    StepCase c = make_case(seed, seed % 2 ? Op::KDA : Op::GDN, CaseShape{128, 128, 24, 4, 4, 2});
    c.cfg.layout = StateLayout::VK;
    c.sched_full = seed % 2 ? cuda::Schedule::PerTile : cuda::Schedule::Persistent;
    c.sched_replay = seed % 2 ? cuda::Schedule::Persistent : cuda::Schedule::PerTile;
    run_case(c, worst, false);
    if (HasFatalFailure()) return;
  }
  worst.print();
}

// Descriptor errors are thrown on the host, naming the field, before anything is launched.
TEST(GpuStep, LaunchersRejectBadDescriptors) {
  REPLAYSSM_REQUIRE_GPU();
  ModelConfig cfg = preset("qwen3.5");
  cfg.HV = 4;
  cfg.H = 2;
  PoolGeometry pool{1, 4, 0};
  PayloadGeometry pay{4, 4, 1};
  cuda::DeviceBatch b(cfg, pool, pay, 4, 2);
  auto field_of = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.field();
    }
    return "<no error>";
  };
  std::vector<BatchRow> rows{{0, 0, 4, 0, 2}, {1, 1, 3, 4, 0}};
  b.set_rows(rows, {0, 1}, 7);
  EXPECT_EQ(field_of([&] { b.set_accepted({5, 0}); }), "accepted[0]");
  EXPECT_EQ(field_of([&] { b.set_accepted({1}); }), "accepted");
  EXPECT_EQ(field_of([&] { b.set_rows({{0, 2, 4, 0, 0}, {2, 1, 1, 4, 0}}, {0, 1}, 7); }), "rows[0].write_slot");
  EXPECT_EQ(field_of([&] { b.set_rows(rows, {0, 0}, 7); }), "page_table[1]");
  EXPECT_EQ(field_of([&] { b.set_rows(rows, {0, 1}, 6); }), "rows[1].token_offset");
  cuda::DeviceBuffer poolbuf(static_cast<std::size_t>(4 * cfg.state_elems() * 4)), params(4096), o(1 << 20);
  cuda::LayerPointers lp;
  lp.pool = poolbuf.get();
  lp.A_log = params.as<const float>();
  lp.dt_bias = params.as<const float>();
  cuda::TokenInputs in{o.get(), o.get(), o.get(), o.get(), o.get()};
  EXPECT_EQ(field_of([&] { cuda::verify_full_state(b, lp, in, o.get()); }), "layer.scratch");
  EXPECT_EQ(field_of([&] { cuda::verify_replay(b, lp, in, nullptr); }), "o");
  EXPECT_EQ(field_of([&] { cuda::commit_replay(b); }), "layers");
  b.set_layers({lp});
  EXPECT_EQ(field_of([&] { cuda::commit_replay(b); }), "layers[0].payload");
  EXPECT_EQ(field_of([&] { cuda::commit_copy(b); }), "layers[0].scratch");
  EXPECT_EQ(field_of([&] { b.set_layers({lp, lp}); }), "layers");
  cuda::DecodeRingRecords ring{o.get(), o.get(), o.as<float>()};
  EXPECT_EQ(field_of([&] { cuda::ring_decode(b, lp, ring, in, o.get()); }), "write_pos");
  b.set_decode_ring({0, 0}, 4);
  EXPECT_EQ(field_of([&] { cuda::ring_decode(b, lp, ring, in, o.get()); }), "rows[0].T");
  EXPECT_EQ(field_of([&] { b.set_decode_ring({0, 4}, 4); }), "write_pos[1]");
  ModelConfig kv = cfg;
  kv.layout = StateLayout::KV;
  cuda::DeviceBatch bkv(kv, pool, pay, 4, 2);
  EXPECT_EQ(field_of([&] { bkv.set_schedule(cuda::Schedule::Persistent); }), "schedule");
  EXPECT_EQ(field_of([&] { bkv.set_schedule(cuda::Schedule::PerTile); }), "<no error>");
  cuda::synchronize();
}

// Which launch instance runs for which shape (cuda::last_launch): the claims of docs/cuda.md pinned, so that a
// change of launch bounds, stage size or dispatch that silently moves a shape to another instance or register
// budget (a performance regression the bitwise tests cannot see) fails here. The default (Auto) schedule is
// per-tile ("Per-tile at three CTAs per SM"): verify and commit_replay kernels compiled for 3 CTAs of 4 warps
// per SM (168 registers; 12 one-warp CTAs for 64 x 64), except the KDA verify, for 2. A forced persistent
// schedule ("Toward the bandwidth floor"): 128 x 128 GDN verify dense (3 CTAs per SM) while its stage of max_T
// tokens lets three CTAs fit (T <= 7), the standard persistent one at T = 8; KDA verify never dense
// (REPLAYSSM_DENSE_KDA is off: it spilled); 128 x 128 commit_replay, GDN and KDA: dense at short windows;
// K = 64: no dense instance. The instance is a performance choice only (the instances are bitwise equal: the
// tests above mix schedules), so values here are zeros.
TEST(GpuStep, LaunchInstancePinnedByShape) {
  REPLAYSSM_REQUIRE_GPU();
  struct Case {
    const char* preset;
    int K, T;
    cuda::Schedule sched;
    const char *verify, *commit;  // expected instance; nullptr: printed, not asserted
    int verify_ctas, commit_ctas;  // expected resident CTAs per SM; 0: printed, not asserted
  };
  using S = cuda::Schedule;
  const std::vector<Case> cases{
      {"qwen3.5", 128, 2, S::Auto, "per_tile", "per_tile", 3, 3},
      {"qwen3.5", 128, 8, S::Auto, "per_tile", "per_tile", 3, 3},
      {"kimi-linear", 128, 2, S::Auto, "per_tile", "per_tile", 2, 3},
      {"qwen3.5", 64, 2, S::Auto, "per_tile", "per_tile", 12, 12},  // 64 x 64: one-warp CTAs, 12 x 32 x 168 regs
      {"qwen3.5", 128, 2, S::PerTile, "per_tile", "per_tile", 3, 3},
      {"qwen3.5", 128, 2, S::Persistent, "dense", "dense", 3, 3},
      {"qwen3.5", 128, 4, S::Persistent, "dense", "dense", 3, 3},
      {"qwen3.5", 128, 7, S::Persistent, "dense", nullptr, 3, 0},
      {"qwen3.5", 128, 8, S::Persistent, "persistent", nullptr, 2, 0},
      {"kimi-linear", 128, 2, S::Persistent, "persistent", "dense", 2, 3},
      {"kimi-linear", 128, 4, S::Persistent, "persistent", "dense", 2, 3},
      {"qwen3.5", 64, 2, S::Persistent, "persistent", "persistent", 0, 0},
  };
  for (const auto& c : cases) {
    ModelConfig cfg = preset(c.preset);
    cfg.H = cfg.op == Op::KDA ? 4 : 2;  // fewer heads than the model: the instance depends on K, V, T, not HV
    cfg.HV = 4;
    cfg.K = cfg.V = c.K;
    cfg.num_layers = 1;
    const std::int32_t rows = 2;
    const PoolGeometry pool{1, 4, 0};
    const auto pay = PayloadGeometry::sized(4, c.T, rows);
    cuda::DeviceBatch b(cfg, pool, pay, c.T, rows);
    b.set_schedule(c.sched);
    std::vector<std::int32_t> pages;
    for (std::int32_t i = 0; i < rows * pay.pages_per_row; ++i) pages.push_back(i);
    b.set_rows({{1, 1, c.T, 0, 0}, {3, 3, c.T, c.T, 0}}, pages, 2 * c.T);
    const std::size_t big = std::size_t{8} << 20;
    cuda::DeviceBuffer poolbuf(static_cast<std::size_t>(4 * cfg.state_elems() * 4)), params(1 << 16),
        payload(static_cast<std::size_t>(cuda::payload_bytes(cfg, pay))), in(big), o(big);
    poolbuf.fill_bytes(0), params.fill_bytes(0), payload.fill_bytes(0), in.fill_bytes(0);
    cuda::LayerPointers lp;
    lp.pool = poolbuf.get();
    lp.A_log = params.as<const float>();
    lp.dt_bias = params.as<const float>();
    lp.payload = payload.get();
    b.set_layers({lp});
    const cuda::TokenInputs ti{in.get(), in.get(), in.get(), in.get(), in.get()};
    cuda::verify_replay(b, lp, ti, o.get());
    cuda::synchronize();
    const auto v = cuda::last_launch();
    b.set_accepted({c.T, 1});
    cuda::commit_replay(b);
    cuda::synchronize();
    const auto m = cuda::last_launch();
    const std::string where = std::string(c.preset) + " K=" + std::to_string(c.K) + " T=" + std::to_string(c.T) + " " +
                              cuda::to_string(c.sched);
    std::printf(
        "%s: verify %s (grid %u, %d threads, %zu B smem, %d registers, %zu B local, %d CTAs/SM), "
        "commit %s (grid %u, %zu B smem, %d registers, %zu B local, %d CTAs/SM)\n",
        where.c_str(), v.instance.c_str(), v.grid, v.threads, v.smem, v.registers, v.local_bytes, v.ctas_per_sm,
        m.instance.c_str(), m.grid, m.smem, m.registers, m.local_bytes, m.ctas_per_sm);
    EXPECT_EQ(v.instance, c.verify) << where;
    if (c.commit) {
      EXPECT_EQ(m.instance, c.commit) << where;
    }
    if (c.verify_ctas) {
      EXPECT_EQ(v.ctas_per_sm, c.verify_ctas) << where;
    }
    if (c.commit_ctas) {
      EXPECT_EQ(m.ctas_per_sm, c.commit_ctas) << where;
    }
    EXPECT_GT(v.grid, 0u) << where;
  }
}
