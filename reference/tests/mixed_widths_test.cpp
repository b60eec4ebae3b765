// H6 (mixed spec and non-spec rows): the generator's batches mix T = 1 rows (plain decode) with T > 1 rows
// (verify windows, prefill chunks) often. Engines shipped index tables that reach the kernel as a strided
// column view in exactly these batches; the Python kit hands its index arrays as such views
// (replayssm_kit.target.Rows), so every mixed batch is a chance to catch a target that reads them by pointer.
#include <gtest/gtest.h>

#include "lifecycle.hpp"

using namespace replayssm;

namespace {
struct Mix {
  int steps = 0;    // steps with at least two rows
  int mixed = 0;    // of those, steps with a T = 1 row and a T > 1 row
};
Mix count(std::int32_t max_T) {
  Mix m;
  for (std::uint64_t seed = 1; seed <= 60; ++seed)
    for (const auto& c : fuzz::generate_commands(6, max_T, true, seed, 40)) {
      if (c.kind != ref::Cmd::Kind::Step || c.rows.size() < 2) continue;
      bool one = false, more = false;
      for (const auto& r : c.rows) (r.T == 1 ? one : more) = true;
      ++m.steps;
      m.mixed += one && more;
    }
  return m;
}
}  // namespace

// Per row, P(T = 1) = 1/2 * 1/max_T + 1/2 * 1/|{1} + verify widths <= max_T| (uniform half, engine-width half):
// 0.29 at max_T = 4, 0.23 at max_T = 12. A batch of two rows then mixes with probability 2p(1 - p) >= 0.35,
// more rows mix more often. The bound below (a quarter of the multi-row steps) leaves margin for two-row
// batches of prefill chunks, whose T is the chunk length, and fails if T = 1 rows stop being drawn on their
// own or the widths stop being drawn per row.
TEST(MixedWidths, TOneRowsAndWiderRowsShareABatchOften) {
  for (std::int32_t max_T : {4, 12}) {
    const Mix m = count(max_T);
    ASSERT_GT(m.steps, 100) << "max_T " << max_T;
    EXPECT_GE(4 * m.mixed, m.steps) << "max_T " << max_T << ": " << m.mixed << " of " << m.steps
                                    << " multi-row steps mix T = 1 and T > 1 rows";
    std::cout << "[mixed widths] max_T " << max_T << ": " << m.mixed << " of " << m.steps
              << " multi-row steps mix T = 1 and T > 1 rows\n";
  }
}
