// The incremental engine model on hand-written schedules.
#include <gtest/gtest.h>

#include "mrope_test_util.hpp"

using namespace replayssm::mrope;
using mrope_test::concat;
using mrope_test::diag;
using mrope_test::rows;

namespace {

// text 3 + image (1,4,4) + text 2: prompt_len 9, delta -2 (see mrope_positions_test).
Request text_image_text() { return Request{{Segment::text(3), Segment::image(1, 4, 4), Segment::text(2)}}; }

TEST(MropeTracker, ChunksSplittingAnImage) {
  PositionTracker tr(get_preset("qwen2-vl"), text_image_text());
  const Window a = tr.prefill(4);  // text 3 + first image token
  const Window b = tr.prefill(2);  // image tokens 1, 2
  const Window c = tr.prefill(3);  // last image token + text 2
  EXPECT_EQ(a.begin, 0);
  EXPECT_EQ(b.begin, 4);
  EXPECT_EQ(c.begin, 6);
  EXPECT_EQ(a.pos, concat(diag(0, 3), rows({3}, {3}, {3})));
  EXPECT_EQ(b.pos, rows({3, 3}, {3, 4}, {4, 3}));
  EXPECT_EQ(c.pos, concat(rows({3}, {4}, {4}), diag(5, 2)));
  EXPECT_EQ(tr.num_computed(), 9);
  EXPECT_EQ(tr.seq_len(), 10);  // the first generated token was sampled
  EXPECT_EQ(tr.history(), PromptPlan(tr.preset(), tr.request()).table());
}

TEST(MropeTracker, SpecStepsDraftsStopAndContinuation) {
  PositionTracker tr(get_preset("qwen3.5"), text_image_text());
  tr.prefill(9);
  // Verify T = 4 at index 9 (positions 7..10); 2 accepted -> 11 computed, bonus token at 11.
  const Window v = tr.verify(4, 2);
  EXPECT_EQ(v.begin, 9);
  EXPECT_EQ(v.pos, diag(7, 4));
  EXPECT_EQ(tr.num_computed(), 11);
  EXPECT_EQ(tr.seq_len(), 12);
  // Draft steps j = 1..3 work on indices 11, 12, 13: last accepted position (8) + j.
  const Window d = tr.draft(3);
  EXPECT_EQ(d.begin, 11);
  EXPECT_EQ(d.pos, diag(9, 3));
  // The next window starts 2 later than the previous one; rejected drafts left nothing behind.
  EXPECT_EQ(tr.verify(4, 4).pos, diag(9, 4));
  EXPECT_EQ(tr.num_computed(), 15);
  EXPECT_EQ(tr.seq_len(), 16);
  // Early stop at index 11 (an accepted token): 12 tokens kept, computed tokens 12..14 discarded.
  tr.stop(12);
  EXPECT_TRUE(tr.finished());
  EXPECT_EQ(tr.num_computed(), 12);
  EXPECT_EQ(tr.seq_len(), 12);
  EXPECT_EQ(tr.history(), concat(PromptPlan(tr.preset(), tr.request()).table(), diag(7, 3)));
  // Turn 2: an image and one text token after the 12 committed tokens. Generated indices 9..11 sit at 7..9;
  // the image starts at cur = 10: (10,10,10) (10,10,11) (10,11,10) (10,11,11), span 2 -> text at 12.
  tr.continue_turn({Segment::image(1, 4, 4), Segment::text(1)});
  EXPECT_EQ(tr.prompt_len(), 17);
  EXPECT_EQ(PromptPlan(tr.preset(), tr.request()).delta(), 12 + 1 - 17);
  const Window p = tr.prefill(5);
  EXPECT_EQ(p.begin, 12);
  EXPECT_EQ(p.pos, concat(rows({10, 10, 10, 10}, {10, 10, 11, 11}, {10, 11, 10, 11}), diag(12, 1)));
  EXPECT_EQ(tr.verify(2, 1).pos, diag(13, 2));  // index 17 + delta (-4)
}

TEST(MropeTracker, PreemptionReplaysPromptAndGeneratedTokens) {
  PositionTracker tr(get_preset("qwen2-vl"), text_image_text());
  tr.prefill(9);
  tr.verify(3, 3);  // computed 12, seq_len 13
  const auto before = tr.history();
  tr.restart_from(0);
  EXPECT_EQ(tr.num_computed(), 0);
  EXPECT_TRUE(tr.history().empty());
  // Re-prefill covers the prompt and the generated tokens (indices 9..11 -> 7..9), then the pending token.
  const Window w = tr.prefill(12);
  EXPECT_EQ(w.pos, before);
  EXPECT_EQ(tr.seq_len(), 13);
  EXPECT_EQ(tr.verify(1, 1).pos, diag(10, 1));
  // A prefix-cache restart inside the image replays up to that step only.
  tr.restart_from(5);
  EXPECT_EQ(tr.history(), std::vector<Pos3>(before.begin(), before.begin() + 5));
  EXPECT_EQ(tr.prefill(2).pos, rows({3, 3}, {4, 4}, {3, 4}));
}

TEST(MropeTracker, ErrorsNameTheField) {
  PositionTracker tr(get_preset("qwen3-vl"), text_image_text());
  EXPECT_ERROR_FIELD(tr.prefill(0), "count");
  EXPECT_ERROR_FIELD(tr.prefill(10), "count");
  EXPECT_ERROR_FIELD(tr.verify(2, 1), "state");  // prompt not computed
  EXPECT_ERROR_FIELD(tr.draft(1), "state");
  tr.prefill(9);
  EXPECT_ERROR_FIELD(tr.verify(3, 4), "accepted");
  EXPECT_ERROR_FIELD(tr.verify(3, 0), "accepted");
  EXPECT_ERROR_FIELD(tr.verify(0, 0), "T");
  EXPECT_ERROR_FIELD(tr.draft(-1), "steps");
  EXPECT_ERROR_FIELD(tr.stop(9), "keep");
  EXPECT_ERROR_FIELD(tr.stop(11), "keep");
  EXPECT_ERROR_FIELD(tr.restart_from(10), "step");
  EXPECT_ERROR_FIELD(tr.continue_turn({Segment::text(1)}), "state");
  tr.stop(10);
  EXPECT_ERROR_FIELD(tr.prefill(1), "state");
  EXPECT_ERROR_FIELD(tr.restart_from(0), "state");
  EXPECT_ERROR_FIELD(tr.continue_turn({Segment::text(0)}), "turn");
  EXPECT_ERROR_FIELD(tr.continue_turn({Segment::text(1), Segment::image(1, 3, 4)}, "steps[4].turn"),
                     "steps[4].turn[1].grid");
  EXPECT_ERROR_FIELD(PositionTracker(get_preset("qwen3-vl"), Request{}), "segments");
}

}  // namespace
