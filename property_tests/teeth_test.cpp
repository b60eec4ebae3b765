// Teeth: every fault of the catalogue (reference/engine.hpp, Fault) must be caught by the default lifecycle
// property within its normal case budget (RC_PARAMS max_success, default 100), with a shrunk
// counterexample. A fault that survives means the suite has a blind spot, and this test fails.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <rapidcheck/detail/Configuration.h>

#include "gen.hpp"
#include "lifecycle.hpp"

using namespace replayssm;

namespace {
struct Outcome {
  bool caught = false;
  std::string text;
  std::size_t sequence_length = 0;
};

Outcome hunt(ref::Fault fault, const std::string& target) {
  std::vector<ref::Cmd> seq;
  std::string reason;
  auto prop = [&] {
    const bool exact = target == "ring";
    const auto setup = *testgen::lifecycle_setup(exact);
    fuzz::check_lifecycle(setup, target, fault, &seq, &reason);
  };
  rc::detail::TestMetadata meta;
  meta.id = "teeth/" + ref::to_string(fault) + "/" + target;
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
