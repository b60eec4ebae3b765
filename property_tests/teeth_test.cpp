// Teeth: every fault of the catalogue (reference/fault.hpp) must be caught by the default lifecycle property
// within its normal case budget (RC_PARAMS max_success, default 100), with a shrunk counterexample. A fault
// that survives means the suite has a blind spot, and this test fails.
//
// And at every precision tier (tier.hpp): judged with a tier's tolerance instead of bit-exactness, every
// bookkeeping fault (an O(1) error) must still be caught, and the test prints the margin between the fault's
// effect and the tier's budget. A fault whose whole effect is one rounding (beta rounded to bf16 in one path)
// is caught at the fp32 tier; the tiers coarser than its effect are named as blind to it.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <rapidcheck/detail/Configuration.h>

#include <optional>
#include <sstream>

#include "gen.hpp"
#include "lifecycle.hpp"

using namespace replayssm;

namespace {
struct Outcome {
  bool caught = false;
  std::string text;
  std::size_t sequence_length = 0;
};

struct TierOutcome {
  std::optional<CompareReport> comparison;
  Tolerance tolerance;
};

Outcome hunt(ref::Fault fault, const std::string& target, std::optional<Tier> tier = std::nullopt,
             TierOutcome* at_tier = nullptr) {
  std::vector<ref::Cmd> seq;
  std::string reason;
  fuzz::LifecycleJudging judging;
  judging.tier = tier;
  if (at_tier) {
    judging.failed_comparison = &at_tier->comparison;
    judging.failed_tolerance = &at_tier->tolerance;
  }
  auto prop = [&] {
    const bool exact = target == "ring";
    auto setup = *testgen::lifecycle_setup(exact);
    if (const auto recon = ref::fault_reconstruction(fault)) setup.recon = *recon;  // where the fault lives
    fuzz::check_lifecycle(setup, target, fault, &seq, &reason, judging);
  };
  rc::detail::TestMetadata meta;
  meta.id = "teeth/" + ref::to_string(fault) + "/" + target + (tier ? "/" + to_string(*tier) : "");
  meta.description = meta.id;
  const auto params = rc::detail::configuration().testParams;
  const auto result = rc::detail::checkTestable(prop, meta, params);
  Outcome o;
  rc::detail::FailureResult failure;
  if (result.match(failure)) {
    o.caught = true;
    std::ostringstream os;
    rc::detail::printResultMessage(failure, os);
    o.text = os.str() + "\nlast failure: " + reason;
    o.sequence_length = seq.size();
  } else {
    std::ostringstream os;
    rc::detail::printResultMessage(result, os);
    o.text = os.str();
  }
  return o;
}
}  // namespace

class Teeth : public ::testing::TestWithParam<std::tuple<ref::Fault, std::string>> {};

TEST_P(Teeth, DefaultPropertyCatchesFault) {
  const auto [fault, target] = GetParam();
  const Outcome o = hunt(fault, target);
  EXPECT_TRUE(o.caught) << "fault " << ref::to_string(fault) << " on target " << target
                        << " survived the default lifecycle property:\n" << o.text;
  if (o.caught) {
    std::cout << "[teeth] " << ref::to_string(fault) << " / " << target << ": caught; shrunk to "
              << o.sequence_length << " commands\n" << o.text << "\n";
  }
}

namespace {
std::vector<std::tuple<ref::Fault, std::string>> cases() {
  std::vector<std::tuple<ref::Fault, std::string>> v;
  for (auto f : ref::all_faults())
    for (const auto& t : ref::fault_targets(f)) v.emplace_back(f, t);
  return v;
}
}  // namespace

INSTANTIATE_TEST_SUITE_P(Catalogue, Teeth, ::testing::ValuesIn(cases()),
                         [](const auto& info) {
                           return ref::to_string(std::get<0>(info.param)) + "_" + std::get<1>(info.param);
                         });

TEST(TeethCatalogue, HasAtLeastTwelveFaultKinds) { EXPECT_GE(ref::all_faults().size(), 12u); }

// --- the same faults judged at each precision tier --------------------------------------------------------
namespace {
// Faults whose whole effect is one rounding: the tiers whose budget is coarser than that rounding.
bool blind(ref::Fault f, Tier t) { return f == ref::Fault::BetaRoundingOnePath && t != Tier::Fp32; }

// How far the fault's effect lies beyond the tier's budget: the larger of the relative RMS over its budget
// and the worst element over its bound.
std::string margin(const TierOutcome& o) {
  if (!o.comparison) return "structural (request table, slots or an error: independent of the tier)";
  const auto& r = *o.comparison;
  std::ostringstream os;
  if (r.max_abs == 0 && r.mismatches > 0) {  // only non-finite elements differ
    os << "non-finite values where the oracle's are finite (" << r.mismatches << " elements, e.g. got " << r.worst_got
       << " for " << r.worst_ref << "): beyond every budget";
    return os.str();
  }
  if (o.tolerance.kind == Tolerance::Kind::Exact) {  // a comparison exact at every tier (a conv window)
    os << "compared exactly at every tier (data movement: no rounding to budget for; " << r.mismatches
       << " elements differ, max|d| " << r.max_abs << ")";
    return os.str();
  }
  double m = r.worst_excess;
  if (o.tolerance.kind == Tolerance::Kind::Budget) m = std::max(m, r.rel_rms / o.tolerance.ratio);
  os << "effect " << m << "x the budget (" << o.tolerance.str() << "; rel_rms " << r.rel_rms << ", max|d| "
     << r.max_abs << ")";
  return os.str();
}
}  // namespace

class TierTeeth : public ::testing::TestWithParam<std::tuple<ref::Fault, std::string, Tier>> {};

TEST_P(TierTeeth, FaultCaughtAtTier) {
  const auto [fault, target, tier] = GetParam();
  TierOutcome at;
  const Outcome o = hunt(fault, target, tier, &at);
  const std::string name = ref::to_string(fault) + " / " + target + " @ " + to_string(tier);
  if (blind(fault, tier)) {
    std::cout << "[teeth-tier] " << name << ": the " << to_string(tier) << " tier cannot see this fault (its effect is "
              << "one bf16 rounding of beta, below the tier's budget); " << (o.caught ? "caught anyway: " + margin(at)
                                                                                     : "not caught") << "\n";
    return;
  }
  EXPECT_TRUE(o.caught) << name << " survived the default lifecycle property at the " << to_string(tier)
                        << " tier:\n" << o.text;
  if (o.caught) {
    // A non-finite output is reported by the NaN tripwire before any comparison: beyond every budget.
    const bool tripwire = o.text.find("last failure: NaN tripwire") != std::string::npos;
    std::cout << "[teeth-tier] " << name << ": caught; "
              << (tripwire ? "a non-finite output where the oracle's is finite (NaN tripwire): beyond every budget"
                           : margin(at))
              << "; " << o.text.substr(0, o.text.find('\n')) << "\n";  // RapidCheck's "Falsifiable after N tests"
  }
}

namespace {
std::vector<std::tuple<ref::Fault, std::string, Tier>> tier_cases() {
  std::vector<std::tuple<ref::Fault, std::string, Tier>> v;
  for (auto f : ref::all_faults())
    for (const auto& t : ref::fault_targets(f))
      for (Tier tier : all_tiers()) v.emplace_back(f, t, tier);
  return v;
}
}  // namespace

INSTANTIATE_TEST_SUITE_P(Catalogue, TierTeeth, ::testing::ValuesIn(tier_cases()), [](const auto& info) {
  return ref::to_string(std::get<0>(info.param)) + "_" + std::get<1>(info.param) + "_" +
         to_string(std::get<2>(info.param));
});
