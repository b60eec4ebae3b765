// MRoPE presets, request validation, the from-scratch position walk, windows and mixed batches.
#include "replayssm/mrope/mrope.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "replayssm/error.hpp"

namespace replayssm::mrope {

std::string to_string(Layout l) { return l == Layout::Chunked ? "chunked" : "interleaved"; }

std::string to_string(VideoRule r) {
  switch (r) {
    case VideoRule::FrameIndex: return "frame-index";
    case VideoRule::ScaledTime: return "scaled-time";
    case VideoRule::PerFrame: return "per-frame";
  }
  return "?";
}

std::string to_string(SegmentKind k) {
  switch (k) {
    case SegmentKind::Text: return "text";
    case SegmentKind::Image: return "image";
    case SegmentKind::Video: return "video";
  }
  return "?";
}

// ---------------------------------------------------------------------------------------------------------
// Presets

int Preset::rotary_dim() const {
  return static_cast<int>(static_cast<double>(head_dim) * partial_rotary_factor);
}

void Preset::validate() const {
  require(head_dim >= 2 && head_dim <= 4096, "preset.head_dim", "must be in [2, 4096], got ", head_dim);
  require(std::isfinite(partial_rotary_factor) && partial_rotary_factor > 0.0 && partial_rotary_factor <= 1.0,
          "preset.partial_rotary_factor", "must be in (0, 1], got ", partial_rotary_factor);
  const int R = rotary_dim();
  require(R >= 2 && R % 2 == 0, "preset.partial_rotary_factor", "rotary dim ", R, " must be even and >= 2");
  require(std::isfinite(theta) && theta > 1.0, "preset.theta", "must be finite and > 1, got ", theta);
  for (int a = 0; a < 3; ++a) {
    require(section[a] >= 0, "preset.section", "entries must be >= 0");
  }
  require(section[0] + section[1] + section[2] == R / 2, "preset.section", "must sum to R/2 = ", R / 2, ", got ",
          section[0], "+", section[1], "+", section[2]);
  if (layout == Layout::Interleaved) {
    // The last H frequency is 3*s1 - 2 and the last W frequency 3*s2 - 1; both must exist.
    require(3 * section[1] <= R / 2 + 1, "preset.section", "interleaved H section ", section[1],
            " does not fit in R/2 = ", R / 2);
    require(3 * section[2] <= R / 2, "preset.section", "interleaved W section ", section[2],
            " does not fit in R/2 = ", R / 2);
  }
  require(spatial_merge_size >= 1, "preset.spatial_merge_size", "must be >= 1");
  require(temporal_patch_size >= 1, "preset.temporal_patch_size", "must be >= 1");
  if (video_rule == VideoRule::ScaledTime) {
    require(std::isfinite(tokens_per_second) && tokens_per_second > 0.0 && tokens_per_second <= 1e6,
            "preset.tokens_per_second", "must be in (0, 1e6] for the scaled-time rule");
  }
}

Preset get_preset(const std::string& name) {
  Preset p;
  p.name = name;
  if (name == "qwen2-vl") {
    p.head_dim = 128, p.partial_rotary_factor = 1.0, p.theta = 1e6, p.section = {16, 24, 24};
    p.layout = Layout::Chunked, p.patch_size = 14, p.video_rule = VideoRule::FrameIndex;
  } else if (name == "qwen2.5-vl") {
    p.head_dim = 128, p.partial_rotary_factor = 1.0, p.theta = 1e6, p.section = {16, 24, 24};
    p.layout = Layout::Chunked, p.patch_size = 14, p.video_rule = VideoRule::ScaledTime;
    p.tokens_per_second = 2.0;
  } else if (name == "qwen3-vl") {
    p.head_dim = 128, p.partial_rotary_factor = 1.0, p.theta = 5e6, p.section = {24, 20, 20};
    p.layout = Layout::Interleaved, p.patch_size = 16, p.video_rule = VideoRule::PerFrame;
  } else if (name == "qwen3.5") {
    p.head_dim = 256, p.partial_rotary_factor = 0.25, p.theta = 1e7, p.section = {11, 11, 10};
    p.layout = Layout::Interleaved, p.patch_size = 16, p.video_rule = VideoRule::PerFrame;
  } else {
    std::ostringstream known;
    for (const auto& n : preset_names()) known << (known.tellp() > 0 ? ", " : "") << n;
    fail("model", "unknown MRoPE model '", name, "' (known: ", known.str(), ")");
  }
  p.spatial_merge_size = 2;
  p.temporal_patch_size = 2;
  p.validate();
  return p;
}

std::vector<std::string> preset_names() { return {"qwen2-vl", "qwen2.5-vl", "qwen3-vl", "qwen3.5"}; }

// ---------------------------------------------------------------------------------------------------------
// Segments and validation

Segment Segment::text(std::int64_t length) {
  Segment s;
  s.kind = SegmentKind::Text;
  s.length = length;
  return s;
}

Segment Segment::image(std::int64_t t, std::int64_t h, std::int64_t w) {
  Segment s;
  s.kind = SegmentKind::Image;
  s.grid = {t, h, w};
  return s;
}

Segment Segment::video(std::int64_t t, std::int64_t h, std::int64_t w, std::optional<double> second_per_grid,
                       std::vector<std::int64_t> frame_text) {
  Segment s;
  s.kind = SegmentKind::Video;
  s.grid = {t, h, w};
  s.second_per_grid = second_per_grid;
  s.frame_text = std::move(frame_text);
  return s;
}

namespace {

std::string seg_field(const std::string& field, std::size_t i, const char* key) {
  std::ostringstream os;
  os << field << '[' << i << ']';
  if (key && *key) os << '.' << key;
  return os.str();
}

// Adds n to total, failing when the prompt would exceed kMaxTokens.
void add_tokens(std::int64_t& total, std::int64_t n, const std::string& field) {
  require(n <= kMaxTokens - total, field, "the prompt exceeds ", kMaxTokens, " tokens");
  total += n;
}

// Largest temporal offset we accept (keeps every position far inside int64 and exact in double).
constexpr double kMaxTimeOffset = 1099511627776.0;  // 2^40

}  // namespace

std::int64_t Piece::time(std::int64_t tt) const {
  if (!scaled_time) return tt;
  // The HF torch expression: arange(T) (int64) * second_per_grid * tokens_per_second, evaluated in binary32
  // left to right, then .long() (truncation toward zero; the values are >= 0).
  float v = static_cast<float>(tt) * second_per_grid;
  v = v * tokens_per_second;
  return static_cast<std::int64_t>(v);
}

Pos3 Piece::offset(std::int64_t k) const {
  const std::int64_t hw = h * w;
  const std::int64_t tt = k / hw;
  const std::int64_t hh = (k / w) % h;
  const std::int64_t ww = k % w;
  return {time(tt), hh, ww};
}

std::vector<Piece> build_pieces(const Preset& preset, const Request& request, const std::string& field) {
  preset.validate();
  const std::int64_t S = preset.spatial_merge_size;
  std::vector<Piece> out;
  std::int64_t total = 0;
  for (std::size_t i = 0; i < request.segments.size(); ++i) {
    const Segment& s = request.segments[i];
    if (s.kind == SegmentKind::Text) {
      require(s.length >= 0, seg_field(field, i, "length"), "must be >= 0, got ", s.length);
      add_tokens(total, s.length, seg_field(field, i, "length"));
      if (s.length > 0) {
        Piece p;
        p.is_text = true;
        p.tokens = s.length;
        out.push_back(p);
      }
      continue;
    }
    const std::string gf = seg_field(field, i, "grid");
    const char* axis_name[3] = {"T", "H", "W"};
    for (int a = 0; a < 3; ++a) {
      require(s.grid[a] >= 1, gf, axis_name[a], " must be >= 1, got ", s.grid[a]);
      require(s.grid[a] <= kMaxTokens, gf, axis_name[a], " = ", s.grid[a], " exceeds ", kMaxTokens);
    }
    require(s.grid[1] % S == 0, gf, "H = ", s.grid[1], " is not a multiple of the spatial merge size ", S);
    require(s.grid[2] % S == 0, gf, "W = ", s.grid[2], " is not a multiple of the spatial merge size ", S);
    const std::int64_t T = s.grid[0], h = s.grid[1] / S, w = s.grid[2] / S;

    Piece item;
    item.is_text = false;
    item.t = T, item.h = h, item.w = w;

    if (s.kind == SegmentKind::Image) {
      require(s.frame_text.empty(), seg_field(field, i, "frame_text"), "only videos take frame_text");
      require(!s.second_per_grid && !s.fps, seg_field(field, i, s.fps ? "fps" : "second_per_grid"),
              "only videos take timing");
      if (preset.video_rule == VideoRule::ScaledTime) {
        // Images carry a zero time step in the scaled-time rule (HF / vLLM Qwen2.5-VL).
        item.scaled_time = true;
        item.second_per_grid = 0.0f;
        item.tokens_per_second = static_cast<float>(preset.tokens_per_second);
      }
    } else {
      // Timing is checked for every model so that one request file is valid for all presets.
      if (s.second_per_grid) {
        require(std::isfinite(*s.second_per_grid) && *s.second_per_grid >= 0.0,
                seg_field(field, i, "second_per_grid"), "must be finite and >= 0, got ", *s.second_per_grid);
        require(!s.fps, seg_field(field, i, "fps"), "give second_per_grid or fps, not both");
      }
      if (s.fps) {
        require(std::isfinite(*s.fps) && *s.fps > 0.0, seg_field(field, i, "fps"), "must be finite and > 0, got ",
                *s.fps);
      }
      if (preset.video_rule == VideoRule::ScaledTime) {
        require(s.second_per_grid || s.fps, seg_field(field, i, "second_per_grid"), "a ", preset.name,
                " video needs second_per_grid or fps");
        const double spg = s.second_per_grid ? *s.second_per_grid
                                              : static_cast<double>(preset.temporal_patch_size) / *s.fps;
        item.scaled_time = true;
        item.second_per_grid = static_cast<float>(spg);
        item.tokens_per_second = static_cast<float>(preset.tokens_per_second);
        const float last = static_cast<float>(T - 1) * item.second_per_grid * item.tokens_per_second;
        require(std::isfinite(last) && last < kMaxTimeOffset,
                seg_field(field, i, s.second_per_grid ? "second_per_grid" : "fps"),
                "temporal offsets exceed 2^40 position units");
      }
      if (preset.video_rule == VideoRule::PerFrame) {
        if (!s.frame_text.empty()) {
          require(static_cast<std::int64_t>(s.frame_text.size()) == T, seg_field(field, i, "frame_text"),
                  "has ", s.frame_text.size(), " entries, expected one per frame (T = ", T, ")");
        }
        for (std::size_t f = 0; f < s.frame_text.size(); ++f) {
          const std::string ff = seg_field(field, i, "frame_text") + "[" + std::to_string(f) + "]";
          require(s.frame_text[f] >= 0, ff, "must be >= 0, got ", s.frame_text[f]);
          add_tokens(total, s.frame_text[f], ff);
        }
        // One (1, h, w) item per frame, each preceded by its text.
        for (std::int64_t f = 0; f < T; ++f) {
          if (!s.frame_text.empty() && s.frame_text[f] > 0) {
            Piece tp;
            tp.is_text = true;
            tp.tokens = s.frame_text[f];
            out.push_back(tp);
          }
          Piece frame = item;
          frame.t = 1;
          frame.tokens = h * w;
          frame.span = std::max(h, w);
          add_tokens(total, frame.tokens, gf);
          out.push_back(frame);
        }
        continue;
      }
      require(s.frame_text.empty(), seg_field(field, i, "frame_text"), preset.name,
              " does not split videos into frames; frame_text is only for per-frame models");
    }
    // tokens = T*h*w with an overflow check against kMaxTokens.
    require(h <= kMaxTokens / w && T <= kMaxTokens / (h * w), gf, "the item exceeds ", kMaxTokens, " tokens");
    item.tokens = T * h * w;
    add_tokens(total, item.tokens, gf);
    item.span = 1 + std::max({item.time(T - 1), h - 1, w - 1});
    out.push_back(item);
  }
  return out;
}

void validate(const Preset& preset, const Request& request, const std::string& field) {
  (void)build_pieces(preset, request, field);
}

// ---------------------------------------------------------------------------------------------------------
// From-scratch plan

PromptPlan::PromptPlan(const Preset& preset, const Request& request) : pieces_(build_pieces(preset, request)) {
  std::int64_t cur = 0;
  for (const Piece& p : pieces_) {
    if (p.is_text) {
      for (std::int64_t i = 0; i < p.tokens; ++i) table_.push_back({cur + i, cur + i, cur + i});
      cur += p.tokens;
    } else {
      for (std::int64_t k = 0; k < p.tokens; ++k) {
        const Pos3 o = p.offset(k);
        table_.push_back({cur + o[0], cur + o[1], cur + o[2]});
      }
      cur += p.span;
    }
  }
  std::int64_t max_pos = -1;
  for (const Pos3& q : table_) max_pos = std::max({max_pos, q[0], q[1], q[2]});
  delta_ = max_pos + 1 - prompt_len();
}

Pos3 PromptPlan::position(std::int64_t index) const {
  require(index >= 0, "index", "must be >= 0, got ", index);
  if (index < prompt_len()) return table_[static_cast<std::size_t>(index)];
  return text_position(index, delta_);
}

std::vector<Pos3> PromptPlan::positions(std::int64_t begin, std::int64_t count) const {
  require(begin >= 0, "begin", "must be >= 0, got ", begin);
  require(count >= 0 && count <= kMaxTokens, "count", "must be in [0, ", kMaxTokens, "], got ", count);
  std::vector<Pos3> out;
  out.reserve(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) out.push_back(position(begin + i));
  return out;
}

// ---------------------------------------------------------------------------------------------------------
// Windows and batches

Window verify_window(const PromptPlan& plan, std::int64_t num_computed, std::int64_t T) {
  require(num_computed >= 0, "num_computed", "must be >= 0, got ", num_computed);
  require(T >= 1, "T", "a verify window needs T >= 1, got ", T);
  return Window{num_computed, plan.positions(num_computed, T)};
}

Window draft_window(const PromptPlan& plan, std::int64_t num_computed, std::int64_t steps) {
  require(num_computed >= 1 && num_computed >= plan.prompt_len(), "num_computed",
          "drafting starts once the prompt is computed (num_computed ", num_computed, ", prompt_len ",
          plan.prompt_len(), ")");
  require(steps >= 0, "steps", "must be >= 0, got ", steps);
  return Window{num_computed, plan.positions(num_computed, steps)};
}

BatchPositions batch_positions(const std::vector<BatchEntry>& batch) {
  BatchPositions out;
  for (std::size_t r = 0; r < batch.size(); ++r) {
    const BatchEntry& e = batch[r];
    const std::string f = "batch[" + std::to_string(r) + "]";
    require(e.plan != nullptr, f + ".plan", "is null");
    require(e.begin >= 0, f + ".begin", "must be >= 0, got ", e.begin);
    require(e.count >= 0, f + ".count", "must be >= 0, got ", e.count);
    out.delta.push_back(e.plan->delta());
    for (std::int64_t i = 0; i < e.count; ++i) {
      out.pos.push_back(e.plan->position(e.begin + i));
      out.slot.push_back(e.begin + i);
      out.request.push_back(static_cast<std::int64_t>(r));
    }
  }
  return out;
}

}  // namespace replayssm::mrope
