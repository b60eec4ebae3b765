// `replayssm fuzz --replay` case files are read as strictly as fixtures (fuzz_case.hpp): found lax while
// fuzzing (docs/fuzzing.md). Each test case here was accepted, or crashed the reader, before.
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>

#include "fuzz_case.hpp"
#include "replayssm/error.hpp"
#include "replayssm/lifecycle/command.hpp"
#include "replayssm/testing/field_of.hpp"

using namespace replayssm;

namespace {
using replayssm::testing::field_of;

fuzz::FuzzCase sample() {
  fuzz::FuzzCase c;
  c.setup = ref::make_setup(preset("tiny-gdn"), 7, 3, 3);
  c.target = "replay";
  ref::Cmd admit;
  admit.kind = ref::Cmd::Kind::Admit;
  admit.slot = 1;
  admit.prompt = 5;
  admit.seed = 18446744073709551615ull;
  ref::Cmd step;
  step.kind = ref::Cmd::Kind::Step;
  step.rows.push_back(ref::RowSpec{0, 3, 2, 0, 42});
  step.pad_at = {0, 1};
  c.commands = {admit, step};
  c.reason = "r";
  return c;
}

// The sample's file with one metadata value changed by `edit` (JSON values are edited as JSON).
SafetensorsFile edited(const std::string& key, const std::function<void(nlohmann::json&)>& edit) {
  SafetensorsFile f = fuzz::fuzz_case_file(sample());
  nlohmann::json j = nlohmann::json::parse(f.metadata.at(key));
  edit(j);
  f.metadata[key] = j.dump();
  return f;
}
std::string parse_field(const SafetensorsFile& f) {
  return field_of([&] { fuzz::parse_fuzz_case(f); });
}
}  // namespace

TEST(FuzzCase, RoundTrip) {
  const fuzz::FuzzCase c = fuzz::parse_fuzz_case(fuzz::fuzz_case_file(sample()));
  EXPECT_EQ(c.setup.to_json(), sample().setup.to_json());
  ASSERT_EQ(c.commands.size(), 2u);
  EXPECT_EQ(c.commands[0].seed, 18446744073709551615ull);
  EXPECT_EQ(c.commands[1].to_json(), sample().commands[1].to_json());
  EXPECT_EQ(c.setup.params.size(), 2u);
}

// A case drawn with realistic gates draws its inputs from those ranges too: its dump must carry `gates` and
// replay with it (the reader refused the key, so no realistic-gate failure could be replayed or exported).
TEST(FuzzCase, RealisticGatesRoundTrip) {
  fuzz::FuzzCase c = sample();
  c.setup = ref::make_setup(preset("tiny-gdn"), 7, 3, 3, ref::GateRange::Realistic);
  const fuzz::FuzzCase back = fuzz::parse_fuzz_case(fuzz::fuzz_case_file(c));
  EXPECT_EQ(back.setup.gates, ref::GateRange::Realistic);
  EXPECT_EQ(back.setup.to_json(), c.setup.to_json());
  EXPECT_EQ(fuzz::parse_fuzz_case(fuzz::fuzz_case_file(sample())).setup.gates, ref::GateRange::Benign);
  SafetensorsFile bad = fuzz::fuzz_case_file(c);
  nlohmann::json j = nlohmann::json::parse(bad.metadata.at("setup"));
  j["gates"] = "extreme";
  bad.metadata["setup"] = j.dump();
  EXPECT_EQ(parse_field(bad), "__metadata__.setup.gates");
}

TEST(FuzzCase, SeedsAreFullMatchDecimal) {
  // std::stoull read "-1" as 2^64 - 1, " 12" and "12abc" as 12.
  for (const char* bad : {"-1", " 12", "12abc", "", "012", "18446744073709551616"}) {
    EXPECT_EQ(parse_field(edited("commands", [&](nlohmann::json& j) { j[0]["seed"] = bad; })),
              "__metadata__.commands[0].seed")
        << bad;
    EXPECT_EQ(parse_field(edited("commands", [&](nlohmann::json& j) { j[1]["rows"][0]["seed"] = bad; })),
              "__metadata__.commands[1].rows[0].seed")
        << bad;
  }
}

TEST(FuzzCase, NumbersAreIntegersInRange) {
  // get<int32_t>() read 3.7 as 3 and 2^32 + 1 as 1.
  EXPECT_EQ(parse_field(edited("commands", [](nlohmann::json& j) { j[0]["slot"] = 1.5; })),
            "__metadata__.commands[0].slot");
  EXPECT_EQ(parse_field(edited("commands", [](nlohmann::json& j) { j[0]["req"] = 4294967297ll; })),
            "__metadata__.commands[0].req");
  EXPECT_EQ(parse_field(edited("commands", [](nlohmann::json& j) { j[1]["rows"][0]["T"] = "3"; })),
            "__metadata__.commands[1].rows[0].T");
  EXPECT_EQ(parse_field(edited("setup", [](nlohmann::json& j) { j["num_slots"] = 3.0; })),
            "__metadata__.setup.num_slots");
  // Zero is below the range [1, 4096] (a zero here divided by zero in the pool cap: fuzz_replay_case).
  EXPECT_EQ(parse_field(edited("setup", [](nlohmann::json& j) { j["num_slots"] = 0; })),
            "__metadata__.setup.num_slots");
  EXPECT_EQ(parse_field(edited("setup", [](nlohmann::json& j) { j["max_T"] = 0; })), "__metadata__.setup.max_T");
}

TEST(FuzzCase, UnknownAndMissingKeysAreRefused) {
  EXPECT_EQ(parse_field(edited("commands", [](nlohmann::json& j) { j[0]["extra"] = 1; })),
            "__metadata__.commands[0].extra");
  EXPECT_EQ(parse_field(edited("commands", [](nlohmann::json& j) { j[1]["rows"][0].erase("accepted"); })),
            "__metadata__.commands[1].rows[0].accepted");
  EXPECT_EQ(parse_field(edited("setup", [](nlohmann::json& j) { j["surprise"] = true; })),
            "__metadata__.setup.surprise");
  EXPECT_EQ(parse_field(edited("setup", [](nlohmann::json& j) { j.erase("page_tokens"); })),
            "__metadata__.setup.page_tokens");
  SafetensorsFile f = fuzz::fuzz_case_file(sample());
  f.metadata["note"] = "x";
  EXPECT_EQ(parse_field(f), "__metadata__.note");
  f = fuzz::fuzz_case_file(sample());
  f.tensors["param.A_log.2"] = f.tensors.at("param.A_log.0");  // tiny-gdn has 2 layers
  EXPECT_EQ(parse_field(f), "tensor 'param.A_log.2'");
  f = fuzz::fuzz_case_file(sample());
  f.tensors.erase("param.dt_bias.1");
  EXPECT_EQ(parse_field(f), "tensor 'param.dt_bias.1'");
}

TEST(FuzzCase, SchemaVersionAndDuplicateKeysAreChecked) {
  SafetensorsFile f = fuzz::fuzz_case_file(sample());
  f.metadata["schema_version"] = "2";
  EXPECT_EQ(parse_field(f), "__metadata__.schema_version");
  f = fuzz::fuzz_case_file(sample());
  f.metadata.erase("schema_version");
  EXPECT_EQ(parse_field(f), "__metadata__.schema_version");
  f = fuzz::fuzz_case_file(sample());
  f.metadata["setup"].insert(1, R"("max_T": 64, )");  // nlohmann alone keeps the last "max_T"
  EXPECT_EQ(parse_field(f), "__metadata__.setup");
  f = fuzz::fuzz_case_file(sample());
  f.metadata["commands"] = "[{";  // nlohmann::json::parse_error escaped the reader before
  EXPECT_EQ(parse_field(f), "__metadata__.commands");
}

TEST(FuzzCase, SizesAreCappedBeforeAnythingRuns) {
  // Each of these made a replay allocate without bound (num_slots pools, a prompt's tokens, a window).
  EXPECT_EQ(parse_field(edited("setup", [](nlohmann::json& j) { j["num_slots"] = 2147483647; })),
            "__metadata__.setup.num_slots");
  EXPECT_EQ(parse_field(edited("setup", [](nlohmann::json& j) { j["slot_stride"] = 1ll << 40; })),
            "__metadata__.setup");
  EXPECT_EQ(parse_field(edited("setup", [](nlohmann::json& j) { j["config"]["num_layers"] = 1 << 30; })),
            "__metadata__.setup");
  EXPECT_EQ(parse_field(edited("commands", [](nlohmann::json& j) { j[0]["prompt"] = 2000000000; })),
            "__metadata__.commands[0].prompt");
  EXPECT_EQ(parse_field(edited("commands", [](nlohmann::json& j) { j[1]["rows"][0]["T"] = 1000000; })),
            "__metadata__.commands[1].rows[0].T");
  EXPECT_EQ(parse_field(edited("commands", [](nlohmann::json& j) { j[1]["pad_at"] = std::vector<int>(9, 0); })),
            "__metadata__.commands[1].pad_at");
  EXPECT_EQ(parse_field(edited("commands", [](nlohmann::json& j) { j[1]["pad_at"] = {2}; })),
            "__metadata__.commands[1].pad_at[0]");
  EXPECT_EQ(parse_field(edited("setup", [](nlohmann::json& j) { j["config"]["HV"] = 3; })),
            "__metadata__.setup.config.HV");
}
