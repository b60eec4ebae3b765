// replayssm/mrope/mrope.hpp — multimodal rotary position embedding (MRoPE) for the full-attention layers
// of Qwen VL models and of the hybrid Qwen3.5 (GDN + full attention), in prefill, decode and speculative
// decoding.
//
// What this header defines (docs/mrope.md states the same rules in prose, with worked examples):
//
//   1. Prompt positions. A prompt is a sequence of segments: text runs, images and videos. Every token gets a
//      3-D position (t, h, w). Walking the prompt left to right with a scalar `cur` (starting at 0):
//        - text token i of a run:                (cur+i, cur+i, cur+i); afterwards cur += run length;
//        - vision placeholder k of an item with merged grid (T, h, w) = (T, H/S, W/S), laid out t-major, then
//          row, then column (tt = k / (h*w), hh = (k / w) % h, ww = k % w):
//                                                 (cur + time(tt), cur + hh, cur + ww);
//          afterwards cur += span, span = 1 + max(time(T-1), h-1, w-1).
//      The per-request delta is max(position) + 1 - prompt_len (0 for a text-only prompt, usually negative
//      with images). Public source: HF transformers Qwen2-VL `get_rope_index` and its Qwen2.5-VL / Qwen3-VL /
//      Qwen3.5 variants; vLLM `get_mrope_input_positions`; lmdeploy / TurboMind use the same walk.
//   2. Temporal rule per model (the only place the presets differ for positions):
//        FrameIndex (Qwen2-VL):   time(tt) = tt for images and videos.
//        ScaledTime (Qwen2.5-VL): videos: time(tt) = trunc(float32(float32(tt) * spg) * tps) with spg =
//                                 second_per_grid (seconds one temporal grid step covers; temporal_patch_size /
//                                 fps) and tps = tokens_per_second (2 in the released configs), evaluated in
//                                 binary32 in that order, truncation only after the multiplications (as the HF
//                                 torch expression computes it). Images: time(tt) = 0 (HF and vLLM pass a zero
//                                 step for images; identical to tt for the T = 1 grids processors produce).
//        PerFrame (Qwen3-VL, Qwen3.5): a video of grid (T, H, W) is T separate items of grid (1, H, W); the
//                                 processor writes a timestamp as text before each frame (`frame_text[i]` text
//                                 tokens are placed before frame i). Images: time(tt) = tt.
//   3. Any absolute index n >= prompt_len (generated tokens, verify windows, drafts, re-prefill after
//      preemption, the tail of a finished turn): (n + delta) on all three axes. The delta never changes while
//      the prompt does not; a continuation turn is a new, longer prompt and gets a new delta.
//   4. Speculative decoding: a verify window of T tokens covers absolute indices [C, C+T) where C is the number
//      of computed tokens; after n accepted tokens (1 <= n <= T: the pending token plus n-1 accepted drafts)
//      C advances by n, and rejected drafts leave no trace. Draft step j (j >= 1) after a verify works on
//      absolute index C-1+j, i.e. the last accepted position + j on all axes. The KV slot of a token is its
//      absolute index, never a rope coordinate (Window::begin).
//   5. Rotary application: R = head_dim * partial_rotary_factor dims rotate, inv_freq_j = theta^(-2j/R) for
//      j in [0, R/2). Frequency j rotates the pair (x[j], x[j+R/2]) (NeoX split-half pairing) by the angle
//      pos[axis(j)] * inv_freq_j. Dims R .. head_dim-1 are copied unchanged. axis(j):
//        Chunked (mrope_section (s0,s1,s2), Qwen2-VL / Qwen2.5-VL [16,24,24]): j < s0 -> T, j < s0+s1 -> H,
//          else W.
//        Interleaved (Qwen3-VL [24,20,20], Qwen3.5 [11,11,10]): H if j % 3 == 1 and j < 3*s1; W if
//          j % 3 == 2 and j < 3*s2; T otherwise.
//      Sources: HF `apply_multimodal_rotary_pos_emb` (chunked) and `apply_interleaved_mrope` (Qwen3-VL), vLLM
//      `MRotaryEmbedding`; R from HF Qwen3.5 `compute_default_rope_parameters`.
//
// Units: positions and indices are token counts (int64); second_per_grid is in seconds; fps in frames per
// second; tokens_per_second in position units per second. Grids are in vision patches *before* the spatial
// merge (the processor's image_grid_thw / video_grid_thw); H and W must be multiples of the merge size S.
//
// Errors: every invalid input throws replayssm::Error whose field() names the offending input, spelt like the
// JSON request keys ("segments[2].grid", "segments[0].length", "accepted", "T", "keep", "model", ...).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace replayssm::mrope {

// Axis numbers of a 3-D position.
inline constexpr int kAxisT = 0;
inline constexpr int kAxisH = 1;
inline constexpr int kAxisW = 2;

// One token's (t, h, w) rope position.
using Pos3 = std::array<std::int64_t, 3>;

// Largest prompt (and largest generated count in a request) the reference materialises: 2^24 tokens, far above
// every model's context (262144 for Qwen3-VL / Qwen3.5).
inline constexpr std::int64_t kMaxTokens = std::int64_t{1} << 24;
// Largest speculative window: a verify step's T and a draft step's count (real engines verify a few to a few
// dozen tokens; the cap only keeps a request from asking for an unbounded allocation).
inline constexpr std::int64_t kMaxSpecTokens = 1024;

enum class Layout : std::uint8_t { Chunked, Interleaved };
enum class VideoRule : std::uint8_t { FrameIndex, ScaledTime, PerFrame };

std::string to_string(Layout);
std::string to_string(VideoRule);

// The MRoPE-relevant part of a model configuration.
struct Preset {
  std::string name = "custom";
  int head_dim = 128;
  double partial_rotary_factor = 1.0;  // R = int(head_dim * partial_rotary_factor)
  double theta = 1e6;                  // rope_theta
  std::array<int, 3> section{16, 24, 24};  // mrope_section; must sum to R/2
  Layout layout = Layout::Chunked;
  int spatial_merge_size = 2;          // S
  int patch_size = 14;                 // informational (pixels per patch side)
  int temporal_patch_size = 2;         // frames per temporal grid step: fps -> second_per_grid = this / fps
  VideoRule video_rule = VideoRule::FrameIndex;
  double tokens_per_second = 0.0;      // ScaledTime only (used as binary32)

  int rotary_dim() const;              // R
  // Throws Error("preset.<field>") unless R is even, 0 < R <= head_dim, sum(section) == R/2, the interleaved
  // masks stay below R/2, theta > 1, S >= 1, temporal_patch_size >= 1 and tokens_per_second fits the rule.
  void validate() const;
};

// Named presets, values from the released configs (see docs/mrope.md):
//   "qwen2-vl"   head_dim 128, R 128, theta 1e6, [16,24,24] chunked,     S 2, FrameIndex
//   "qwen2.5-vl" head_dim 128, R 128, theta 1e6, [16,24,24] chunked,     S 2, ScaledTime, tokens_per_second 2
//   "qwen3-vl"   head_dim 128, R 128, theta 5e6, [24,20,20] interleaved, S 2, PerFrame
//   "qwen3.5"    head_dim 256, R 64 (factor 0.25), theta 1e7, [11,11,10] interleaved, S 2, PerFrame
// Throws Error("model") listing the known names.
Preset get_preset(const std::string& name);
std::vector<std::string> preset_names();

// ---------------------------------------------------------------------------------------------------------
// Requests

enum class SegmentKind : std::uint8_t { Text, Image, Video };
std::string to_string(SegmentKind);

struct Segment {
  SegmentKind kind = SegmentKind::Text;
  std::int64_t length = 0;                  // Text: tokens (>= 0)
  std::array<std::int64_t, 3> grid{1, 1, 1};  // Image / Video: (T, H, W) patches before the merge, each >= 1
  // Video timing, used by ScaledTime models only (ignored by the others, but still checked): seconds covered
  // by one temporal grid step (>= 0), or the sampling rate (> 0) from which spg = temporal_patch_size / fps.
  // A ScaledTime video needs exactly one of them.
  std::optional<double> second_per_grid;
  std::optional<double> fps;
  // Video, PerFrame models only: frame_text[i] text tokens (timestamp, frame delimiters) placed before frame
  // i. Empty means no text between frames; otherwise exactly T entries, each >= 0.
  std::vector<std::int64_t> frame_text;

  static Segment text(std::int64_t length);
  static Segment image(std::int64_t t, std::int64_t h, std::int64_t w);
  static Segment video(std::int64_t t, std::int64_t h, std::int64_t w,
                       std::optional<double> second_per_grid = std::nullopt,
                       std::vector<std::int64_t> frame_text = {});
};

struct Request {
  std::vector<Segment> segments;
};

// Throws Error("<field>[i].<key>") for the first invalid segment (negative length, grid entry < 1, H or W not
// a multiple of S, ScaledTime video without timing or with both timings, non-finite or negative timing,
// frame_text on a model that does not split videos or with a length other than T, prompt above kMaxTokens).
// `field` names the segment list in messages ("segments" for a prompt, "turn.segments" for a continuation).
void validate(const Preset& preset, const Request& request, const std::string& field = "segments");

// ---------------------------------------------------------------------------------------------------------
// The prompt as pieces, and the from-scratch position table

// A prompt flattened into text runs and vision items (a PerFrame video becomes frame_text runs and T items of
// grid (1, h, w)). Grid sizes here are merged: h = H / S, w = W / S.
struct Piece {
  bool is_text = true;
  std::int64_t tokens = 0;                 // text length, or T*h*w placeholders
  std::int64_t t = 0, h = 0, w = 0;        // vision items: merged grid
  bool scaled_time = false;                // time(tt) = trunc((tt * spg) * tps) in binary32; else time(tt) = tt
  float second_per_grid = 0.0f, tokens_per_second = 0.0f;
  std::int64_t span = 0;                   // vision items: how far the item advances `cur`

  // Offset of placeholder k (0 <= k < tokens) from the item's base position `cur`.
  Pos3 offset(std::int64_t k) const;
  std::int64_t time(std::int64_t tt) const;
};

// Validates (see validate) and flattens. Zero-length text runs are dropped.
std::vector<Piece> build_pieces(const Preset& preset, const Request& request,
                                const std::string& field = "segments");

// The from-scratch answer for one request: the walk over the whole prompt at once.
class PromptPlan {
 public:
  PromptPlan(const Preset& preset, const Request& request);

  std::int64_t prompt_len() const { return static_cast<std::int64_t>(table_.size()); }
  std::int64_t delta() const { return delta_; }
  // Positions of the prompt tokens, prompt_len rows.
  const std::vector<Pos3>& table() const { return table_; }
  const std::vector<Piece>& pieces() const { return pieces_; }
  // Position of any absolute index >= 0: the table below prompt_len, index + delta at or beyond it.
  // Throws Error("index") for a negative index.
  Pos3 position(std::int64_t index) const;
  // Positions of [begin, begin + count). Throws Error("begin"/"count") when negative.
  std::vector<Pos3> positions(std::int64_t begin, std::int64_t count) const;

 private:
  std::vector<Piece> pieces_;
  std::vector<Pos3> table_;
  std::int64_t delta_ = 0;
};

// (index + delta) on all three axes.
inline Pos3 text_position(std::int64_t index, std::int64_t delta) {
  return {index + delta, index + delta, index + delta};
}

// ---------------------------------------------------------------------------------------------------------
// Windows: what one forward feeds, per request

// Positions of `pos.size()` consecutive tokens whose absolute indices (= KV slots) are begin, begin+1, ...
struct Window {
  std::int64_t begin = 0;
  std::vector<Pos3> pos;

  std::int64_t slot(std::size_t i) const { return begin + static_cast<std::int64_t>(i); }
  bool operator==(const Window&) const = default;
};

// Verify window of T tokens starting at num_computed. Throws Error("num_computed") if negative, Error("T")
// unless T >= 1.
Window verify_window(const PromptPlan& plan, std::int64_t num_computed, std::int64_t T);
// Draft steps j = 1..steps after a step that left num_computed tokens computed: step j works on absolute index
// num_computed - 1 + j (the last accepted position + j on all axes once the prompt is done). Throws
// Error("num_computed") unless num_computed >= prompt_len and >= 1, Error("steps") if negative.
Window draft_window(const PromptPlan& plan, std::int64_t num_computed, std::int64_t steps);

// A mixed batch: each request contributes [begin, begin + count) with its own delta.
struct BatchEntry {
  const PromptPlan* plan = nullptr;
  std::int64_t begin = 0;
  std::int64_t count = 0;
};
struct BatchPositions {
  std::vector<Pos3> pos;                 // sum(count) rows, request by request
  std::vector<std::int64_t> slot;        // absolute index of every row (KV slot inside its request)
  std::vector<std::int64_t> request;     // request number of every row
  std::vector<std::int64_t> delta;       // per request
};
// Throws Error("batch[i].plan"/"batch[i].begin"/"batch[i].count").
BatchPositions batch_positions(const std::vector<BatchEntry>& batch);

// ---------------------------------------------------------------------------------------------------------
// The incremental engine model

// Follows one request through an engine's life, computing positions incrementally from a cursor the way an
// engine that keeps per-request state does (it never consults a full position table):
//   prefill chunks of any size (a chunk may end inside a vision item), speculative verify steps with window T
//   and accepted n, draft steps, an early stop that trims committed tokens, a recompute reset (preemption:
//   restart_from(0); prefix-cache hit: restart_from(k)) that replays the walk from the start, and a
//   continuation turn that appends new segments after the finished turn.
// Token accounting: seq_len counts committed tokens (prompt + generated, including a sampled token whose KV is
// not computed yet); num_computed counts tokens whose KV is written. A prefill chunk that makes
// num_computed == seq_len samples the next token (seq_len += 1). A verify step needs exactly one pending
// token (num_computed == seq_len - 1) and a fully computed prompt; accepting n sets num_computed += n and
// seq_len = num_computed + 1 (the new bonus token).
// Every returned Window and history() must equal the from-scratch PromptPlan(preset, request()) answer; the
// property tests check exactly that.
class PositionTracker {
 public:
  PositionTracker(const Preset& preset, const Request& prompt);

  const Preset& preset() const { return preset_; }
  // The current prompt: the first prompt, then for every continuation the finished turn's generated tokens
  // as one text segment followed by the new turn's segments.
  const Request& request() const { return request_; }
  std::int64_t prompt_len() const { return prompt_len_; }
  std::int64_t seq_len() const { return seq_len_; }
  std::int64_t num_computed() const { return computed_; }
  bool finished() const { return finished_; }
  // Positions of the computed tokens [0, num_computed): truncated on early stop and on a reset.
  const std::vector<Pos3>& history() const { return history_; }

  // Positions of the next `count` committed tokens. Throws Error("count") unless 1 <= count <=
  // seq_len - num_computed, Error("state") when finished.
  Window prefill(std::int64_t count);
  // Verify window of T tokens at num_computed, then commits `accepted` of them. Throws Error("T") unless
  // 1 <= T <= kMaxSpecTokens, Error("accepted") unless 1 <= accepted <= T, Error("state") unless one token is pending and the
  // prompt is computed (or when finished).
  Window verify(std::int64_t T, std::int64_t accepted);
  // Draft steps j = 1..steps (absolute index num_computed - 1 + j). Throws Error("steps") unless
  // 0 <= steps <= kMaxSpecTokens, Error("state") unless the prompt is computed.
  Window draft(std::int64_t steps) const;
  // Early stop: the request ends with `keep` committed tokens (a stop token at index keep - 1, inside an
  // accepted run or the bonus token). Computed tokens beyond keep are discarded. Throws Error("keep") unless
  // prompt_len < keep <= seq_len, Error("state") when already finished.
  void stop(std::int64_t keep);
  // Recompute reset: KV of [step, num_computed) is dropped and the walk is replayed from the start up to
  // `step`. Throws Error("step") unless 0 <= step <= num_computed, Error("state") when finished.
  void restart_from(std::int64_t step);
  // Continuation of a finished request: the committed tokens of the turn become part of the prompt and
  // `turn` is appended after them. Computed tokens stay computed (prefix reuse). Throws Error("state")
  // unless finished, Error("<field>[i].<key>") for an invalid segment, Error(field) for an empty turn.
  void continue_turn(const std::vector<Segment>& turn, const std::string& field = "turn");

 private:
  Pos3 step_walk();      // position of index `computed_`, advancing the cursor
  void normalize_walk(); // moves past finished and empty pieces

  Preset preset_;
  Request request_;
  std::vector<Piece> pieces_;
  std::int64_t prompt_len_ = 0, seq_len_ = 0, computed_ = 0;
  bool finished_ = false;
  // Walk cursor: piece index, offset inside it, next text position, base of the current vision item.
  std::size_t piece_ = 0;
  std::int64_t off_ = 0, cur_ = 0, item_base_ = 0;
  std::vector<Pos3> history_;
};

// ---------------------------------------------------------------------------------------------------------
// Rotary application

struct Rotary {
  int head_dim = 128;
  int rotary_dim = 128;  // R
  double theta = 1e6;
  std::array<int, 3> section{16, 24, 24};
  Layout layout = Layout::Chunked;

  static Rotary from(const Preset& preset);
};

// Axis (kAxisT/H/W) that frequency j in [0, R/2) reads. Throws Error("j") when out of range.
int frequency_axis(const Rotary& rot, int j);
std::vector<int> frequency_axes(const Rotary& rot);
// theta^(-2j/R) in double precision.
double inv_freq(const Rotary& rot, int j);

// Rotates `heads` vectors of head_dim floats that share one position, in double precision, rounding each
// rotated output once to float ("truth" path). Dims >= R are copied bit for bit.
void rotate_heads(const Rotary& rot, const Pos3& pos, std::int64_t heads, const float* in, float* out);
// Applies rotate_heads to N tokens: x is [N, heads, head_dim] row-major, pos has N rows.
// Throws Error("x") when x.size() != N * heads * head_dim, Error("heads") when heads < 1.
std::vector<float> rotate(const Rotary& rot, const std::vector<Pos3>& pos, std::int64_t heads,
                          const std::vector<float>& x);
// The binary32 path public engines take (inv_freq = 1 / theta^(2j/R) and angle = pos * inv_freq in binary32,
// binary32 cos/sin and products): used to measure and justify the fixture tolerance.
std::vector<float> rotate_f32_engine(const Rotary& rot, const std::vector<Pos3>& pos, std::int64_t heads,
                                     const std::vector<float>& x);

}  // namespace replayssm::mrope
