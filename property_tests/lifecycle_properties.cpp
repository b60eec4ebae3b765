// Whole command sequences (admission, chunked prefill, mixed spec/decode/prefill steps with PAD rows,
// early stop, finish, continuation, copy, preemption/resume, slot reuse) run on the full-state oracle and on
// each ReplaySSM target, compared after every command by the judge (reference/engine.hpp).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <map>
#include <set>

#include "gen.hpp"
#include "lifecycle.hpp"

using namespace replayssm;

// Raw-payload replay: bit-exact against full-state (AtCommit) for F32 and BF16 pools.
RC_GTEST_PROP(Lifecycle, ReplayMatchesFullStateBitForBit, ()) {
  const auto setup = *testgen::lifecycle_setup(false);
  fuzz::check_lifecycle(setup, "replay", ref::Fault::None);
}

// Corrected-update ring, Serial reconstruction, F32 records and pool: bit-exact against full-state.
RC_GTEST_PROP(Lifecycle, SerialRingMatchesFullStateBitForBit, ()) {
  const auto setup = *testgen::lifecycle_setup(true);
  fuzz::check_lifecycle(setup, "ring", ref::Fault::None);
}

// Corrected-update ring with closed-form reconstruction and/or BF16 records or pool: within
// ref::storage_tolerance (docs/numerics.md).
RC_GTEST_PROP(Lifecycle, RingVariantsMatchFullStateWithinTolerance, ()) {
  auto setup = *testgen::lifecycle_setup(false);
  setup.recon = *rc::gen::element(ref::Reconstruction::Serial, ref::Reconstruction::ClosedForm);
  setup.record_dtype = *rc::gen::element(DType::F32, DType::BF16);
  fuzz::check_lifecycle(setup, "ring", ref::Fault::None);
}

// Precision tiers (tier.hpp, docs/numerics.md) against implementations of their own precision: the replay
// design computed with TF32 dot-product operands stays inside the tf32 tier's budget over whole command
// sequences, and the fp32 tier tells it apart (at least one case of the campaign exceeds the fp32 bound,
// checked in TierBudgets.Fp32TierSeesTf32 below); the ring with BF16 records stays inside the bf16 tier.
RC_GTEST_PROP(TierBudgets, Tf32ReplayWithinTheTf32Tier, ()) {
  const auto setup = *testgen::lifecycle_setup(false);
  fuzz::LifecycleJudging at;
  at.tier = Tier::Tf32;
  fuzz::check_lifecycle(setup, "replay_tf32", ref::Fault::None, nullptr, nullptr, at);
}

RC_GTEST_PROP(TierBudgets, Bf16RecordRingWithinTheBf16Tier, ()) {
  auto setup = *testgen::lifecycle_setup(false);
  setup.record_dtype = DType::BF16;
  fuzz::LifecycleJudging at;
  at.tier = Tier::Bf16;
  fuzz::check_lifecycle(setup, "ring", ref::Fault::None, nullptr, nullptr, at);
}

TEST(TierBudgets, Fp32TierSeesTf32) {
  // The same campaign judged at the fp32 tier: TF32 operands are 2^13 times coarser than fp32 ones, so a
  // tier that let them through would not be an fp32 tier.
  bool caught = false;
  for (std::uint64_t seed = 1; seed <= 20 && !caught; ++seed) {
    auto setup = ref::make_setup(preset("tiny-gdn"), seed, 4, 4);
    setup.cfg.act_dtype = DType::F32;
    ref::Judge judge(setup, "replay_tf32", ref::Fault::None, Tier::Fp32);
    ref::Cmd admit;
    admit.kind = ref::Cmd::Kind::Admit;
    admit.slot = 1;
    admit.prompt = 8;
    admit.seed = seed;
    caught = !judge.apply(admit).empty();
    ref::Cmd step;
    step.kind = ref::Cmd::Kind::Step;
    step.rows.push_back(ref::RowSpec{0, 4, 4, 0, seed + 1});
    for (int i = 0; i < 4 && !caught; ++i) caught = !judge.apply(step).empty();
  }
  EXPECT_TRUE(caught) << "TF32 arithmetic passed the fp32 tier: the tier does not discriminate";
}

// H15: the generator draws every verify width engines ship (2, 4, 5, 8, 12) when max_T allows it, mixes widths
// within one batch, and widens windows past the 8 a kernel may be compiled for; with max_T = 6 it never
// exceeds max_T. Counted over the generator's own sequences (generate_commands, the campaigns' generator).
TEST(Lifecycle, GeneratorDrawsTheVerifyWidthsAndMixesThemInOneBatch) {
  for (const int max_T : {6, 12}) {
    std::map<int, int> widths;
    int mixed_steps = 0;
    for (std::uint64_t seed = 1; seed <= 20; ++seed)
      for (const auto& c : fuzz::generate_commands(6, max_T, true, seed, 60)) {
        std::set<int> in_step;
        for (const auto& r : c.rows) {
          ASSERT_GE(r.T, 1);
          ASSERT_LE(r.T, max_T) << "seed " << seed << ": " << c.str();
          ++widths[r.T];
          in_step.insert(r.T);
        }
        mixed_steps += in_step.size() > 1;
      }
    for (const int w : fuzz::kVerifyWidths)
      if (w <= max_T) {
        EXPECT_GE(widths[w], 10) << "width " << w << " drawn " << widths[w] << " times, max_T " << max_T;
      }
    EXPECT_GE(mixed_steps, 20) << "max_T " << max_T;
    if (max_T == 12) {
      int wide = 0;
      for (int w = 9; w <= 12; ++w) wide += widths[w];
      EXPECT_GE(wide, 40) << "windows wider than 8";
    }
  }
}
