// Hand-computed MRoPE prompt positions, deltas, windows and batches.
#include <gtest/gtest.h>

#include "mrope_test_util.hpp"

using namespace replayssm::mrope;
using mrope_test::concat;
using mrope_test::diag;
using mrope_test::rows;

namespace {

Request text_image_text() {
  return Request{{Segment::text(3), Segment::image(1, 4, 4), Segment::text(2)}};
}

TEST(MropePositions, TextImageTextByHand) {
  // text 3: 0,1,2. Image grid (1,4,4), S = 2 -> 2x2 placeholders at cur = 3:
  // (3,3,3) (3,3,4) (3,4,3) (3,4,4); span = max(1,2,2) = 2 -> cur = 5. Text 2: 5, 6.
  const PromptPlan plan(get_preset("qwen2-vl"), text_image_text());
  const auto want = rows({0, 1, 2, 3, 3, 3, 3, 5, 6},  //
                         {0, 1, 2, 3, 3, 4, 4, 5, 6},  //
                         {0, 1, 2, 3, 4, 3, 4, 5, 6});
  EXPECT_EQ(plan.table(), want);
  EXPECT_EQ(plan.prompt_len(), 9);
  EXPECT_EQ(plan.delta(), -2);  // max 6 + 1 - 9
  EXPECT_EQ(plan.position(9), (Pos3{7, 7, 7}));
  EXPECT_EQ(plan.position(20), (Pos3{18, 18, 18}));
}

TEST(MropePositions, SingleFrameImagesAgreeAcrossPresets) {
  const PromptPlan ref(get_preset("qwen2-vl"), text_image_text());
  for (const auto& name : preset_names()) {
    const PromptPlan plan(get_preset(name), text_image_text());
    EXPECT_EQ(plan.table(), ref.table()) << name;
    EXPECT_EQ(plan.delta(), -2) << name;
  }
}

TEST(MropePositions, NonSquareImage) {
  // Grid (1,2,6) -> h = 1, w = 3 at cur = 1: (1,1,1) (1,1,2) (1,1,3); span 3 -> text at 4.
  const PromptPlan plan(get_preset("qwen3.5"), Request{{Segment::text(1), Segment::image(1, 2, 6), Segment::text(1)}});
  EXPECT_EQ(plan.table(), rows({0, 1, 1, 1, 4}, {0, 1, 1, 1, 4}, {0, 1, 2, 3, 4}));
  EXPECT_EQ(plan.delta(), 0);  // 4 + 1 - 5
}

TEST(MropePositions, Qwen2VlVideoUsesFrameGroupIndex) {
  // Video (2,4,4) at cur = 1: t = 1 + tt, h/w = 1 + {0,1}; span = max(2,2,2) = 2 -> text at 3.
  const PromptPlan plan(get_preset("qwen2-vl"),
                        Request{{Segment::text(1), Segment::video(2, 4, 4, 1.0), Segment::text(1)}});
  EXPECT_EQ(plan.table(), rows({0, 1, 1, 1, 1, 2, 2, 2, 2, 3},  //
                               {0, 1, 1, 2, 2, 1, 1, 2, 2, 3},  //
                               {0, 1, 2, 1, 2, 1, 2, 1, 2, 3}));
  EXPECT_EQ(plan.delta(), -6);  // 3 + 1 - 10
}

TEST(MropePositions, Qwen25VlVideoScaledTime) {
  // second_per_grid 1.0, tokens_per_second 2: temporal offsets 0, 2, 4; span = max(4,1,1) + 1 = 5.
  const PromptPlan plan(get_preset("qwen2.5-vl"),
                        Request{{Segment::text(1), Segment::video(3, 4, 4, 1.0), Segment::text(1)}});
  EXPECT_EQ(plan.table(), rows({0, 1, 1, 1, 1, 3, 3, 3, 3, 5, 5, 5, 5, 6},  //
                               {0, 1, 1, 2, 2, 1, 1, 2, 2, 1, 1, 2, 2, 6},  //
                               {0, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 6}));
  EXPECT_EQ(plan.delta(), -7);  // 6 + 1 - 14
  // fps 2 with temporal_patch_size 2 is the same second_per_grid.
  Segment v = Segment::video(3, 4, 4);
  v.fps = 2.0;
  const PromptPlan by_fps(get_preset("qwen2.5-vl"), Request{{Segment::text(1), v, Segment::text(1)}});
  EXPECT_EQ(by_fps.table(), plan.table());
}

TEST(MropePositions, Qwen25VlWorkedExampleWith25TokensPerSecond) {
  // tokens_per_second 25, fps 1 (second_per_grid 2): temporal ids 0 x4, 50 x4, 100 x4; next text at 101.
  Preset p = get_preset("qwen2.5-vl");
  p.tokens_per_second = 25.0;
  Segment v = Segment::video(3, 4, 4);
  v.fps = 1.0;
  const PromptPlan plan(p, Request{{v, Segment::text(1)}});
  std::vector<std::int64_t> t;
  for (std::int64_t g : {0, 50, 100}) t.insert(t.end(), 4, g);
  t.push_back(101);
  ASSERT_EQ(plan.prompt_len(), 13);
  for (std::size_t i = 0; i < t.size(); ++i) EXPECT_EQ(plan.table()[i][0], t[i]) << i;
  EXPECT_EQ(plan.delta(), 101 + 1 - 13);
}

TEST(MropePositions, Qwen25VlTruncatesOnlyAfterTheMultiply) {
  // 0.5 s per grid step at 2 tokens/s: offsets trunc(tt * 0.5 * 2) = 0, 1, 2, 3 (truncating the step first
  // would give 0 for every group). 0.25 s: trunc(tt * 0.5) = 0, 0, 1, 1.
  for (auto [spg, want] : {std::pair<double, std::vector<std::int64_t>>{0.5, {0, 1, 2, 3}},
                           std::pair<double, std::vector<std::int64_t>>{0.25, {0, 0, 1, 1}}}) {
    const PromptPlan plan(get_preset("qwen2.5-vl"), Request{{Segment::video(4, 2, 2, spg)}});
    ASSERT_EQ(plan.prompt_len(), 4);
    for (std::size_t tt = 0; tt < 4; ++tt) EXPECT_EQ(plan.table()[tt][0], want[tt]) << spg << " " << tt;
    EXPECT_EQ(plan.delta(), std::max<std::int64_t>(want.back(), 0) + 1 - 4);
  }
}

TEST(MropePositions, Qwen25VlTimeIsEvaluatedInBinary32) {
  // At 2.3 fps, second_per_grid = 2 / 2.3 and group 69 lands exactly on 120 in exact arithmetic. The binary32
  // product (the HF torch expression) is just below 120 and truncates to 119; a binary64 evaluation gives
  // 120. The reference follows binary32 (docs/mrope.md, "Where public implementations differ").
  Segment v = Segment::video(70, 2, 2);
  v.fps = 2.3;
  const PromptPlan plan(get_preset("qwen2.5-vl"), Request{{v}});
  EXPECT_EQ(plan.table()[69][0], 119);
  EXPECT_EQ(plan.table()[68][0], 118);
}

TEST(MropePositions, Qwen25VlImagesIgnoreTime) {
  // An image grid with T = 2 (never produced by the processors) keeps a zero temporal offset in the
  // scaled-time rule; Qwen2-VL uses the group index.
  const Request r{{Segment::image(2, 2, 2)}};
  EXPECT_EQ(PromptPlan(get_preset("qwen2.5-vl"), r).table(), rows({0, 0}, {0, 0}, {0, 0}));
  EXPECT_EQ(PromptPlan(get_preset("qwen2-vl"), r).table(), rows({0, 1}, {0, 0}, {0, 0}));
}

TEST(MropePositions, PerFrameVideoWithTimestampText) {
  // text 1 (0); frame text 2 (1, 2); frame 0 at cur 3: (3,3,3) (3,3,4) (3,4,3) (3,4,4), cur += max(2,2) -> 5;
  // frame text 2 (5, 6); frame 1 at cur 7 ... cur 9; text 1 (9). prompt_len 14, delta 9 + 1 - 14 = -4.
  const Request r{{Segment::text(1), Segment::video(2, 4, 4, std::nullopt, {2, 2}), Segment::text(1)}};
  const auto want = rows({0, 1, 2, 3, 3, 3, 3, 5, 6, 7, 7, 7, 7, 9},  //
                         {0, 1, 2, 3, 3, 4, 4, 5, 6, 7, 7, 8, 8, 9},  //
                         {0, 1, 2, 3, 4, 3, 4, 5, 6, 7, 8, 7, 8, 9});
  for (const char* name : {"qwen3-vl", "qwen3.5"}) {
    const PromptPlan plan(get_preset(name), r);
    EXPECT_EQ(plan.table(), want) << name;
    EXPECT_EQ(plan.delta(), -4) << name;
  }
}

TEST(MropePositions, PerFrameVideoWithoutText) {
  // Frames back to back: every frame has t = its own base, and bases advance by max(h, w).
  const PromptPlan plan(get_preset("qwen3.5"),
                        Request{{Segment::text(1), Segment::video(2, 4, 4), Segment::text(1)}});
  EXPECT_EQ(plan.table(), rows({0, 1, 1, 1, 1, 3, 3, 3, 3, 5},  //
                               {0, 1, 1, 2, 2, 3, 3, 4, 4, 5},  //
                               {0, 1, 2, 1, 2, 3, 4, 3, 4, 5}));
  EXPECT_EQ(plan.delta(), -4);
}

TEST(MropePositions, PerFrameSpanIgnoresFrameCount) {
  // Video (3,2,2): one placeholder per frame. Per-frame models advance by max(h, w) = 1 per frame; Qwen2-VL
  // walks the temporal axis inside one item and advances by max(T, h, w) = 3 after it. Both end at 4 here,
  // but the frames sit differently.
  const Request r{{Segment::text(1), Segment::video(3, 2, 2, 1.0), Segment::text(1)}};
  EXPECT_EQ(PromptPlan(get_preset("qwen3.5"), r).table(), rows({0, 1, 2, 3, 4}, {0, 1, 2, 3, 4}, {0, 1, 2, 3, 4}));
  EXPECT_EQ(PromptPlan(get_preset("qwen2-vl"), r).table(), rows({0, 1, 2, 3, 4}, {0, 1, 1, 1, 4}, {0, 1, 1, 1, 4}));
}

TEST(MropePositions, TextOnlyIsOneDimensional) {
  const PromptPlan plan(get_preset("qwen3.5"), Request{{Segment::text(4), Segment::text(0), Segment::text(3)}});
  EXPECT_EQ(plan.table(), diag(0, 7));
  EXPECT_EQ(plan.delta(), 0);
  EXPECT_EQ(plan.position(100), (Pos3{100, 100, 100}));
}

TEST(MropePositions, EmptyPromptHasZeroDelta) {
  const PromptPlan plan(get_preset("qwen2-vl"), Request{});
  EXPECT_EQ(plan.prompt_len(), 0);
  EXPECT_EQ(plan.delta(), 0);
}

TEST(MropeWindows, VerifyAndDraftUseIndexPlusDelta) {
  const PromptPlan plan(get_preset("qwen2-vl"), text_image_text());  // prompt_len 9, delta -2
  const Window v = verify_window(plan, 10, 3);
  EXPECT_EQ(v.begin, 10);
  EXPECT_EQ(v.slot(2), 12);  // KV slots are absolute indices ...
  EXPECT_EQ(v.pos, diag(8, 3));  // ... positions are index + delta
  // A window that straddles the prompt end reads the table, then index + delta.
  EXPECT_EQ(verify_window(plan, 7, 3).pos, diag(5, 3));
  EXPECT_EQ(verify_window(plan, 5, 3).pos, concat(rows({3, 3}, {4, 4}, {3, 4}), diag(5, 1)));
  // Draft steps after num_computed = 12: index 11 + j.
  EXPECT_EQ(draft_window(plan, 12, 3).pos, diag(10, 3));
  EXPECT_EQ(draft_window(plan, 12, 3).begin, 12);
  EXPECT_ERROR_FIELD(verify_window(plan, 9, 0), "T");
  EXPECT_ERROR_FIELD(verify_window(plan, -1, 2), "num_computed");
  EXPECT_ERROR_FIELD(draft_window(plan, 8, 2), "num_computed");
  EXPECT_ERROR_FIELD(draft_window(plan, 9, -1), "steps");
  EXPECT_ERROR_FIELD(plan.position(-1), "index");
}

TEST(MropeWindows, MixedBatchKeepsOneDeltaPerRequest) {
  const PromptPlan image(get_preset("qwen3.5"), text_image_text());                 // delta -2
  const PromptPlan text(get_preset("qwen3.5"), Request{{Segment::text(5)}});        // delta 0
  const BatchPositions b = batch_positions({{&image, 9, 2}, {&text, 5, 1}, {&image, 0, 1}});
  EXPECT_EQ(b.delta, (std::vector<std::int64_t>{-2, 0, -2}));
  EXPECT_EQ(b.pos, concat(concat(diag(7, 2), diag(5, 1)), diag(0, 1)));
  EXPECT_EQ(b.slot, (std::vector<std::int64_t>{9, 10, 5, 0}));
  EXPECT_EQ(b.request, (std::vector<std::int64_t>{0, 0, 1, 2}));
  EXPECT_ERROR_FIELD(batch_positions({{&text, 0, 1}, {nullptr, 0, 1}}), "batch[1].plan");
  EXPECT_ERROR_FIELD(batch_positions({{&text, -1, 1}}), "batch[0].begin");
}

TEST(MropeValidation, ErrorsNameTheField) {
  const Preset q2 = get_preset("qwen2-vl"), q25 = get_preset("qwen2.5-vl"), q35 = get_preset("qwen3.5");
  EXPECT_ERROR_FIELD(validate(q2, Request{{Segment::text(-1)}}), "segments[0].length");
  EXPECT_ERROR_FIELD(validate(q2, Request{{Segment::text(1), Segment::image(1, 5, 4)}}), "segments[1].grid");
  EXPECT_ERROR_FIELD(validate(q2, Request{{Segment::image(1, 4, 3)}}), "segments[0].grid");
  EXPECT_ERROR_FIELD(validate(q2, Request{{Segment::image(0, 4, 4)}}), "segments[0].grid");
  EXPECT_ERROR_FIELD(validate(q2, Request{{Segment::video(2, 4, 4, 1.0, {1, 1})}}), "segments[0].frame_text");
  EXPECT_ERROR_FIELD(validate(q35, Request{{Segment::video(2, 4, 4, std::nullopt, {1})}}), "segments[0].frame_text");
  EXPECT_ERROR_FIELD(validate(q35, Request{{Segment::video(2, 4, 4, std::nullopt, {1, -1})}}),
                     "segments[0].frame_text[1]");
  EXPECT_ERROR_FIELD(validate(q25, Request{{Segment::video(2, 4, 4)}}), "segments[0].second_per_grid");
  EXPECT_ERROR_FIELD(validate(q25, Request{{Segment::video(2, 4, 4, -0.5)}}), "segments[0].second_per_grid");
  Segment both = Segment::video(2, 4, 4, 1.0);
  both.fps = 2.0;
  EXPECT_ERROR_FIELD(validate(q25, Request{{both}}), "segments[0].fps");
  Segment zero_fps = Segment::video(2, 4, 4);
  zero_fps.fps = 0.0;
  EXPECT_ERROR_FIELD(validate(q2, Request{{zero_fps}}), "segments[0].fps");
  EXPECT_ERROR_FIELD(validate(q2, Request{{Segment::text(kMaxTokens), Segment::text(1)}}), "segments[1].length");
  EXPECT_ERROR_FIELD(get_preset("qwen9-vl"), "model");
  Preset bad = q35;
  bad.section = {11, 11, 11};
  EXPECT_ERROR_FIELD(bad.validate(), "preset.section");
  // Videos without timing are fine where timing is not used.
  EXPECT_NO_THROW(validate(q2, Request{{Segment::video(2, 4, 4)}}));
  EXPECT_NO_THROW(validate(q35, Request{{Segment::video(2, 4, 4)}}));
}

TEST(MropePresets, RealConfigValues) {
  const Preset q35 = get_preset("qwen3.5");
  EXPECT_EQ(q35.head_dim, 256);
  EXPECT_EQ(q35.rotary_dim(), 64);
  EXPECT_EQ(q35.theta, 1e7);
  EXPECT_EQ(q35.layout, Layout::Interleaved);
  EXPECT_EQ(get_preset("qwen3-vl").theta, 5e6);
  EXPECT_EQ(get_preset("qwen3-vl").rotary_dim(), 128);
  EXPECT_EQ(get_preset("qwen2.5-vl").tokens_per_second, 2.0);
  EXPECT_EQ(get_preset("qwen2-vl").section, (std::array<int, 3>{16, 24, 24}));
  for (const auto& n : preset_names()) EXPECT_EQ(get_preset(n).spatial_merge_size, 2) << n;
}

}  // namespace
