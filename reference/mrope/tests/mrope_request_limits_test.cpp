// Hostile MRoPE requests (found lax while fuzzing, docs/fuzzing.md): duplicate keys, unbounded speculative
// windows and schedules are refused with the field named, before anything is allocated.
#include <gtest/gtest.h>

#include <functional>

#include "replayssm/error.hpp"
#include "replayssm/mrope/mrope_json.hpp"
#include "replayssm/testing/field_of.hpp"

using namespace replayssm;
using namespace replayssm::mrope;

namespace {
using replayssm::testing::field_of;
std::string report_field(const std::string& text) {
  return field_of([&] { positions_report(get_preset("qwen3.5"), parse_request_text(text)); });
}
const char* kPrompt = R"("segments": [{"type": "text", "length": 4}])";
}  // namespace

TEST(MropeRequestLimits, DuplicateKeysAreRefused) {
  // nlohmann alone keeps the last "length": the request below read as 9 tokens.
  EXPECT_EQ(report_field(R"({"segments": [{"type": "text", "length": 4, "length": 9}]})"), "request");
  EXPECT_EQ(report_field(std::string("{") + kPrompt + R"(, "generated": 1, "generated": 2})"), "request");
  EXPECT_EQ(report_field(std::string("{") + kPrompt + R"(})"), "<no error>");
}

TEST(MropeRequestLimits, VerifyWindowAndDraftsAreCapped) {
  const std::string pre = std::string("{") + kPrompt + R"(, "steps": [{"prefill": 4}, )";
  EXPECT_EQ(report_field(pre + R"({"verify": 1024, "accepted": 1}]})"), "<no error>");
  EXPECT_EQ(report_field(pre + R"({"verify": 1025, "accepted": 1}]})"), "steps[1].verify");
  // Before the cap these asked for 2^40 positions (std::bad_alloc, or minutes of work).
  EXPECT_EQ(report_field(pre + R"({"verify": 1099511627776, "accepted": 1}]})"), "steps[1].verify");
  EXPECT_EQ(report_field(pre + R"({"draft": 1024}]})"), "<no error>");
  EXPECT_EQ(report_field(pre + R"({"draft": 1099511627776}]})"), "steps[1].draft");
}

TEST(MropeRequestLimits, ScheduleTotalIsCapped) {
  // 2^26 tokens of restarts over a 2^20-token prompt: 65 restarts pass the budget, the 66th does not.
  std::string text = R"({"segments": [{"type": "text", "length": 1048576}], "steps": [{"prefill": 1048576})";
  for (int i = 0; i < 66; ++i) text += R"(, {"restart": 1048576})";
  text += "]}";
  EXPECT_EQ(report_field(text), "steps[64].restart");
}
