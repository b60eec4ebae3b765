// JSON requests, the positions report, the documented examples and the fixtures.
#include <gtest/gtest.h>

#include "mrope_test_util.hpp"
#include "replayssm/mrope/mrope_fixture.hpp"
#include "replayssm/mrope/mrope_json.hpp"

using namespace replayssm::mrope;

namespace {

nlohmann::ordered_json report(const std::string& model, const std::string& text) {
  return positions_report(get_preset(model), nlohmann::json::parse(text));
}

TEST(MropeJson, ReportForTextImageText) {
  const auto r = report("qwen2-vl", R"({"segments": [{"type": "text", "length": 3},
      {"type": "image", "grid": [1, 4, 4]}, {"type": "text", "length": 2}], "generated": 1})");
  EXPECT_EQ(r["prompt_len"], 9);
  EXPECT_EQ(r["delta"], -2);
  EXPECT_EQ(r["positions"][0].dump(), "[0,1,2,3,3,3,3,5,6,7]");
  EXPECT_EQ(r["positions"][1].dump(), "[0,1,2,3,3,4,4,5,6,7]");
  EXPECT_EQ(r["positions"][2].dump(), "[0,1,2,3,4,3,4,5,6,7]");
  EXPECT_EQ(r["frequency_axes"].get<std::string>().size(), 64u);
  EXPECT_FALSE(r.contains("steps"));
}

TEST(MropeJson, StepsRunTheEngineModel) {
  const auto r = report("qwen3.5", R"({"segments": [{"type": "text", "length": 3},
      {"type": "image", "grid": [1, 4, 4]}, {"type": "text", "length": 2}],
      "steps": [{"prefill": 5}, {"prefill": 4}, {"verify": 3, "accepted": 2}, {"draft": 2}, {"stop": 11},
                {"turn": [{"type": "text", "length": 2}]}, {"prefill": 2}]})");
  const auto& s = r["steps"];
  ASSERT_EQ(s.size(), 7u);
  EXPECT_EQ(s[1]["begin"], 5);
  EXPECT_EQ(s[2]["positions"][0].dump(), "[7,8,9]");
  EXPECT_EQ(s[2]["num_computed"], 11);
  EXPECT_EQ(s[3]["begin"], 11);
  EXPECT_EQ(s[3]["positions"][2].dump(), "[9,10]");
  EXPECT_EQ(s[4]["seq_len"], 11);
  EXPECT_EQ(s[5]["prompt_len"], 13);
  EXPECT_EQ(s[5]["delta"], -2);
  EXPECT_EQ(s[6]["begin"], 11);
  EXPECT_EQ(s[6]["positions"][1].dump(), "[9,10]");
}

TEST(MropeJson, BadRequestsNameTheField) {
  const auto bad = [](const std::string& text) { return report("qwen2.5-vl", text); };
  EXPECT_ERROR_FIELD(bad(R"({"segment": []})"), "request.segment");
  EXPECT_ERROR_FIELD(bad(R"({})"), "segments");
  EXPECT_ERROR_FIELD(bad(R"([1, 2])"), "request");
  EXPECT_ERROR_FIELD(bad(R"({"segments": {}})"), "segments");
  EXPECT_ERROR_FIELD(bad(R"({"segments": [{"length": 3}]})"), "segments[0].type");
  EXPECT_ERROR_FIELD(bad(R"({"segments": [{"type": "audio"}]})"), "segments[0].type");
  EXPECT_ERROR_FIELD(bad(R"({"segments": [{"type": "text", "lenght": 3}]})"), "segments[0].lenght");
  EXPECT_ERROR_FIELD(bad(R"({"segments": [{"type": "text", "length": 2.5}]})"), "segments[0].length");
  EXPECT_ERROR_FIELD(bad(R"({"segments": [{"type": "text", "length": -4}]})"), "segments[0].length");
  EXPECT_ERROR_FIELD(bad(R"({"segments": [{"type": "image", "grid": [1, 4]}]})"), "segments[0].grid");
  EXPECT_ERROR_FIELD(bad(R"({"segments": [{"type": "image", "grid": [1, "4", 4]}]})"), "segments[0].grid[1]");
  EXPECT_ERROR_FIELD(bad(R"({"segments": [{"type": "image", "grid": [1, 6, 5]}]})"), "segments[0].grid");
  EXPECT_ERROR_FIELD(bad(R"({"segments": [{"type": "image", "grid": [1, 4, 4], "fps": 2}]})"), "segments[0].fps");
  EXPECT_ERROR_FIELD(bad(R"({"segments": [{"type": "video", "grid": [2, 4, 4]}]})"), "segments[0].second_per_grid");
  EXPECT_ERROR_FIELD(bad(R"({"segments": [{"type": "video", "grid": [2, 4, 4], "fps": "2"}]})"), "segments[0].fps");
  EXPECT_ERROR_FIELD(bad(R"({"segments": [{"type": "video", "grid": [2, 4, 4], "fps": 2, "frame_text": [1, 1]}]})"),
                     "segments[0].frame_text");
  EXPECT_ERROR_FIELD(bad(R"({"segments": [], "generated": -1})"), "generated");
  const std::string ok_seg = R"("segments": [{"type": "text", "length": 4}])";
  EXPECT_ERROR_FIELD(bad("{" + ok_seg + R"(, "steps": [{"prefill": 5}]})"), "steps[0].prefill");
  EXPECT_ERROR_FIELD(bad("{" + ok_seg + R"(, "steps": [{"prefill": 4}, {"verify": 2, "accepted": 3}]})"),
                     "steps[1].accepted");
  EXPECT_ERROR_FIELD(bad("{" + ok_seg + R"(, "steps": [{"prefill": 4}, {"verify": 2}]})"), "steps[1].accepted");
  EXPECT_ERROR_FIELD(bad("{" + ok_seg + R"(, "steps": [{"verify": 2, "accepted": 1}]})"), "steps[0]");
  EXPECT_ERROR_FIELD(bad("{" + ok_seg + R"(, "steps": [{"prefill": 4, "draft": 1}]})"), "steps[0]");
  EXPECT_ERROR_FIELD(bad("{" + ok_seg + R"(, "steps": [{"jump": 4}]})"), "steps[0]");
  EXPECT_ERROR_FIELD(bad("{" + ok_seg + R"(, "steps": [{"prefill": 4}, {"stop": 4}]})"), "steps[1].stop");
  EXPECT_ERROR_FIELD(bad("{" + ok_seg + R"(, "steps": [{"prefill": 4}, {"stop": 5},
      {"turn": [{"type": "video", "grid": [1, 4, 4]}]}]})"), "steps[2].turn[0].second_per_grid");
  EXPECT_ERROR_FIELD(positions_report_text("qwen3.5", "/nonexistent/request.json"), "request");
  EXPECT_ERROR_FIELD(positions_report_text("gpt-2", "/nonexistent/request.json"), "model");
}

TEST(MropeJson, RequestRoundTrip) {
  Segment v = Segment::video(2, 4, 4, 0.5);
  v.frame_text = {};
  const Request r{{Segment::text(2), Segment::image(1, 2, 2), v}};
  const auto j = request_to_json(r);
  const auto back = segments_from_json(nlohmann::json::parse(j.dump())["segments"], "segments");
  ASSERT_EQ(back.size(), 3u);
  EXPECT_EQ(back[0].length, 2);
  EXPECT_EQ(back[1].grid, (std::array<std::int64_t, 3>{1, 2, 2}));
  EXPECT_EQ(back[2].second_per_grid, 0.5);
}

TEST(MropeFixture, ShapesValuesAndDeterminism) {
  for (const auto& name : preset_names()) {
    const MropeFixture fx = mrope_fixture(name, 11);
    const auto& t = fx.tensors;
    const std::int64_t N = t.at("in.q").shape[0];
    const std::int64_t D = get_preset(name).head_dim;
    t.at("in.q").expect(replayssm::DType::F32, {N, 2, D}, "in.q");
    t.at("in.k").expect(replayssm::DType::F32, {N, 1, D}, "in.k");
    t.at("out.q_rot").expect(replayssm::DType::F32, {N, 2, D}, "out.q_rot");
    t.at("out.positions").expect(replayssm::DType::I64, {3, N}, "out.positions");
    t.at("out.delta").expect(replayssm::DType::I64, {}, "out.delta");
    // Positions agree with a plan rebuilt from the stored request.
    const auto doc = nlohmann::json::parse(fx.request_json);
    const Request req{segments_from_json(doc.at("segments"), "segments")};
    const PromptPlan plan(get_preset(name), req);
    const auto pos = t.at("out.positions").to_i64();
    EXPECT_EQ(t.at("out.prompt_len").to_i64()[0], plan.prompt_len());
    EXPECT_EQ(N, plan.prompt_len() + doc.at("generated").get<std::int64_t>());
    EXPECT_EQ(t.at("out.delta").to_i64()[0], plan.delta());
    for (std::int64_t n = 0; n < N; ++n) {
      for (int a = 0; a < 3; ++a) {
        ASSERT_EQ(pos[static_cast<std::size_t>(a * N + n)], plan.position(n)[static_cast<std::size_t>(a)]);
      }
    }
    EXPECT_EQ(fx.tolerance.at("out.positions").kind, replayssm::Tolerance::Kind::Exact);
    EXPECT_EQ(fx.tolerance.at("out.q_rot").kind, replayssm::Tolerance::Kind::AllClose);
    // Same seed, same bytes; another seed, other inputs.
    const auto again = mrope_fixture_tensors(name, 11);
    for (const auto& [k, v] : t) EXPECT_EQ(again.at(k).data, v.data) << name << " " << k;
    EXPECT_NE(mrope_fixture_tensors(name, 12).at("in.q").data, t.at("in.q").data);
  }
  EXPECT_ERROR_FIELD(mrope_fixture("nope", 1), "model");
}

}  // namespace
