// The incremental engine model: positions from a walk cursor, never from a full table.
#include <algorithm>

#include "replayssm/error.hpp"
#include "replayssm/mrope/mrope.hpp"

namespace replayssm::mrope {

namespace {
std::int64_t count_tokens(const std::vector<Piece>& pieces) {
  std::int64_t n = 0;
  for (const Piece& p : pieces) n += p.tokens;
  return n;
}
}  // namespace

PositionTracker::PositionTracker(const Preset& preset, const Request& prompt)
    : preset_(preset), request_(prompt), pieces_(build_pieces(preset, prompt)) {
  prompt_len_ = count_tokens(pieces_);
  require(prompt_len_ >= 1, "segments", "the prompt is empty");
  seq_len_ = prompt_len_;
}

void PositionTracker::normalize_walk() {
  while (piece_ < pieces_.size() && off_ >= pieces_[piece_].tokens) {
    off_ -= pieces_[piece_].tokens;
    ++piece_;
  }
}

Pos3 PositionTracker::step_walk() {
  normalize_walk();
  Pos3 p;
  if (piece_ < pieces_.size() && !pieces_[piece_].is_text) {
    const Piece& item = pieces_[piece_];
    if (off_ == 0) item_base_ = cur_;  // the item starts here; a chunk boundary inside it keeps this base
    const Pos3 o = item.offset(off_);
    p = {item_base_ + o[0], item_base_ + o[1], item_base_ + o[2]};
    if (off_ + 1 == item.tokens) cur_ = item_base_ + item.span;
  } else {
    // A text run, or past the last piece (generated tokens): one step along the diagonal.
    p = {cur_, cur_, cur_};
    ++cur_;
  }
  ++off_;  // past the last piece, off_ counts tokens beyond the prompt
  return p;
}

Window PositionTracker::prefill(std::int64_t count) {
  require(!finished_, "state", "the request is finished; continue it with a new turn first");
  require(count >= 1 && count <= seq_len_ - computed_, "count", "a prefill chunk must cover 1..",
          seq_len_ - computed_, " uncomputed committed tokens, got ", count);
  Window w{computed_, {}};
  w.pos.reserve(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) {
    w.pos.push_back(step_walk());
    history_.push_back(w.pos.back());
    ++computed_;
  }
  if (computed_ == seq_len_) ++seq_len_;  // the forward that computed the last token samples the next one
  return w;
}

Window PositionTracker::verify(std::int64_t T, std::int64_t accepted) {
  require(!finished_, "state", "the request is finished; continue it with a new turn first");
  require(T >= 1 && T <= kMaxSpecTokens, "T", "a verify window needs 1 <= T <= ", kMaxSpecTokens, ", got ", T);
  require(accepted >= 1 && accepted <= T, "accepted", "must be in [1, T = ", T, "], got ", accepted);
  require(computed_ >= prompt_len_ && computed_ == seq_len_ - 1, "state",
          "a verify step needs the prompt computed and exactly one pending token (num_computed ", computed_,
          ", seq_len ", seq_len_, ", prompt_len ", prompt_len_, ")");
  normalize_walk();
  // Past the prompt every token is text: the window is base + arange(T) on all axes, base = cur_.
  Window w{computed_, {}};
  for (std::int64_t i = 0; i < T; ++i) w.pos.push_back({cur_ + i, cur_ + i, cur_ + i});
  for (std::int64_t i = 0; i < accepted; ++i) history_.push_back(w.pos[static_cast<std::size_t>(i)]);
  cur_ += accepted;
  off_ += accepted;
  computed_ += accepted;
  seq_len_ = computed_ + 1;  // the bonus token sampled after the last accepted one
  return w;
}

Window PositionTracker::draft(std::int64_t steps) const {
  require(steps >= 0 && steps <= kMaxSpecTokens, "steps", "must be in [0, ", kMaxSpecTokens, "], got ", steps);
  require(computed_ >= prompt_len_, "state", "drafting starts once the prompt is computed (num_computed ",
          computed_, ", prompt_len ", prompt_len_, ")");
  // cur_ is the position of index computed_ (the next text position); step j works on index computed_-1+j.
  Window w{computed_, {}};
  for (std::int64_t j = 1; j <= steps; ++j) {
    const std::int64_t p = cur_ - 1 + j;
    w.pos.push_back({p, p, p});
  }
  return w;
}

void PositionTracker::stop(std::int64_t keep) {
  require(!finished_, "state", "the request is already finished");
  require(keep > prompt_len_ && keep <= seq_len_, "keep", "the stop keeps ", prompt_len_ + 1, "..", seq_len_,
          " committed tokens, got ", keep);
  if (computed_ > keep) {
    const std::int64_t d = computed_ - keep;
    normalize_walk();
    if (piece_ == pieces_.size() && off_ >= d) {
      // Trailing generated text: step the cursor back.
      cur_ -= d;
      off_ -= d;
      history_.resize(static_cast<std::size_t>(keep));
      computed_ = keep;
    } else {
      restart_from(keep);  // not reached while keep > prompt_len; kept so the state stays exact regardless
    }
  }
  seq_len_ = keep;
  finished_ = true;
}

void PositionTracker::restart_from(std::int64_t step) {
  require(step >= 0 && step <= computed_, "step", "must be in [0, num_computed = ", computed_, "], got ", step);
  require(!finished_, "state", "a finished request is not recomputed; continue it with a new turn first");
  piece_ = 0;
  off_ = 0;
  cur_ = 0;
  item_base_ = 0;
  history_.clear();
  computed_ = 0;
  for (std::int64_t i = 0; i < step; ++i) {
    history_.push_back(step_walk());
    ++computed_;
  }
}

void PositionTracker::continue_turn(const std::vector<Segment>& turn, const std::string& field) {
  require(finished_, "state", "only a finished request is continued");
  Request added{turn};
  std::vector<Piece> new_pieces = build_pieces(preset_, added, field);
  const std::int64_t new_tokens = count_tokens(new_pieces);
  require(new_tokens >= 1, field, "a continuation turn needs at least one token");
  require(seq_len_ + new_tokens <= kMaxTokens, field, "the prompt exceeds ", kMaxTokens, " tokens");
  const std::int64_t generated = seq_len_ - prompt_len_;
  if (generated > 0) {
    request_.segments.push_back(Segment::text(generated));
    Piece tp;
    tp.is_text = true;
    tp.tokens = generated;
    pieces_.push_back(tp);
  }
  request_.segments.insert(request_.segments.end(), turn.begin(), turn.end());
  pieces_.insert(pieces_.end(), new_pieces.begin(), new_pieces.end());
  prompt_len_ = seq_len_ + new_tokens;
  seq_len_ = prompt_len_;
  finished_ = false;
  normalize_walk();
}

}  // namespace replayssm::mrope
