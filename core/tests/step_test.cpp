#include <gtest/gtest.h>

#include <functional>

#include "replayssm/error.hpp"
#include "replayssm/testing/field_of.hpp"
#include "replayssm/step.hpp"

using namespace replayssm;
using replayssm::testing::field_of;


TEST(Step, ValidateBatchNamesTheField) {
  const auto cfg = preset("tiny-gdn");
  PoolGeometry pool{1, 8, 0};
  std::vector<BatchRow> rows{{5, 5, 3, 0, 2}, {kPadSlot, kPadSlot, 0, 0, 0}, {2, 2, 4, 3, 4}};
  EXPECT_NO_THROW(validate_batch(rows, pool, cfg, 4, 7, true));
  auto r = rows;
  r[0].accepted = 4;  // n > T is an error, never a clamp
  EXPECT_EQ(field_of([&] { validate_batch(r, pool, cfg, 4, 7, true); }), "rows[0].accepted");
  r = rows;
  r[2].accepted = -1;
  EXPECT_EQ(field_of([&] { validate_batch(r, pool, cfg, 4, 7, true); }), "rows[2].accepted");
  r = rows;
  r[2].slot = 8;
  EXPECT_EQ(field_of([&] { validate_batch(r, pool, cfg, 4, 7, true); }), "rows[2].slot");
  r = rows;
  r[2].slot = 5;
  EXPECT_EQ(field_of([&] { validate_batch(r, pool, cfg, 4, 7, true); }), "rows[2].slot");
  r = rows;
  r[2].token_offset = 2;
  EXPECT_EQ(field_of([&] { validate_batch(r, pool, cfg, 4, 7, true); }), "rows[2].token_offset");
  r = rows;
  r[2].T = 5;
  EXPECT_EQ(field_of([&] { validate_batch(r, pool, cfg, 4, 9, true); }), "rows[2].T");
  pool.slot_stride = 3;
  EXPECT_EQ(field_of([&] { validate_batch(rows, pool, cfg, 4, 7, true); }), "pool.slot_stride");
}

TEST(Step, PageTableValidation) {
  PayloadGeometry g{4, 6, 2};
  EXPECT_NO_THROW(g.validate_page_table({5, 0, 3, 1}, 2));
  EXPECT_EQ(field_of([&] { g.validate_page_table({5, 0, 3, 5}, 2); }), "page_table[3]");
  EXPECT_EQ(field_of([&] { g.validate_page_table({5, 0, 6, 1}, 2); }), "page_table[2]");
  EXPECT_EQ(field_of([&] { g.validate_page_table({5, 0, 3}, 2); }), "page_table");
}

TEST(Step, SpecRingCommitRules) {
  SpecRingGeometry g{6, 3};  // L = 9, P = 16
  EXPECT_EQ(g.physical(), 16);
  SpecRingCursors c = spec_ring_reset(g);
  EXPECT_EQ(c.write_pos, 0);
  EXPECT_FALSE(c.is_flush);
  c = spec_ring_commit(c, g, 2);  // 2 + 6 <= 9: no flush next
  EXPECT_EQ(c.write_pos, 2);
  EXPECT_FALSE(c.is_flush);
  c = spec_ring_commit(c, g, 3);  // 5 + 6 > 9: flush next
  EXPECT_EQ(c.write_pos, 5);
  EXPECT_TRUE(c.is_flush);
  c = spec_ring_commit(c, g, 2);  // flushed with n > 0: origin moves past the folded history
  EXPECT_EQ(c.base, 5);
  EXPECT_EQ(c.write_pos, 2);
  c.is_flush = true;
  c = spec_ring_commit(c, g, 0);  // flushed with n = 0: empty ring, origin unchanged
  EXPECT_EQ(c.base, 5);
  EXPECT_EQ(c.write_pos, 0);
  EXPECT_THROW(spec_ring_commit(c, g, 4), Error);
  EXPECT_THROW(spec_ring_reset(SpecRingGeometry{2, 3}), Error);
  // Origin wraps modulo the physical length.
  SpecRingCursors w{14, 5, true};
  EXPECT_EQ(spec_ring_commit(w, g, 1).base, 3);
}

TEST(Step, WriteSlotReadByAnotherRowIsRejected) {
  const auto cfg = preset("tiny-gdn");
  PoolGeometry pool{1, 8, 0};
  // Row 0 commits into slot 1 while row 1 reads slot 1 (and commits into slot 0, which row 0 reads).
  std::vector<BatchRow> rows{{0, 1, 2, 0, 1}, {1, 0, 2, 2, 1}};
  EXPECT_EQ(field_of([&] { validate_batch(rows, pool, cfg, 4, 4, true); }), "rows[0].write_slot");
  rows[1].write_slot = 5;  // out of place into a free slot: fine
  rows[0].write_slot = 0;
  EXPECT_NO_THROW(validate_batch(rows, pool, cfg, 4, 4, true));
}

TEST(Step, PadWindowsAreValidatedLikeRealOnes) {
  // A PAD row's outputs are written with zeros, so its window must be in range and disjoint from others.
  const auto cfg = preset("tiny-gdn");
  PoolGeometry pool{1, 8, 0};
  EXPECT_EQ(field_of([&] { validate_batch({{0, 0, 2, 0, 0}, {kPadSlot, kPadSlot, 2, 1, 0}}, pool, cfg, 4, 8, true); }),
            "rows[1].token_offset");
  EXPECT_EQ(field_of([&] { validate_batch({{kPadSlot, kPadSlot, 2, 7, 0}}, pool, cfg, 4, 8, true); }),
            "rows[0].token_offset");
  EXPECT_NO_THROW(validate_batch({{kPadSlot, kPadSlot, 0, 99, 0}, {1, 1, 2, 0, 1}}, pool, cfg, 4, 2, true));
}

TEST(Step, PayloadRowLayoutIsKVAB) {
  ModelConfig cfg = preset("tiny-gdn");
  cfg.H = 2;
  cfg.HV = 6;
  cfg.K = 8;
  cfg.V = 5;
  auto l = PayloadGeometry::row_layout(cfg);
  EXPECT_EQ(l.k, 0);
  EXPECT_EQ(l.v, 2 * 8);
  EXPECT_EQ(l.a, 2 * 8 + 6 * 5);
  EXPECT_EQ(l.b, 2 * 8 + 6 * 5 + 6);  // GDN: one gate input per value head
  EXPECT_EQ(l.width, 2 * 8 + 6 * 5 + 6 + 6);
  cfg.op = Op::KDA;  // one gate input per key channel
  l = PayloadGeometry::row_layout(cfg);
  EXPECT_EQ(l.b, 2 * 8 + 6 * 5 + 6 * 8);
  EXPECT_EQ(l.width, PayloadGeometry::row_width(cfg));
  EXPECT_EQ(l.width, 2 * 8 + 6 * 5 + 6 * 8 + 6);
}

TEST(Step, PayloadSizingAndPhysicalRows) {
  const PayloadGeometry g = PayloadGeometry::sized(4, 6, 3, 2);
  EXPECT_EQ(g.pages_per_row, 2);  // ceil(6 / 4)
  EXPECT_EQ(g.num_pages, 12);     // 2 copies of 3 rows of 2 pages
  EXPECT_EQ(PayloadGeometry::sized(3, 3, 1).pages_per_row, 1);
  EXPECT_EQ(field_of([] { PayloadGeometry::sized(0, 6, 3); }), "payload.page_tokens");
  EXPECT_EQ(field_of([] { PayloadGeometry::sized(4, 0, 3); }), "max_T");
  const std::vector<std::int32_t> table{7, 2, 0, 5};  // row 0: pages 7, 2; row 1: pages 0, 5
  EXPECT_EQ(g.physical_row(table, 0, 0), 28);
  EXPECT_EQ(g.physical_row(table, 0, 5), 2 * 4 + 1);
  EXPECT_EQ(g.physical_row(table, 1, 3), 3);
  EXPECT_EQ(g.physical_row(table, 1, 4), 20);
  const auto cfg = preset("tiny-gdn");
  EXPECT_EQ(g.elems(cfg), 12LL * 4 * PayloadGeometry::row_width(cfg));
}
