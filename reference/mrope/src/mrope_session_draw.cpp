// Drawing MRoPE session cases (mrope_session.hpp, draw_session): requests with text, image and video prompts
// admitted and released between steps, ragged steps of prefill chunks, verify windows and decode tokens in a
// permuted order with live requests sitting out, accepted counts, and bucket padding. Portable Rng only.
#include <algorithm>
#include <map>

#include "replayssm/error.hpp"
#include "replayssm/mrope/mrope_session.hpp"
#include "replayssm/rng.hpp"

namespace replayssm::mrope {

namespace {

bool chance(Rng& rng, double p) { return rng.uniform01() < p; }

// FNV-1a of the model name: the same seed draws another case for every model.
std::uint64_t model_stream(const std::string& model) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : model) h = (h ^ ch) * 0x100000001b3ull;
  return h;
}

// A prompt: text, then one to three vision items each followed by text (a tenth end with the item); a fifth of
// the prompts are text only (delta 0 beside the negative deltas of the others). A quarter open with a long text
// run (500 to 20000 tokens) that the request is admitted with cached, as after a prefix-cache hit, so that
// positions reach the thousands without the judge sending thousands of tokens.
std::vector<Segment> draw_prompt(const Preset& p, Rng& rng, std::int64_t* cached) {
  std::vector<Segment> s;
  *cached = 0;
  if (chance(rng, 0.25)) {
    const std::int64_t run = rng.uniform_int(500, 20000);
    s.push_back(Segment::text(run));
    *cached = run - rng.uniform_int(1, 8);
  } else {
    s.push_back(Segment::text(rng.uniform_int(1, 6)));
  }
  if (chance(rng, 0.2)) return s;
  const std::int64_t S = p.spatial_merge_size;
  const std::int64_t items = rng.uniform_int(1, 3);
  for (std::int64_t i = 0; i < items; ++i) {
    if (chance(rng, 0.6)) {
      s.push_back(Segment::image(1, S * rng.uniform_int(1, 4), S * rng.uniform_int(1, 4)));
    } else {
      const std::int64_t T = rng.uniform_int(1, 6);
      Segment v = Segment::video(T, S * rng.uniform_int(1, 3), S * rng.uniform_int(1, 3));
      // Frame rates whose time steps are exact and ones whose product tt * spg * tps is not (truncation, not
      // rounding; the binary32 product of docs/mrope.md section 6); half the videos give fps, half spg.
      static const double kFps[] = {1.0, 2.0, 4.0, 0.5, 8.0, 3.0, 6.0, 29.97, 2.3, 0.7};
      const double fps = kFps[rng.uniform_int(0, 9)];
      if (chance(rng, 0.5)) v.fps = fps;
      else v.second_per_grid = static_cast<double>(p.temporal_patch_size) / fps;
      if (p.video_rule == VideoRule::PerFrame)
        for (std::int64_t f = 0; f < T; ++f) v.frame_text.push_back(rng.uniform_int(1, 4));
      s.push_back(v);
    }
    if (i + 1 < items || !chance(rng, 0.1)) s.push_back(Segment::text(rng.uniform_int(1, 4)));
  }
  return s;
}

}  // namespace

SessionCase draw_session(const std::string& model, std::uint64_t seed, const DrawOptions& o) {
  require(o.steps_min >= 1 && o.steps_max >= o.steps_min, "steps", "needs 1 <= steps_min <= steps_max");
  require(o.max_live >= 1 && o.max_T >= 1 && o.bucket >= 1, "max_live", "max_live, max_T and bucket must be >= 1");
  Rng rng(derive_seed(seed, 7 ^ model_stream(model)));
  SessionCase sc;
  sc.preset = get_preset(model);
  sc.seed = seed;
  sc.q_heads = rng.uniform_int(1, 3);
  sc.k_heads = rng.uniform_int(1, 2);
  if (o.q_heads > 0) sc.q_heads = o.q_heads;
  if (o.k_heads > 0) sc.k_heads = o.k_heads;
  std::map<std::int64_t, PositionTracker> live;
  std::vector<std::int64_t> order;  // admission order
  std::vector<std::int64_t> released;
  std::int64_t next_id = 0;
  auto admit = [&] {
    SessionCommand c;
    c.op = SessionCommand::Op::Admit;
    if (!released.empty() && chance(rng, 0.5)) {
      const auto at = static_cast<std::size_t>(rng.uniform_int(0, static_cast<std::int64_t>(released.size()) - 1));
      c.req = released[at];
      released.erase(released.begin() + static_cast<std::ptrdiff_t>(at));
    } else {
      c.req = next_id;
      next_id += rng.uniform_int(1, 3);  // ids are not dense
    }
    c.segments = draw_prompt(sc.preset, rng, &c.cached);
    PositionTracker tr(sc.preset, Request{c.segments});
    if (c.cached > 0) tr.prefill(c.cached);
    live.emplace(c.req, std::move(tr));
    order.push_back(c.req);
    sc.commands.push_back(std::move(c));
  };
  const std::int64_t first = rng.uniform_int(1, std::min<std::int64_t>(3, o.max_live));
  for (std::int64_t i = 0; i < first; ++i) admit();
  const std::int64_t steps = rng.uniform_int(o.steps_min, o.steps_max);
  for (std::int64_t s = 0; s < steps; ++s) {
    if (s > 0) {
      // A request past its prompt may leave (finished), rarely one still in its prompt (aborted, preempted for
      // good); another may arrive.
      for (std::size_t i = 0; i < order.size(); ++i) {
        const std::int64_t r = order[i];
        const bool decoding = live.at(r).num_computed() > live.at(r).prompt_len();
        if (chance(rng, decoding ? 0.15 : 0.04)) {
          SessionCommand c;
          c.op = SessionCommand::Op::Release;
          c.req = r;
          sc.commands.push_back(c);
          live.erase(r);
          order.erase(order.begin() + static_cast<std::ptrdiff_t>(i));
          released.push_back(r);
          break;
        }
      }
      if (order.empty() || (static_cast<int>(order.size()) < o.max_live && chance(rng, 0.35))) admit();
    }
    // The rows: a random subset of the live requests in a random order.
    std::vector<std::int64_t> in;
    for (std::int64_t r : order)
      if (chance(rng, 0.75)) in.push_back(r);
    if (in.empty()) in.push_back(order[static_cast<std::size_t>(rng.uniform_int(0, static_cast<std::int64_t>(order.size()) - 1))]);
    for (std::size_t i = in.size(); i > 1; --i)
      std::swap(in[i - 1], in[static_cast<std::size_t>(rng.uniform_int(0, static_cast<std::int64_t>(i) - 1))]);
    SessionCommand step;
    step.op = SessionCommand::Op::Step;
    SessionCommand acc;
    acc.op = SessionCommand::Op::Accept;
    std::vector<std::pair<std::int64_t, std::int64_t>> verify;
    for (std::int64_t r : in) {
      PositionTracker& tr = live.at(r);
      SessionRow row;
      row.req = r;
      if (tr.num_computed() < tr.prompt_len()) {
        const std::int64_t left = tr.prompt_len() - tr.num_computed();
        row.kind = RowKind::Prefill;
        row.tokens = chance(rng, 0.3) ? left : rng.uniform_int(1, std::min<std::int64_t>(left, 16));
        tr.prefill(row.tokens);
      } else if (chance(rng, 0.3)) {
        row.kind = RowKind::Decode;
        row.tokens = 1;
        tr.verify(1, 1);
      } else {
        row.kind = RowKind::Verify;
        row.tokens = rng.uniform_int(1, o.max_T);
        verify.emplace_back(r, row.tokens);
      }
      step.rows.push_back(row);
    }
    const std::int64_t N = step.tokens();
    if (N % o.bucket != 0 && chance(rng, 0.75)) step.rows.push_back(SessionRow{RowKind::Pad, -1, o.bucket - N % o.bucket});
    sc.commands.push_back(step);
    if (!verify.empty()) {
      for (const auto& [r, T] : verify) {
        const std::int64_t n = chance(rng, 0.3) ? T : rng.uniform_int(1, T);
        live.at(r).verify(T, n);
        acc.accepted.emplace_back(r, n);
      }
      // The accepted counts in any order: an implementation pairs them with its rows by request.
      for (std::size_t i = acc.accepted.size(); i > 1; --i)
        std::swap(acc.accepted[i - 1],
                  acc.accepted[static_cast<std::size_t>(rng.uniform_int(0, static_cast<std::int64_t>(i) - 1))]);
      sc.commands.push_back(acc);
    }
  }
  return sc;
}

}  // namespace replayssm::mrope
