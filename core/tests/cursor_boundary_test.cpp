// Every spec-ring cursor rule pinned at its exact boundary (core/step.hpp): a rule moved by one step fails
// here by name, instead of surfacing (or not) as an out-of-range read somewhere else.
#include <gtest/gtest.h>

#include <string>
#include <vector>

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

// The verify widths engines ship (1 + num_draft = 2, 4, 5, 8, 12), each in the lifecycle's ring (B = T + 2),
// the tightest ring (B = T, L = 2T) and a roomy one (B = 3T + 1): over every cursor state reachable from a
// fresh slot by commits of n in [0, T], (a) every verify window lies inside the ring (write_pos + T <= L: a
// window never overwrites a live record modulo P), (b) the step after a commit flushes exactly when
// write_pos + 2T > L, so at write_pos == L - 2T it does not and at L - 2T + 1 it does, and (c) both of those
// boundary states are reached (the walk really crosses the boundary for this width).
TEST(SpecRingCursors, VerifyWidthsStayInsideTheRingAcrossTheEarlyFlushBoundary) {
  for (const std::int32_t T : {2, 4, 5, 8, 12})
    for (const std::int32_t B : {T, T + 2, 3 * T + 1}) {
      const SpecRingGeometry g{B, T};
      const std::int32_t L = g.logical(), P = g.physical();
      std::vector<SpecRingCursors> todo{spec_ring_reset(g)};
      std::vector<char> seen(static_cast<std::size_t>(P * (L + 1) * 2), 0);
      bool at_edge = false, past_edge = false;
      while (!todo.empty()) {
        const SpecRingCursors c = todo.back();
        todo.pop_back();
        const std::size_t key = (static_cast<std::size_t>(c.base) * (L + 1) + c.write_pos) * 2 + c.is_flush;
        if (seen[key]) continue;
        seen[key] = 1;
        const std::string where = "T=" + std::to_string(T) + " B=" + std::to_string(B) + " base=" +
                                  std::to_string(c.base) + " write_pos=" + std::to_string(c.write_pos);
        ASSERT_LE(c.write_pos + T, L) << "a window of " << T << " would leave the ring: " << where;
        ASSERT_EQ(c.is_flush, c.write_pos + 2 * T > L) << where;
        if (!c.is_flush && c.write_pos == L - 2 * T) at_edge = true;
        if (c.is_flush && c.write_pos == L - 2 * T + 1) past_edge = true;
        for (std::int32_t n = 0; n <= T; ++n) todo.push_back(spec_ring_commit(c, g, n));
      }
      EXPECT_TRUE(at_edge) << "write_pos == L - 2T never reached for T=" << T << " B=" << B;
      EXPECT_TRUE(past_edge) << "write_pos == L - 2T + 1 never reached for T=" << T << " B=" << B;
    }
}
