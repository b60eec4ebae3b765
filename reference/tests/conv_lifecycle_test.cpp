// The conv state through a request lifecycle, as `replayssm conv fuzz` runs it: lifecycle campaigns with the conv
// component in every case (reference/fuzz/campaign.hpp, ConvShape), judged by the lifecycle judge's conv checks
// (judge_conv.cpp: outputs and windows against the full-state oracle and each request's history, untouched
// slots and gaps). Both conv designs pass at the default budget for several conv shapes; every conv fault of
// the catalogue is caught on each target it lives in, with its shrunk case dumped; a fault outside its design is
// refused by name.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>

#include "campaign.hpp"
#include "replayssm/error.hpp"
#include "replayssm/lifecycle/fault.hpp"
#include "replayssm/testing/field_of.hpp"

using namespace replayssm;

namespace {

// The conv shapes of the campaigns: the shipped one (W = 4, SiLU, windows in the activation dtype), an F32
// model with BF16 windows and a bias, a one-column window without activation, and a window longer than most
// verify windows (old columns survive a commit).
std::vector<fuzz::ConvShape> shapes() {
  std::vector<fuzz::ConvShape> out;
  out.push_back(fuzz::ConvShape{});
  out.push_back(fuzz::ConvShape{4, DType::BF16, ref::ConvActivation::Silu, true});
  out.push_back(fuzz::ConvShape{2, std::nullopt, ref::ConvActivation::None, false});
  out.push_back(fuzz::ConvShape{6, DType::F32, ref::ConvActivation::Silu, false});
  return out;
}

fuzz::FuzzOptions options(const std::string& target, ref::Fault fault, const fuzz::ConvShape& shape, bool kda) {
  fuzz::FuzzOptions o;
  o.target = target;
  o.cfg = preset(kda ? "tiny-kda" : "tiny-gdn");
  o.cfg.num_layers = 1;
  if (kda) o.cfg.act_dtype = DType::F32;  // every other shape on an F32 KDA model (the others: BF16 GDN)
  o.seed = 7;
  o.cases = 30;
  o.max_commands = 40;
  o.max_T = 5;
  o.fault = fault;
  o.conv = fuzz::ConvMix::On;
  o.conv_shape = shape;
  o.dump_dir = ::testing::TempDir() + "conv_lifecycle_" + std::to_string(::getpid());  // this process's own dumps
  return o;
}

}  // namespace

TEST(ConvLifecycle, BothDesignsPassAtTheDefaultBudget) {
  const auto all = shapes();
  for (std::size_t i = 0; i < all.size(); ++i)
    for (const char* target : {"replay", "full_state"}) {
      const auto& shape = all[i];
      const auto r = fuzz::run_fuzz(options(target, ref::Fault::None, shape, i % 2 == 1), nullptr);
      EXPECT_TRUE(r.covered) << r.not_covered;
      EXPECT_FALSE(r.failed) << target << " W=" << shape.kernel_size << ": " << r.reason;
      EXPECT_EQ(r.cases_passed, 30);
    }
}

TEST(ConvLifecycle, EveryConvFaultIsCaughtOnEachTargetItLivesIn) {
  int faults = 0;
  for (auto fault : ref::all_faults()) {
    if (!ref::conv_fault(fault)) continue;
    ++faults;
    for (const auto& target : ref::fault_targets(fault)) {
      const auto all = shapes();
      for (std::size_t i = 0; i < all.size(); ++i) {
        const auto& shape = all[i];
        const auto r = fuzz::run_fuzz(options(target, fault, shape, i % 2 == 1), nullptr);
        EXPECT_TRUE(r.failed) << ref::to_string(fault) << " on " << target << " passes " << r.cases_passed
                              << " cases with W = " << shape.kernel_size;
        if (!r.failed) continue;
        EXPECT_FALSE(r.reason.empty());
        EXPECT_TRUE(std::filesystem::exists(r.dump_path)) << r.dump_path;
        // The dump replays to the same kind of failure against the same target.
        EXPECT_FALSE(fuzz::replay_dump(r.dump_path).empty()) << r.dump_path;
        std::filesystem::remove(r.dump_path);
        if (shape.kernel_size == 4 && !shape.bias)
          std::cout << ref::to_string(fault) << " / " << target << ": caught after " << r.cases_passed
                    << " passing cases: " << r.reason << "\n";
      }
    }
  }
  EXPECT_EQ(faults, 7);  // 3 of the lifecycle's conv component + the 4 of the former standalone conv driver
}

TEST(ConvLifecycle, AFaultOutsideItsDesignIsRefusedByName) {
  // conv_rollback_to_window lives in the full-state conv design; the replay design's version of that slip is
  // conv_commit_keeps_window_tail.
  EXPECT_EQ(replayssm::testing::field_of([] {
              fuzz::run_fuzz(options("replay", ref::Fault::ConvRollbackToWindow, fuzz::ConvShape{}, false), nullptr);
            }),
            "fault");
  // The full_state target (the oracle's design) carries conv faults of its design only.
  EXPECT_EQ(replayssm::testing::field_of([] { ref::make_target("full_state", ref::Fault::OffByOneAccepted); }), "fault");
  EXPECT_NO_THROW(ref::make_target("full_state", ref::Fault::ConvStaleStateOnFreshPrefill));
}
