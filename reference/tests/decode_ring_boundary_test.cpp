// The decode ring's flush pinned at its exact boundary: the step with write_pos == ring_len - 1 folds into
// the checkpoint and appends nothing; write_pos == ring_len - 2 appends and leaves the checkpoint's bytes
// alone; write_pos == ring_len is refused. Per request (decode_ring_step) and per batch (batch::ring_decode).
#include <gtest/gtest.h>

#include <cstring>

#include "replayssm/error.hpp"
#include "replayssm/recurrence/batch.hpp"
#include "replayssm/recurrence/inputs.hpp"
#include "replayssm/recurrence/mtp.hpp"
#include "replayssm/recurrence/spec_ring.hpp"

using namespace replayssm;
using namespace replayssm::ref;

namespace {
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}
ModelConfig cfg_small() {
  ModelConfig c = preset("tiny-gdn");
  c.act_dtype = DType::F32;
  return c;
}
}  // namespace

TEST(DecodeRingBoundary, FlushExactlyAtWritePosRingLenMinusOne) {
  const auto cfg = cfg_small();
  for (int L : {1, 2, 3, 5}) {
    const auto p = random_params(cfg, 3);
    const auto in = random_inputs(cfg, 2 * L + 1, 4);
    auto ck = random_state(cfg, 5);
    DecodeRing ring;
    ring.ring_len = L;
    for (int t = 0; t < 2 * L + 1; ++t) {
      const int m = ring.write_pos;
      const auto before = ck;
      decode_ring_step(cfg, p, in, t, ck, ring, Reconstruction::Serial, DType::F32);
      if (m == L - 1) {
        EXPECT_FALSE(same_bits(before, ck)) << "L=" << L << " t=" << t << ": the flush step left the checkpoint";
        EXPECT_EQ(ring.write_pos, 0) << "L=" << L << " t=" << t;
      } else {
        EXPECT_TRUE(same_bits(before, ck)) << "L=" << L << " t=" << t << ": a non-flush step wrote the checkpoint";
        EXPECT_EQ(ring.write_pos, m + 1) << "L=" << L << " t=" << t;
      }
    }
    ring.write_pos = L;
    EXPECT_THROW(decode_ring_step(cfg, p, in, 0, ck, ring, Reconstruction::Serial, DType::F32), Error);
  }
}

TEST(DecodeRingBoundary, BatchRingDecodeFlushesAtRingLenMinusOneOnly) {
  const auto cfg = cfg_small();
  const int L = 4;
  batch::Batch b;
  b.cfg = cfg;
  b.pool = PoolGeometry{1, 3, 0};
  b.rows = {BatchRow{1, 1, 1, 0, 0}};
  b.total_tokens = 1;
  b.validate();
  const auto p = random_params(cfg, 7);
  const auto in = random_inputs(cfg, 1, 8);
  for (int m : {L - 2, L - 1}) {
    std::vector<float> pool(static_cast<std::size_t>(3 * cfg.state_elems()));
    const auto S = random_state(cfg, 9);
    std::copy(S.begin(), S.end(), pool.begin() + cfg.state_elems());
    auto rec = batch::DecodeRingRecords::zeros(cfg, 3, L);
    for (int j = 0; j < m; ++j) {  // m committed records
      Record r;
      r.u = random_state(cfg, 20 + j);
      r.u.resize(static_cast<std::size_t>(cfg.HV * cfg.V));
      r.k = std::vector<float>(static_cast<std::size_t>(cfg.H * cfg.K), 0.25f);
      r.g = std::vector<float>(static_cast<std::size_t>(cfg.HV * cfg.a_width()), -0.5f);
      rec.put(cfg, 1, j, r);
    }
    const auto pool_before = pool;
    const auto rec_before = rec.u;
    std::vector<float> o(static_cast<std::size_t>(cfg.HV * cfg.V));
    batch::ring_decode(b, batch::Layer{&p, &pool, nullptr, nullptr}, {m}, rec, in, o);
    if (m == L - 1) {
      EXPECT_FALSE(same_bits(pool, pool_before)) << "m = ring_len - 1 must fold into the checkpoint";
      EXPECT_TRUE(same_bits(rec.u, rec_before)) << "a flush appends no record";
    } else {
      EXPECT_TRUE(same_bits(pool, pool_before)) << "m = ring_len - 2 must leave the checkpoint";
      EXPECT_FALSE(same_bits(rec.u, rec_before)) << "m = ring_len - 2 appends its record";
    }
  }
  std::vector<float> pool(static_cast<std::size_t>(3 * cfg.state_elems())), o(static_cast<std::size_t>(cfg.HV * cfg.V));
  auto rec = batch::DecodeRingRecords::zeros(cfg, 3, L);
  try {
    batch::ring_decode(b, batch::Layer{&p, &pool, nullptr, nullptr}, {L}, rec, in, o);
    FAIL() << "write_pos = ring_len accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "write_pos[0]");
  }
}

// The spec ring's records and cursors checked where they are used: a records array of the wrong length, or a
// write position whose window would run past the ring, is an Error naming the field, never an access outside it.
TEST(SpecRingIndices, OutOfRangeRecordsAndCursorsAreNamedErrors) {
  const auto cfg = cfg_small();
  const auto p = random_params(cfg, 4);
  const SpecRingGeometry g{4, 2};
  const auto in = random_inputs(cfg, 2, 9);
  auto field = [](auto f) {
    try {
      f();
    } catch (const Error& e) {
      return e.field();
    }
    return std::string("<no error>");
  };
  std::vector<float> checkpoint(static_cast<std::size_t>(cfg.state_elems()), 0.0f);
  std::vector<Record> short_ring(static_cast<std::size_t>(g.physical()) - 1);
  EXPECT_EQ(field([&] { spec_ring_verify(cfg, p, g, SpecRingCursors{0, 0, false}, in, checkpoint, short_ring, {}); }),
            "records");
  std::vector<Record> ring(static_cast<std::size_t>(g.physical()));
  EXPECT_EQ(field([&] {
              spec_ring_verify(cfg, p, g, SpecRingCursors{0, g.physical() - 1, false}, in, checkpoint, ring, {});
            }),
            "cursors.write_pos");
  EXPECT_EQ(field([&] { spec_ring_history(g, SpecRingCursors{0, g.physical() + 1, false}, ring); }), "cursors.write_pos");
  EXPECT_EQ(field([&] { spec_ring_verify(cfg, p, g, SpecRingCursors{0, 0, false}, in, checkpoint, ring, {}); }),
            "<no error>");
}
