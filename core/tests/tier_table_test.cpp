// The tier vocabulary is a contract between the C++ judge and the Python kit (replayssm_kit.tiers): both must
// give the tolerances pinned in core/tests/data/tier_tolerances.json, and the file names the vocabulary version.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "replayssm/tier.hpp"

using namespace replayssm;

TEST(TierTable, CppTierToleranceGivesThePinnedSpellings) {
  std::ifstream in(std::string(REPLAYSSM_SOURCE_DIR) + "/core/tests/data/tier_tolerances.json");
  ASSERT_TRUE(in) << "core/tests/data/tier_tolerances.json not found";
  const auto table = nlohmann::json::parse(in);
  EXPECT_EQ(table.at("vocabulary").get<std::string>(), kTierVocabularyVersion);
  ASSERT_GE(table.at("cases").size(), 24u);
  for (const auto& c : table.at("cases")) {
    ModelConfig cfg = preset("tiny-gdn");
    cfg.act_dtype = parse_dtype(c.at("config").at("act_dtype").get<std::string>());
    cfg.state_dtype = parse_dtype(c.at("config").at("state_dtype").get<std::string>());
    cfg.round_beta_to_act = c.at("config").at("round_beta_to_act").get<bool>();
    const Tolerance t = tier_tolerance(parse_tier(c.at("tier").get<std::string>()), cfg, c.at("scale").get<double>(),
                                       c.at("state").get<bool>());
    EXPECT_EQ(t.str(), c.at("tolerance").get<std::string>()) << c.dump();
  }
}
