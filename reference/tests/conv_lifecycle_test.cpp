// The conv state through a request lifecycle (conv_lifecycle.hpp): both designs agree with the full-state
// oracle and the request histories bit for bit at the default budget, and every conv fault of the catalogue
// is caught there, with a report naming the case seed, the command, the slot and the element.
#include <gtest/gtest.h>

#include <iostream>

#include "replayssm/error.hpp"
#include "replayssm/lifecycle/conv_lifecycle.hpp"

using namespace replayssm;

namespace {

std::vector<ref::ConvConfig> configs() {
  std::vector<ref::ConvConfig> out;
  ref::ConvConfig qwen_like = ref::conv_config_for(preset("tiny-gdn"));  // W = 4, SiLU, BF16 inputs and state
  out.push_back(qwen_like);
  ref::ConvConfig f32_bf16 = ref::conv_config_for(preset("tiny-kda"));
  f32_bf16.act_dtype = DType::F32;  // the state rounds what it stores
  f32_bf16.state_dtype = DType::BF16;
  f32_bf16.bias = true;
  out.push_back(f32_bf16);
  ref::ConvConfig w2 = qwen_like;
  w2.kernel_size = 2;  // a one-column state
  w2.activation = ref::ConvActivation::None;
  out.push_back(w2);
  ref::ConvConfig w6 = qwen_like;
  w6.kernel_size = 6;  // a state longer than most windows: old columns survive a commit
  w6.state_dtype = DType::F32;
  out.push_back(w6);
  return out;
}

}  // namespace

TEST(ConvLifecycle, BothDesignsAgreeWithTheOracleBitForBitAtTheDefaultBudget) {
  for (const auto& c : configs())
    for (auto design : {ref::ConvDesign::FullState, ref::ConvDesign::Replay}) {
      ref::ConvCampaignOptions o;
      o.cfg = c;
      o.seed = 7;
      const auto r = ref::run_conv_campaign(o, design, ref::ConvFault::None);
      EXPECT_TRUE(r.ok) << ref::to_json(c).dump() << ": " << r.failure;
      EXPECT_EQ(r.cases_run, o.cases);
    }
}

TEST(ConvLifecycle, EveryConvFaultIsCaughtAtTheDefaultBudget) {
  for (auto fault : ref::all_conv_faults())
    for (auto design : {ref::ConvDesign::FullState, ref::ConvDesign::Replay})
      for (const auto& c : configs()) {
        ref::ConvCampaignOptions o;
        o.cfg = c;
        o.seed = 7;
        const auto r = ref::run_conv_campaign(o, design, fault);
        EXPECT_FALSE(r.ok) << ref::to_string(fault) << " passes " << o.cases << " cases of " << ref::to_json(c).dump();
        if (!r.ok) {
          EXPECT_NE(r.failure.find("case seed"), std::string::npos) << r.failure;
          EXPECT_NE(r.failure.find("command"), std::string::npos) << r.failure;
          if (c.kernel_size == 4 && design == ref::ConvDesign::Replay)
            std::cout << ref::to_string(fault) << " caught in case " << r.cases_run << ": " << r.failure << "\n";
        }
      }
}

TEST(ConvLifecycle, BadRowsAreRefusedNamingTheField) {
  const auto c = ref::conv_config_for(preset("tiny-gdn"));
  ref::ConvStatePool pool(c, ref::random_conv_params(c, 1), 4, ref::ConvDesign::Replay);
  const auto x = ref::random_conv_inputs(c, 4, 2);
  auto field_of = [](auto fn) {
    try {
      fn();
    } catch (const Error& e) {
      return e.field();
    }
    return std::string("<no error>");
  };
  EXPECT_EQ(field_of([&] { pool.verify({{4, 4, 0}}, x); }), "rows[0].slot");
  EXPECT_EQ(field_of([&] { pool.verify({{1, 2, 0}, {1, 2, 0}}, x); }), "rows[1].slot");
  EXPECT_EQ(field_of([&] { pool.verify({{1, 3, 0}}, x); }), "x");
  pool.verify({{1, 4, 0}}, x);
  EXPECT_EQ(field_of([&] { pool.commit({{1, 4, 5}}); }), "rows[0].accepted");
}
