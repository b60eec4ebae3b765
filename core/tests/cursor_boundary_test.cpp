// Every spec-ring cursor rule pinned at its exact boundary (core/step.hpp): a rule moved by one step fails
// here by name, instead of surfacing (or not) as an out-of-range read somewhere else.
#include <gtest/gtest.h>

#include "replayssm/error.hpp"
#include "replayssm/step.hpp"

using namespace replayssm;

namespace {
SpecRingCursors at(std::int32_t base, std::int32_t write_pos, bool is_flush) { return {base, write_pos, is_flush}; }
}  // namespace

// The next step flushes exactly when write_pos + 2T > L: at write_pos + 2T == L the history and two more
// windows still fit, one more committed token and they do not.
TEST(SpecRingCursors, FlushPredicateIsExactlyWritePosPlus2TAboveL) {
  for (std::int32_t T = 1; T <= 5; ++T)
    for (std::int32_t B = T; B <= T + 6; ++B) {
      const SpecRingGeometry g{B, T};
      const std::int32_t L = g.logical();
      for (std::int32_t n = 0; n <= T; ++n) {
        // From an un-flushed state with write_pos w, committing n gives write_pos w + n.
        for (std::int32_t w = 0; w + n <= L; ++w) {
          const auto c = spec_ring_commit(at(0, w, false), g, n);
          EXPECT_EQ(c.write_pos, w + n) << "B=" << B << " T=" << T << " w=" << w << " n=" << n;
          EXPECT_EQ(c.is_flush, w + n + 2 * T > L) << "B=" << B << " T=" << T << " w=" << w << " n=" << n;
        }
      }
    }
}

TEST(SpecRingCursors, ResetFlushesOnlyWhenTwoWindowsDoNotFit) {
  EXPECT_FALSE(spec_ring_reset(SpecRingGeometry{3, 3}).is_flush);  // L = 6 = 2T: fits
  EXPECT_FALSE(spec_ring_reset(SpecRingGeometry{4, 3}).is_flush);
  EXPECT_EQ(spec_ring_reset(SpecRingGeometry{5, 2}).write_pos, 0);
  EXPECT_EQ(spec_ring_reset(SpecRingGeometry{5, 2}).base, 0);
  EXPECT_THROW(spec_ring_reset(SpecRingGeometry{2, 3}), Error);  // B < T: L < 2T is refused
}

// A flushed commit moves the origin past the folded history (modulo the physical length) and starts the
// history with the n new records; with n = 0 the origin stays and the history is empty.
TEST(SpecRingCursors, FlushedCommitMovesTheOriginExactly) {
  const SpecRingGeometry g{6, 3};  // L = 9, P = 16
  ASSERT_EQ(g.physical(), 16);
  for (std::int32_t base = 0; base < 16; ++base)
    for (std::int32_t w = 0; w <= 9; ++w)
      for (std::int32_t n = 0; n <= 3; ++n) {
        const auto c = spec_ring_commit(at(base, w, true), g, n);
        EXPECT_EQ(c.base, n > 0 ? (base + w) % 16 : base) << base << " " << w << " " << n;
        EXPECT_EQ(c.write_pos, n);
        EXPECT_EQ(c.is_flush, n + 2 * 3 > 9);
      }
}

TEST(SpecRingCursors, AcceptedOutsideTheWindowIsAnErrorNotAClamp) {
  const SpecRingGeometry g{4, 2};
  EXPECT_THROW(spec_ring_commit(at(0, 0, false), g, 3), Error);
  EXPECT_THROW(spec_ring_commit(at(0, 0, false), g, -1), Error);
}

TEST(SpecRingCursors, PhysicalLengthIsTheNextPowerOfTwo) {
  EXPECT_EQ((SpecRingGeometry{1, 1}).physical(), 2);
  EXPECT_EQ((SpecRingGeometry{2, 2}).physical(), 4);
  EXPECT_EQ((SpecRingGeometry{3, 2}).physical(), 8);  // L = 5
  EXPECT_EQ((SpecRingGeometry{4, 4}).physical(), 8);  // L = 8 exactly
  EXPECT_EQ((SpecRingGeometry{5, 4}).physical(), 16);
}
