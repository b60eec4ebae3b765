#include <gtest/gtest.h>

#include <functional>

#include "replayssm/error.hpp"
#include "replayssm/step.hpp"

using namespace replayssm;

namespace {
std::string field_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.field();
  }
  return "<no error>";
}
}  // namespace

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
  EXPECT_EQ(field_of([&] { validate_batch(r, pool, cfg, 4, 7, true); }), "rows.token_offset");
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

TEST(Step, RingCommitRules) {
  RingGeometry g{6, 3};  // L = 9, P = 16
  EXPECT_EQ(g.physical(), 16);
  RingCursors c = ring_reset(g);
  EXPECT_EQ(c.write_pos, 0);
  EXPECT_FALSE(c.is_flush);
  c = ring_commit(c, g, 2);  // 2 + 6 <= 9: no flush next
  EXPECT_EQ(c.write_pos, 2);
  EXPECT_FALSE(c.is_flush);
  c = ring_commit(c, g, 3);  // 5 + 6 > 9: flush next
  EXPECT_EQ(c.write_pos, 5);
  EXPECT_TRUE(c.is_flush);
  c = ring_commit(c, g, 2);  // flushed with n > 0: origin moves past the folded history
  EXPECT_EQ(c.base, 5);
  EXPECT_EQ(c.write_pos, 2);
  c.is_flush = true;
  c = ring_commit(c, g, 0);  // flushed with n = 0: empty ring, origin unchanged
  EXPECT_EQ(c.base, 5);
  EXPECT_EQ(c.write_pos, 0);
  EXPECT_THROW(ring_commit(c, g, 4), Error);
  EXPECT_THROW(ring_reset(RingGeometry{2, 3}), Error);
  // Origin wraps modulo the physical length.
  RingCursors w{14, 5, true};
  EXPECT_EQ(ring_commit(w, g, 1).base, 3);
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
