// Precision tiers: names, and budget tolerances compare as documented (the tolerance each tier gives is pinned
// for both judges by tier_table_test.cpp and core/tests/data/tier_tolerances.json).
#include <gtest/gtest.h>

#include "replayssm/compare.hpp"
#include "replayssm/error.hpp"
#include "replayssm/tier.hpp"

using namespace replayssm;

TEST(Tier, NamesRoundTripAndUnknownIsRefused) {
  for (Tier t : all_tiers()) EXPECT_EQ(parse_tier(to_string(t)), t);
  try {
    parse_tier("fp16", "capabilities.tier");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "capabilities.tier");
  }
}

TEST(Tier, BudgetChecksTheRmsAndEveryElement) {
  std::vector<double> ref(1000), got(1000);
  for (int i = 0; i < 1000; ++i) ref[static_cast<std::size_t>(i)] = -1.0 + 2.0 * i / 999.0;
  const Tolerance tol = Tolerance::budget(1e-3, 1e-2);
  for (int i = 0; i < 1000; ++i) got[static_cast<std::size_t>(i)] = ref[static_cast<std::size_t>(i)] + (i % 2 ? 1e-4 : -1e-4);
  EXPECT_TRUE(compare(ref, got, tol).ok);
  auto spike = ref;
  spike[17] += 2e-2;  // one element beyond atol: the RMS alone would pass
  const auto r = compare(ref, spike, tol);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.worst_index, 17u);
  auto drift = ref;
  for (auto& x : drift) x += 2e-3;  // every element inside atol, the RMS beyond the budget
  EXPECT_FALSE(compare(ref, drift, tol).ok);
  EXPECT_EQ(Tolerance::parse(tol.str()).str(), tol.str());
}
