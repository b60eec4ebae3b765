// MRoPE sessions judged (mrope_session.hpp): the oracle (one PositionTracker per request), the per-token checks,
// the coverage of a campaign and the reference implementation of the session commands.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>
#include <set>
#include <sstream>

#include "replayssm/error.hpp"
#include "replayssm/mrope/mrope_fixture.hpp"
#include "replayssm/mrope/mrope_session.hpp"

namespace replayssm::mrope {

namespace {

using ojson = nlohmann::ordered_json;

// [begin, end) of every vision item of a prompt, in token indices.
std::vector<std::pair<std::int64_t, std::int64_t>> vision_ranges(const Preset& p, const Request& r) {
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  std::int64_t at = 0;
  for (const auto& piece : build_pieces(p, r)) {
    if (!piece.is_text) out.emplace_back(at, at + piece.tokens);
    at += piece.tokens;
  }
  return out;
}

}  // namespace

// --- the oracle ------------------------------------------------------------------------------------------
SessionOracle::SessionOracle(const Preset& preset, std::int64_t q_heads, std::int64_t k_heads)
    : preset_(preset), rot_(Rotary::from(preset)), q_heads_(q_heads), k_heads_(k_heads) {
  preset_.validate();
  require(q_heads >= 1, "q_heads", "must be >= 1");
  require(k_heads >= 1, "k_heads", "must be >= 1");
}

const PositionTracker* SessionOracle::request(std::int64_t req) const {
  const auto it = req_.find(req);
  return it == req_.end() ? nullptr : &it->second;
}

std::optional<StepAnswer> SessionOracle::apply(const SessionCommand& c, const std::vector<float>& q,
                                               const std::vector<float>& k, const std::string& field) {
  using Op = SessionCommand::Op;
  require(c.op == Op::Accept || pending_verify_.empty(), field + ".op",
          "the last step's verify rows need their mrope_accept first");
  switch (c.op) {
    case Op::Admit: {
      require(c.req >= 0, field + ".req", "must be >= 0, got ", c.req);
      require(!req_.count(c.req), field + ".req", "request ", c.req, " is already live");
      PositionTracker tr(preset_, Request{c.segments});
      require(tr.prompt_len() >= 1, field + ".segments", "the prompt has no token");
      require(c.cached >= 0 && c.cached < tr.prompt_len(), field + ".cached", "must be in [0, prompt_len = ",
              tr.prompt_len(), "), got ", c.cached);
      if (c.cached > 0) tr.prefill(c.cached);  // a prefix hit: those tokens' KV exists
      req_.emplace(c.req, std::move(tr));
      order_.push_back(c.req);
      return std::nullopt;
    }
    case Op::Release: {
      require(req_.count(c.req) > 0, field + ".req", "request ", c.req, " is not live");
      req_.erase(c.req);
      order_.erase(std::find(order_.begin(), order_.end(), c.req));
      return std::nullopt;
    }
    case Op::Accept: {
      require(!pending_verify_.empty(), field, "no step with verify rows to accept");
      require(c.accepted.size() == pending_verify_.size(), field + ".rows", "must hold the ", pending_verify_.size(),
              " verify rows of the last step, got ", c.accepted.size());
      // The window T of request req among the last step's verify rows (0: not one of them).
      auto window_of = [this](std::int64_t req) {
        for (const auto& p : pending_verify_)
          if (p.first == req) return p.second;
        return std::int64_t{0};
      };
      std::set<std::int64_t> seen;
      for (std::size_t i = 0; i < c.accepted.size(); ++i) {
        const std::int64_t r = c.accepted[i].first, n = c.accepted[i].second, T = window_of(r);
        const std::string f = field + ".rows[" + std::to_string(i) + "]";
        require(T > 0 && seen.insert(r).second, f + ".req", "request ", r,
                " is not a verify row of the last step (or is listed twice)");
        require(n >= 1 && n <= T, f + ".accepted", "must be in [1, ", T, "], got ", n);
      }
      for (const auto& a : c.accepted) req_.at(a.first).verify(window_of(a.first), a.second);
      pending_verify_.clear();
      return std::nullopt;
    }
    case Op::Step: break;
  }
  require(!c.rows.empty(), field + ".rows", "a step needs at least one row");
  const std::int64_t D = preset_.head_dim, N = c.tokens();
  require(q.size() == static_cast<std::size_t>(N * q_heads_ * D), field + ".q", "must hold N * q_heads * head_dim values");
  require(k.size() == static_cast<std::size_t>(N * k_heads_ * D), field + ".k", "must hold N * k_heads * head_dim values");
  StepAnswer a;
  std::vector<Pos3> pos;
  std::vector<bool> pad;
  std::set<std::int64_t> seen;
  std::vector<std::pair<std::int64_t, std::int64_t>> verify;
  for (std::size_t i = 0; i < c.rows.size(); ++i) {
    const SessionRow& r = c.rows[i];
    const std::string f = field + ".rows[" + std::to_string(i) + "]";
    require(r.tokens >= 1, f + ".tokens", "must be >= 1, got ", r.tokens);
    if (r.kind == RowKind::Pad) {
      require(i + 1 == c.rows.size(), f + ".kind", "padding is only the last row");
      for (std::int64_t t = 0; t < r.tokens; ++t) {
        pos.push_back({0, 0, 0});
        a.index.push_back(-1);
        pad.push_back(true);
      }
      continue;
    }
    require(req_.count(r.req) > 0, f + ".req", "request ", r.req, " is not live");
    require(seen.insert(r.req).second, f + ".req", "request ", r.req, " has two rows in one step");
    PositionTracker& tr = req_.at(r.req);
    Window w;
    if (r.kind == RowKind::Prefill) {
      require(tr.num_computed() < tr.prompt_len() && r.tokens <= tr.prompt_len() - tr.num_computed(), f + ".tokens",
              "a prefill chunk takes at most the ", tr.prompt_len() - tr.num_computed(), " prompt tokens not computed");
      w = tr.prefill(r.tokens);
    } else {
      require(tr.num_computed() >= tr.prompt_len(), f + ".kind", "request ", r.req, " has prompt tokens to prefill");
      require(r.kind != RowKind::Decode || r.tokens == 1, f + ".tokens", "a decode row is one token");
      require(r.tokens <= kMaxSpecTokens, f + ".tokens", "must be at most ", kMaxSpecTokens);
      if (r.kind == RowKind::Decode) {
        w = tr.verify(1, 1);
      } else {
        PositionTracker probe = tr;  // the window does not depend on the accepted count
        w = probe.verify(r.tokens, 1);
        verify.emplace_back(r.req, r.tokens);
      }
    }
    for (std::size_t t = 0; t < w.pos.size(); ++t) {
      pos.push_back(w.pos[t]);
      a.index.push_back(w.slot(t));
      pad.push_back(false);
    }
  }
  a.positions.assign(static_cast<std::size_t>(3 * N), 0);
  for (std::int64_t t = 0; t < N; ++t)
    for (int ax = 0; ax < 3; ++ax) a.positions[static_cast<std::size_t>(ax * N + t)] = pos[static_cast<std::size_t>(t)][ax];
  a.q_rot = rotate(rot_, pos, q_heads_, q);
  a.k_rot = rotate(rot_, pos, k_heads_, k);
  // Padding is not rotated: its expected values are the inputs bit for bit.
  for (std::int64_t t = 0; t < N; ++t) {
    if (!pad[static_cast<std::size_t>(t)]) continue;
    std::copy_n(q.begin() + t * q_heads_ * D, q_heads_ * D, a.q_rot.begin() + t * q_heads_ * D);
    std::copy_n(k.begin() + t * k_heads_ * D, k_heads_ * D, a.k_rot.begin() + t * k_heads_ * D);
  }
  pending_verify_ = std::move(verify);
  return a;
}

// --- coverage --------------------------------------------------------------------------------------------
void SessionCoverage::merge(const SessionCoverage& o) {
  cases += o.cases, steps += o.steps, prefill_chunks += o.prefill_chunks, vision_chunks += o.vision_chunks;
  split_items += o.split_items, verify_rows += o.verify_rows, partial_accepts += o.partial_accepts;
  decode_rows += o.decode_rows, mixed_steps += o.mixed_steps, ragged_steps += o.ragged_steps;
  permuted_steps += o.permuted_steps, sat_out += o.sat_out, pad_tails += o.pad_tails;
  negative_delta += o.negative_delta, releases += o.releases, readmits += o.readmits;
  releases_mid_prefill += o.releases_mid_prefill, prefix_hits += o.prefix_hits;
  max_position = std::max(max_position, o.max_position);
  for (const auto& [m, n] : o.models) models[m] += n;
}

ojson SessionCoverage::to_json() const {
  return ojson{{"cases", cases},
               {"steps", steps},
               {"prefill_chunks", prefill_chunks},
               {"vision_chunks", vision_chunks},
               {"split_items", split_items},
               {"verify_rows", verify_rows},
               {"partial_accepts", partial_accepts},
               {"decode_rows", decode_rows},
               {"mixed_steps", mixed_steps},
               {"ragged_steps", ragged_steps},
               {"permuted_steps", permuted_steps},
               {"sat_out", sat_out},
               {"pad_tails", pad_tails},
               {"negative_delta", negative_delta},
               {"releases", releases},
               {"readmits", readmits},
               {"releases_mid_prefill", releases_mid_prefill},
               {"prefix_hits", prefix_hits},
               {"max_position", max_position},
               {"models", models}};
}

SessionCoverage SessionCoverage::from_json(const nlohmann::json& j) {
  SessionCoverage c;
  auto get = [&](const char* k, long& v) { v = j.value(k, 0L); };
  get("cases", c.cases), get("steps", c.steps), get("prefill_chunks", c.prefill_chunks);
  get("vision_chunks", c.vision_chunks), get("split_items", c.split_items), get("verify_rows", c.verify_rows);
  get("partial_accepts", c.partial_accepts), get("decode_rows", c.decode_rows), get("mixed_steps", c.mixed_steps);
  get("ragged_steps", c.ragged_steps), get("permuted_steps", c.permuted_steps), get("sat_out", c.sat_out);
  get("pad_tails", c.pad_tails), get("negative_delta", c.negative_delta), get("releases", c.releases);
  get("readmits", c.readmits), get("releases_mid_prefill", c.releases_mid_prefill), get("prefix_hits", c.prefix_hits);
  c.max_position = j.value("max_position", std::int64_t{0});
  if (j.contains("models")) c.models = j.at("models").get<std::map<std::string, long>>();
  return c;
}

std::string SessionCoverage::str() const {
  std::ostringstream os;
  os << cases << " cases, " << steps << " steps: " << prefill_chunks << " prefill chunks (" << vision_chunks
     << " with vision tokens, " << split_items << " ending inside a vision item), " << verify_rows << " verify rows ("
     << partial_accepts << " partly accepted), " << decode_rows << " decode rows; " << mixed_steps
     << " mixed prefill+verify steps, " << ragged_steps << " ragged, " << permuted_steps
     << " with rows out of admission order, " << sat_out << " with a live request sitting out, " << pad_tails
     << " bucket-padded; " << negative_delta << " requests with a negative delta past their prompt, " << releases
     << " releases (" << releases_mid_prefill << " before the prompt was computed), " << readmits
     << " ids admitted again, " << prefix_hits << " prefix hits; largest position " << max_position << "; models:";
  for (const auto& [m, n] : models) os << " " << m << " " << n;
  return os.str();
}

std::vector<std::string> SessionCoverage::unmet(const std::vector<std::string>& claimed) const {
  std::vector<std::string> out;
  for (const auto& m : claimed)
    if (!models.count(m) || models.at(m) == 0) out.push_back("MRoPE sessions: no case of model " + m);
  const std::pair<const char*, long> need[] = {
      {"prefill chunks with vision tokens", vision_chunks}, {"prefill chunks ending inside a vision item", split_items},
      {"verify rows", verify_rows},                         {"partly accepted verify rows", partial_accepts},
      {"decode rows", decode_rows},                         {"steps mixing prefill and verify", mixed_steps},
      {"ragged steps", ragged_steps},                       {"steps with rows out of admission order", permuted_steps},
      {"steps with a live request sitting out", sat_out},   {"bucket-padded steps", pad_tails},
      {"requests with a negative delta past their prompt", negative_delta}, {"requests released", releases},
      {"requests released before their prompt was computed", releases_mid_prefill},
      {"ids admitted again", readmits}, {"prefix hits (requests admitted with cached prompt tokens)", prefix_hits}};
  if (cases > 0) {
    for (const auto& [what, n] : need)
      if (n == 0) out.push_back(std::string("MRoPE sessions: no ") + what);
    if (max_position < kLongPosition)  // long contexts: caches, clamps and narrow position dtypes show only there
      out.push_back("MRoPE sessions: no position of " + std::to_string(kLongPosition) + " or more (largest " +
                    std::to_string(max_position) + ")");
  }
  return out;
}

// --- judging ---------------------------------------------------------------------------------------------
namespace {

// Where token t of a step sits: "row 1 (req 2 verify 4), token 2 of the row, absolute index 41".
std::string token_place(const SessionCommand& c, const StepAnswer& want, std::int64_t t) {
  std::int64_t at = 0;
  for (std::size_t r = 0; r < c.rows.size(); ++r) {
    if (t < at + c.rows[r].tokens) {
      std::ostringstream os;
      os << "token " << t << " (row " << r << ": ";
      if (c.rows[r].kind != RowKind::Pad) os << "req " << c.rows[r].req << " ";
      os << to_string(c.rows[r].kind) << " " << c.rows[r].tokens << ", token " << (t - at) << " of the row, absolute index "
         << want.index[static_cast<std::size_t>(t)] << ")";
      return os.str();
    }
    at += c.rows[r].tokens;
  }
  return "token " + std::to_string(t);
}

std::optional<SessionFailure> judge_step(const SessionCase& sc, std::size_t ci, const StepAnswer& want,
                                         const StepAnswer& got, const std::vector<float>& q, const std::vector<float>& k,
                                         bool pad_zero) {
  const SessionCommand& c = sc.commands[ci];
  const std::int64_t N = c.tokens(), D = sc.preset.head_dim;
  auto fail_with = [&](const std::string& check, const std::string& msg) {
    return SessionFailure{ci, check, c.str() + ": " + msg};
  };
  if (got.index.size() != want.index.size() || got.positions.size() != want.positions.size() ||
      got.q_rot.size() != want.q_rot.size() || got.k_rot.size() != want.k_rot.size())
    return fail_with("error", "the answer's tensors have the wrong sizes");
  std::vector<bool> pad(static_cast<std::size_t>(N), false);
  {
    std::int64_t at = 0;
    for (const auto& r : c.rows) {
      for (std::int64_t t = 0; t < r.tokens; ++t) pad[static_cast<std::size_t>(at + t)] = r.kind == RowKind::Pad;
      at += r.tokens;
    }
  }
  // index: exact, every token (padding: -1).
  {
    long bad = 0;
    std::int64_t first = -1;
    for (std::int64_t t = 0; t < N; ++t)
      if (got.index[static_cast<std::size_t>(t)] != want.index[static_cast<std::size_t>(t)]) {
        ++bad;
        if (first < 0) first = t;
      }
    if (bad) {
      std::ostringstream os;
      os << "index (exact) of " << token_place(c, want, first) << ": expected " << want.index[static_cast<std::size_t>(first)]
         << ", got " << got.index[static_cast<std::size_t>(first)] << "; " << bad << " of " << N << " tokens differ";
      return fail_with("index", os.str());
    }
  }
  // positions: exact, real tokens (padding too under pad_positions "zero").
  {
    static const char* kAxis[] = {"t", "h", "w"};
    long bad = 0;
    std::int64_t first = -1;
    int first_ax = 0;
    for (std::int64_t t = 0; t < N; ++t) {
      if (pad[static_cast<std::size_t>(t)] && !pad_zero) continue;
      bool differs = false;
      for (int ax = 0; ax < 3 && !differs; ++ax) {
        const std::size_t e = static_cast<std::size_t>(ax * N + t);
        if (got.positions[e] != want.positions[e]) {
          differs = true;
          if (first < 0) first = t, first_ax = ax;
        }
      }
      bad += differs;
    }
    if (bad) {
      const std::size_t e = static_cast<std::size_t>(first_ax * N + first);
      std::ostringstream os;
      os << "positions[" << kAxis[first_ax] << "] (exact) of " << token_place(c, want, first) << ": expected "
         << want.positions[e] << ", got " << got.positions[e] << "; " << bad << " of " << N << " tokens differ";
      return fail_with(pad[static_cast<std::size_t>(first)] ? "pad" : "positions", os.str());
    }
  }
  // q_rot, k_rot: padding bitwise the inputs (pad_positions "zero"), real tokens allclose at the rotary bound.
  std::int64_t P = 0;
  for (std::int64_t t = 0; t < N; ++t)
    if (!pad[static_cast<std::size_t>(t)])
      for (int ax = 0; ax < 3; ++ax) P = std::max(P, std::abs(want.positions[static_cast<std::size_t>(ax * N + t)]));
  double maxx = 0;
  for (float x : q) maxx = std::max(maxx, std::fabs(static_cast<double>(x)));
  for (float x : k) maxx = std::max(maxx, std::fabs(static_cast<double>(x)));
  const Tolerance tol = rotary_tolerance(P, maxx);
  for (int which = 0; which < 2; ++which) {
    const auto& w = which == 0 ? want.q_rot : want.k_rot;
    const auto& g = which == 0 ? got.q_rot : got.k_rot;
    const std::int64_t heads = which == 0 ? sc.q_heads : sc.k_heads;
    const std::string name = which == 0 ? "q_rot" : "k_rot";
    double worst = -1;
    std::size_t worst_e = 0;
    long bad = 0;
    for (std::size_t e = 0; e < w.size(); ++e) {
      const std::int64_t t = static_cast<std::int64_t>(e) / (heads * D);
      if (pad[static_cast<std::size_t>(t)]) {
        if (!pad_zero) continue;
        std::uint32_t a, b;
        std::memcpy(&a, &w[e], 4);
        std::memcpy(&b, &g[e], 4);
        if (a != b) {
          std::ostringstream os;
          os << name << " of padding " << token_place(c, want, t) << ", head " << (static_cast<std::int64_t>(e) / D) % heads
             << ", dim " << static_cast<std::int64_t>(e) % D << ": must be the input bit for bit (position 0), expected "
             << w[e] << ", got " << g[e];
          return fail_with("pad", os.str());
        }
        continue;
      }
      const double d = std::fabs(static_cast<double>(g[e]) - static_cast<double>(w[e]));
      const bool ok = std::isfinite(g[e]) && d <= tol.atol;
      if (!ok) ++bad;
      const double excess = std::isfinite(g[e]) ? d : INFINITY;
      if (!ok && excess > worst) worst = excess, worst_e = e;
    }
    if (bad) {
      const std::int64_t t = static_cast<std::int64_t>(worst_e) / (heads * D);
      std::ostringstream os;
      os.precision(9);
      os << name << " (allclose atol " << tol.atol << ", rtol 0: rotary bound at P = " << P << ", max|x| = " << maxx
         << ") worst at " << token_place(c, want, t) << ", head " << (static_cast<std::int64_t>(worst_e) / D) % heads
         << ", dim " << static_cast<std::int64_t>(worst_e) % D << ": expected " << w[worst_e] << ", got " << g[worst_e]
         << " (|diff| " << worst << "); " << bad << " of " << w.size() << " elements outside";
      return fail_with(name, os.str());
    }
  }
  return std::nullopt;
}

}  // namespace

SessionReport run_session(const SessionCase& sc, SessionTarget& target, const StepInputs& inputs) {
  SessionReport rep;
  SessionCoverage& cov = rep.coverage;
  cov.cases = 1;
  cov.models[sc.preset.name] = 1;
  SessionOracle oracle(sc.preset, sc.q_heads, sc.k_heads);
  std::map<std::int64_t, std::vector<std::pair<std::int64_t, std::int64_t>>> vision;
  std::map<std::int64_t, std::int64_t> delta;  // of each admitted request's prompt
  std::map<std::int64_t, std::int64_t> admitted_at;  // admission sequence number of each live request
  std::set<std::int64_t> ever, negative_counted;
  std::int64_t admissions = 0;
  try {
    target.setup(sc.preset, sc.q_heads, sc.k_heads);
  } catch (const std::exception& e) {
    rep.ok = false;
    rep.failure = SessionFailure{0, "error", std::string("mrope_setup: ") + e.what()};
    return rep;
  }
  for (std::size_t ci = 0; ci < sc.commands.size(); ++ci) {
    const SessionCommand& c = sc.commands[ci];
    const std::string field = "commands[" + std::to_string(ci) + "]";
    std::vector<float> q, k;
    if (c.op == SessionCommand::Op::Step) std::tie(q, k) = inputs ? inputs(ci) : step_inputs(sc, ci);
    // Coverage of a step, from the oracle's state before it.
    if (c.op == SessionCommand::Op::Step) {
      ++cov.steps;
      bool prefill = false, spec = false, pad = false;
      std::set<std::int64_t> widths;
      std::int64_t last_seq = -1, real = 0;
      bool permuted = false;
      for (const auto& r : c.rows) {
        if (r.kind == RowKind::Pad) { pad = true; continue; }
        ++real;
        widths.insert(r.tokens);
        const PositionTracker* tr = oracle.request(r.req);
        if (tr && admitted_at.count(r.req)) {
          permuted = permuted || admitted_at.at(r.req) < last_seq;
          last_seq = admitted_at.at(r.req);
        }
        if (r.kind == RowKind::Prefill) {
          prefill = true;
          ++cov.prefill_chunks;
          if (tr) {
            const std::int64_t b = tr->num_computed(), e = b + r.tokens;
            bool has_vision = false, split = false;
            for (const auto& [vb, ve] : vision[r.req]) {
              has_vision = has_vision || (b < ve && vb < e);
              split = split || (vb < e && e < ve);
            }
            cov.vision_chunks += has_vision;
            cov.split_items += split;
          }
        } else {
          spec = true;
          if (r.kind == RowKind::Verify) ++cov.verify_rows; else ++cov.decode_rows;
          if (tr && delta.at(r.req) < 0 && negative_counted.insert(r.req).second) ++cov.negative_delta;
        }
      }
      cov.mixed_steps += prefill && spec;
      cov.ragged_steps += widths.size() >= 2;
      cov.permuted_steps += permuted;
      cov.sat_out += static_cast<std::int64_t>(oracle.live().size()) > real;
      cov.pad_tails += pad;
    } else if (c.op == SessionCommand::Op::Accept) {
      for (const auto& [r, n] : c.accepted)
        for (const auto& [pr, T] : oracle.pending_verify())
          if (pr == r && n < T) ++cov.partial_accepts;
    } else if (c.op == SessionCommand::Op::Release) {
      ++cov.releases;
      if (const PositionTracker* tr = oracle.request(c.req); tr && tr->num_computed() < tr->prompt_len())
        ++cov.releases_mid_prefill;
    } else if (c.op == SessionCommand::Op::Admit) {
      cov.readmits += !ever.insert(c.req).second;
      cov.prefix_hits += c.cached > 0;
      vision[c.req] = vision_ranges(sc.preset, Request{c.segments});
      delta[c.req] = PromptPlan(sc.preset, Request{c.segments}).delta();  // once per request, not per row
      admitted_at[c.req] = admissions++;
      negative_counted.erase(c.req);
    }
    const std::optional<StepAnswer> want = oracle.apply(c, q, k, field);  // throws for an invalid case
    try {
      switch (c.op) {
        case SessionCommand::Op::Admit: target.admit(c.req, c.segments, c.cached); break;
        case SessionCommand::Op::Release: target.release(c.req); break;
        case SessionCommand::Op::Accept: target.accept(c.accepted); break;
        case SessionCommand::Op::Step: {
          for (std::size_t t = 0; t < want->index.size(); ++t)
            if (want->index[t] >= 0)
              for (int ax = 0; ax < 3; ++ax)
                cov.max_position = std::max(cov.max_position, want->positions[ax * want->index.size() + t]);
          const StepAnswer got = target.step(c.rows, q, k);
          if (auto f = judge_step(sc, ci, *want, got, q, k, target.pad_zero())) {
            rep.ok = false;
            rep.failure = std::move(f);
            return rep;
          }
          break;
        }
      }
    } catch (const std::exception& e) {
      rep.ok = false;
      rep.failure = SessionFailure{ci, "error", c.str() + ": " + e.what()};
      return rep;
    }
  }
  return rep;
}

// --- the reference implementation ------------------------------------------------------------------------
namespace {

class ReferenceSession : public SessionTarget {
 public:
  std::string name() const override { return "reference"; }
  std::vector<std::string> models() const override { return preset_names(); }
  bool pad_zero() const override { return true; }
  void setup(const Preset& preset, std::int64_t q_heads, std::int64_t k_heads) override {
    oracle_.emplace(preset, q_heads, k_heads);
  }
  void admit(std::int64_t req, const std::vector<Segment>& segments, std::int64_t cached) override {
    SessionCommand c;
    c.op = SessionCommand::Op::Admit, c.req = req, c.segments = segments, c.cached = cached;
    live().apply(c, {}, {}, "mrope_admit");
  }
  StepAnswer step(const std::vector<SessionRow>& rows, const std::vector<float>& q,
                  const std::vector<float>& k) override {
    SessionCommand c;
    c.op = SessionCommand::Op::Step, c.rows = rows;
    return *live().apply(c, q, k, "mrope_step");
  }
  void accept(const std::vector<std::pair<std::int64_t, std::int64_t>>& accepted) override {
    SessionCommand c;
    c.op = SessionCommand::Op::Accept, c.accepted = accepted;
    live().apply(c, {}, {}, "mrope_accept");
  }
  void release(std::int64_t req) override {
    SessionCommand c;
    c.op = SessionCommand::Op::Release, c.req = req;
    live().apply(c, {}, {}, "mrope_release");
  }

 private:
  SessionOracle& live() {
    require(oracle_.has_value(), "mrope_setup", "no session: mrope_setup comes first");
    return *oracle_;
  }
  std::optional<SessionOracle> oracle_;
};

}  // namespace

std::unique_ptr<SessionTarget> reference_session_target() { return std::make_unique<ReferenceSession>(); }

}  // namespace replayssm::mrope
