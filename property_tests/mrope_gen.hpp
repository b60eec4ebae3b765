// RapidCheck generators for MRoPE requests. Every random choice goes through rc::gen, so a failure replays
// from its RC_PARAMS; timings are built from small integers (never arbitrary floats).
#pragma once

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <string>
#include <vector>

#include "replayssm/mrope/mrope.hpp"

namespace mrope_prop {

using namespace replayssm::mrope;

inline rc::Gen<std::string> genPresetName() { return rc::gen::elementOf(preset_names()); }

// One segment: text runs (possibly empty), images, and videos with timing for every model (one request file
// must be valid for all presets) and, for per-frame models, optional per-frame text.
inline rc::Gen<Segment> genSegment(const Preset& p) {
  return rc::gen::exec([p] {
    const std::int64_t S = p.spatial_merge_size;
    const int kind = *rc::gen::weightedElement<int>({{4, 0}, {3, 1}, {3, 2}});
    if (kind == 0) return Segment::text(*rc::gen::inRange<std::int64_t>(0, 7));
    const std::int64_t H = S * *rc::gen::inRange<std::int64_t>(1, 4);
    const std::int64_t W = S * *rc::gen::inRange<std::int64_t>(1, 4);
    if (kind == 1) {
      // Processors always produce T = 1 for images; T = 2 exercises the temporal rule of images.
      return Segment::image(*rc::gen::weightedElement<std::int64_t>({{5, 1}, {1, 2}}), H, W);
    }
    const std::int64_t T = *rc::gen::inRange<std::int64_t>(1, 4);
    Segment v = Segment::video(T, H, W);
    if (*rc::gen::arbitrary<bool>()) {
      v.fps = static_cast<double>(*rc::gen::elementOf(std::vector<int>{1, 2, 3, 4, 5, 8, 10, 24, 30}));
    } else {
      v.second_per_grid = static_cast<double>(*rc::gen::inRange(0, 13)) / 4.0;  // 0 .. 3 s in 0.25 s steps
    }
    if (p.video_rule == VideoRule::PerFrame && *rc::gen::arbitrary<bool>()) {
      for (std::int64_t f = 0; f < T; ++f) v.frame_text.push_back(*rc::gen::inRange<std::int64_t>(0, 4));
    }
    return v;
  });
}

inline std::int64_t count_tokens(const Preset& p, const std::vector<Segment>& segs) {
  return PromptPlan(p, Request{segs}).prompt_len();
}

// A list of segments with at least `min_tokens` tokens.
inline rc::Gen<std::vector<Segment>> genSegments(const Preset& p, std::int64_t min_tokens, int max_segments) {
  return rc::gen::exec([p, min_tokens, max_segments] {
    const int n = *rc::gen::inRange(1, max_segments + 1);
    std::vector<Segment> segs;
    for (int i = 0; i < n; ++i) segs.push_back(*genSegment(p));
    const std::int64_t have = count_tokens(p, segs);
    if (have < min_tokens) segs.push_back(Segment::text(min_tokens - have));
    return segs;
  });
}

// Text-only segment lists (some runs may be empty).
inline rc::Gen<std::vector<Segment>> genTextOnly() {
  return rc::gen::exec([] {
    const int n = *rc::gen::inRange(1, 5);
    std::vector<Segment> segs;
    for (int i = 0; i < n; ++i) segs.push_back(Segment::text(*rc::gen::inRange<std::int64_t>(0, 20)));
    return segs;
  });
}

}  // namespace mrope_prop
