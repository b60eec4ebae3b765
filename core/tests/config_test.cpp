#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "replayssm/config.hpp"
#include "replayssm/error.hpp"

using namespace replayssm;

TEST(Config, PresetsHaveRealDimensions) {
  const auto q = preset("qwen3.5");
  EXPECT_EQ(q.op, Op::GDN);
  EXPECT_EQ(q.H, 16);
  EXPECT_EQ(q.HV, 32);
  EXPECT_EQ(q.K, 128);
  EXPECT_EQ(q.V, 128);
  EXPECT_EQ(q.num_layers, 24);
  EXPECT_EQ(preset("qwen3-next").num_layers, 36);
  const auto k = preset("kimi-linear");
  EXPECT_EQ(k.op, Op::KDA);
  EXPECT_EQ(k.H, 32);
  EXPECT_EQ(k.HV, 32);
  EXPECT_EQ(k.num_layers, 20);
  for (const auto& n : preset_names()) EXPECT_NO_THROW(preset(n).validate()) << n;
}

TEST(Config, ModelConfigSetsNameRecurrenceAndDimensionsOnly) {
  nlohmann::json expected = to_json(ModelConfig{});
  expected.update({{"name", "m"}, {"op", "kda"}, {"H", 2}, {"HV", 6}, {"K", 16}, {"V", 24}, {"num_layers", 3}});
  EXPECT_EQ(to_json(model_config("m", Op::KDA, 2, 6, 16, 24, 3)), expected);
  EXPECT_EQ(model_config("m", Op::GDN, 1, 1, 2, 2).num_layers, 1);
}

TEST(Config, BlockGvaMapping) {
  auto c = preset("small-gva3");  // H=2, HV=6
  EXPECT_EQ(c.key_head(0), 0);
  EXPECT_EQ(c.key_head(2), 0);
  EXPECT_EQ(c.key_head(3), 1);  // modulo mapping would give 1 for hv=1, block gives 0
  EXPECT_EQ(c.key_head(1), 0);
}

TEST(Config, JsonRoundTripAndFieldNamedErrors) {
  for (const auto& n : preset_names()) {
    const auto c = preset(n);
    const auto back = config_from_json(to_json(c));
    EXPECT_EQ(to_json(back), to_json(c)) << n;
  }
  auto j = to_json(preset("tiny-gdn"));
  j["HV"] = 5;
  try {
    config_from_json(j);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "config.HV");
  }
  j = to_json(preset("tiny-gdn"));
  j["layout"] = "kvk";
  try {
    config_from_json(j);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "config.layout");
  }
  EXPECT_THROW(preset("qwen4"), Error);
  // No silent conversions: a fractional or huge integer, a number for a boolean, an unknown key.
  for (const auto& [key, bad] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"H", 2.9}, {"HV", 4294967298LL}, {"num_layers", true}, {"round_beta_to_act", 1}, {"round_beta", true}}) {
    auto jb = to_json(preset("tiny-gdn"));
    jb[key] = bad;
    try {
      config_from_json(jb);
      FAIL() << key << " = " << bad.dump() << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.field(), "config." + key);
    }
  }
}
