// MRoPE sessions (mrope_session.hpp): the oracle on a hand-computed case, strict command parsing, the drawn
// cases' coverage, and the judge catching faulty implementations (each fault alone, within 30 seeds).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "mrope_test_util.hpp"
#include "replayssm/mrope/mrope_session.hpp"

using namespace replayssm::mrope;

namespace {

// text 3 + image (1,4,4) + text 2 on qwen2-vl: positions 0 1 2 | (3,3,3) (3,3,4) (3,4,3) (3,4,4) | 5 6,
// prompt_len 9, delta -2.
std::vector<Segment> text_image_text() { return {Segment::text(3), Segment::image(1, 4, 4), Segment::text(2)}; }

SessionCommand admit(std::int64_t req, std::vector<Segment> s) {
  SessionCommand c;
  c.op = SessionCommand::Op::Admit, c.req = req, c.segments = std::move(s);
  return c;
}
SessionCommand step(std::vector<SessionRow> rows) {
  SessionCommand c;
  c.op = SessionCommand::Op::Step, c.rows = std::move(rows);
  return c;
}
SessionCommand accept(std::vector<std::pair<std::int64_t, std::int64_t>> a) {
  SessionCommand c;
  c.op = SessionCommand::Op::Accept, c.accepted = std::move(a);
  return c;
}

std::vector<std::int64_t> axis(const StepAnswer& a, int ax, std::int64_t N) {
  return {a.positions.begin() + ax * N, a.positions.begin() + (ax + 1) * N};
}

TEST(MropeSession, OracleOnAHandComputedCase) {
  SessionCase sc;
  sc.preset = get_preset("qwen2-vl");
  sc.seed = 5;
  sc.commands = {admit(4, text_image_text()), admit(1, {Segment::text(2)}),
                 step({{RowKind::Prefill, 4, 5}, {RowKind::Prefill, 1, 2}, {RowKind::Pad, -1, 1}}),
                 step({{RowKind::Verify, 1, 3}, {RowKind::Prefill, 4, 4}}), accept({{1, 2}}),
                 step({{RowKind::Verify, 4, 3}, {RowKind::Decode, 1, 1}}), accept({{4, 1}})};
  SessionOracle o(sc.preset, sc.q_heads, sc.k_heads);
  std::vector<StepAnswer> got;
  for (std::size_t c = 0; c < sc.commands.size(); ++c) {
    std::vector<float> q, k;
    if (sc.commands[c].op == SessionCommand::Op::Step) std::tie(q, k) = step_inputs(sc, c);
    if (auto a = o.apply(sc.commands[c], q, k, "c")) got.push_back(*a);
  }
  ASSERT_EQ(got.size(), 3u);
  // Step 1: req 4's first 5 prompt tokens, req 1's whole prompt, one padding token.
  EXPECT_EQ(axis(got[0], 0, 8), (std::vector<std::int64_t>{0, 1, 2, 3, 3, 0, 1, 0}));
  EXPECT_EQ(axis(got[0], 1, 8), (std::vector<std::int64_t>{0, 1, 2, 3, 3, 0, 1, 0}));
  EXPECT_EQ(axis(got[0], 2, 8), (std::vector<std::int64_t>{0, 1, 2, 3, 4, 0, 1, 0}));
  EXPECT_EQ(got[0].index, (std::vector<std::int64_t>{0, 1, 2, 3, 4, 0, 1, -1}));
  // Step 2: req 1 verifies [2, 5) (delta 0), req 4 prefills its last 4 prompt tokens.
  EXPECT_EQ(axis(got[1], 0, 7), (std::vector<std::int64_t>{2, 3, 4, 3, 3, 5, 6}));
  EXPECT_EQ(axis(got[1], 2, 7), (std::vector<std::int64_t>{2, 3, 4, 3, 4, 5, 6}));
  EXPECT_EQ(got[1].index, (std::vector<std::int64_t>{2, 3, 4, 5, 6, 7, 8}));
  // Step 3: req 4 verifies [9, 12) at 9 - 2 = 7; req 1 decodes index 4 (2 accepted of [2, 5)).
  EXPECT_EQ(axis(got[2], 1, 4), (std::vector<std::int64_t>{7, 8, 9, 4}));
  EXPECT_EQ(got[2].index, (std::vector<std::int64_t>{9, 10, 11, 4}));
  // Padding is not rotated; token 0 (position 0) is not either, bit for bit.
  const auto [q0, k0] = step_inputs(sc, 2);
  const std::int64_t D = sc.preset.head_dim, Hq = sc.q_heads;
  for (std::int64_t e = 0; e < Hq * D; ++e) EXPECT_EQ(got[0].q_rot[7 * Hq * D + e], q0[7 * Hq * D + e]);
}

TEST(MropeSession, InvalidCommandsNameTheirField) {
  SessionOracle o(get_preset("qwen3.5"), 1, 1);
  o.apply(admit(0, {Segment::text(3)}), {}, {}, "c0");
  EXPECT_ERROR_FIELD(o.apply(admit(0, {Segment::text(1)}), {}, {}, "c1"), "c1.req");
  EXPECT_ERROR_FIELD(o.apply(step({{RowKind::Verify, 0, 2}}), {}, {}, "c2"), "c2.q");
  const std::vector<float> x(static_cast<std::size_t>(4 * 256), 0.5f);
  EXPECT_ERROR_FIELD(o.apply(step({{RowKind::Prefill, 0, 4}}), x, x, "c3"), "c3.rows[0].tokens");
  EXPECT_ERROR_FIELD(o.apply(step({{RowKind::Pad, -1, 2}, {RowKind::Prefill, 0, 2}}), x, x, "c4"), "c4.rows[0].kind");
  EXPECT_ERROR_FIELD(o.apply(step({{RowKind::Prefill, 7, 4}}), x, x, "c5"), "c5.rows[0].req");
  const std::vector<float> y(static_cast<std::size_t>(3 * 256), 0.5f);
  o.apply(step({{RowKind::Prefill, 0, 3}}), y, y, "c6");
  const std::vector<float> z(static_cast<std::size_t>(2 * 256), 0.5f);
  o.apply(step({{RowKind::Verify, 0, 2}}), z, z, "c7");
  EXPECT_ERROR_FIELD(o.apply(step({{RowKind::Decode, 0, 1}}), y, y, "c8"), "c8.op");  // accept first
  EXPECT_ERROR_FIELD(o.apply(accept({{0, 3}}), {}, {}, "c9"), "c9.rows[0].accepted");
  o.apply(accept({{0, 2}}), {}, {}, "c10");

  EXPECT_ERROR_FIELD(SessionCommand::from_json(nlohmann::json::parse(R"({"op":"mrope_step","tokens":3,
      "rows":[{"req":1,"kind":"verify","tokens":2}]})"), "m"), "m.tokens");
  EXPECT_ERROR_FIELD(SessionCommand::from_json(nlohmann::json::parse(R"({"op":"mrope_step","tokens":2,
      "rows":[{"req":1,"kind":"pad","tokens":2}]})"), "m"), "m.rows[0].req");
  EXPECT_ERROR_FIELD(SessionCommand::from_json(nlohmann::json::parse(R"({"op":"mrope_accept",
      "rows":[{"req":1,"n":2}]})"), "m"), "m.rows[0].n");
  EXPECT_ERROR_FIELD(SessionCommand::from_json(nlohmann::json::parse(R"({"op":"mrope_step","tokens":1,
      "rows":[{"req":1,"kind":"draft","tokens":1}]})"), "m"), "m.rows[0].kind");
}

TEST(MropeSession, CasesRoundTripThroughJson) {
  for (const auto& m : preset_names()) {
    const SessionCase sc = draw_session(m, 11);
    const SessionCase back = SessionCase::from_json(nlohmann::json::parse(sc.to_json().dump()), "case");
    EXPECT_EQ(back.to_json().dump(), sc.to_json().dump()) << m;
    EXPECT_EQ(back.preset.rotary_dim(), sc.preset.rotary_dim());
  }
}

// Thirty drawn cases per model exercise every kind of event the verdict asks for, and the reference passes them.
TEST(MropeSession, ThirtyCasesPerModelCoverEveryEvent) {
  SessionCoverage cov;
  const auto ref = reference_session_target();
  for (const auto& m : preset_names())
    for (std::uint64_t seed = 1; seed <= 30; ++seed) {
      const SessionReport r = run_session(draw_session(m, seed), *ref);
      ASSERT_TRUE(r.ok) << m << " seed " << seed << ": " << r.failure->message;
      cov.merge(r.coverage);
    }
  EXPECT_TRUE(cov.unmet(preset_names()).empty()) << cov.str();
  EXPECT_EQ(cov.models.size(), 4u);
}

// A faulty implementation: the reference with one bookkeeping error.
class Faulty : public SessionTarget {
 public:
  using Hook = std::function<void(const std::vector<SessionRow>&, StepAnswer&)>;
  // The rotation recomputed from the answer's positions and the inputs (q or k, heads) -> rotated.
  using Rerotate = std::function<std::vector<float>(const Rotary& rot, const std::vector<std::int64_t>& positions,
                                                    std::int64_t heads, const std::vector<float>& x)>;
  Faulty(bool accept_as_T, Hook hook, bool accept_by_order = false, Rerotate rerotate = nullptr)
      : accept_as_T_(accept_as_T), accept_by_order_(accept_by_order), hook_(std::move(hook)),
        rerotate_(std::move(rerotate)) {}
  std::string name() const override { return "faulty"; }
  std::vector<std::string> models() const override { return preset_names(); }
  bool pad_zero() const override { return true; }
  void setup(const Preset& p, std::int64_t qh, std::int64_t kh) override {
    inner_->setup(p, qh, kh);
    last_.clear();
    qh_ = qh, kh_ = kh;
    rot_ = Rotary::from(p);
  }
  void admit(std::int64_t r, const std::vector<Segment>& s, std::int64_t cached) override { inner_->admit(r, s, cached); }
  StepAnswer step(const std::vector<SessionRow>& rows, const std::vector<float>& q, const std::vector<float>& k) override {
    last_ = rows;
    StepAnswer a = inner_->step(rows, q, k);
    if (hook_) hook_(rows, a);
    if (rerotate_) a.q_rot = rerotate_(rot_, a.positions, qh_, q), a.k_rot = rerotate_(rot_, a.positions, kh_, k);
    return a;
  }
  void accept(const std::vector<std::pair<std::int64_t, std::int64_t>>& acc) override {
    auto a = acc;
    if (accept_by_order_) {  // the counts paired with the step's verify rows by their order, not by request
      std::vector<std::int64_t> verify;
      for (const auto& row : last_)
        if (row.kind == RowKind::Verify) verify.push_back(row.req);
      for (std::size_t i = 0; i < a.size() && i < verify.size(); ++i) a[i].first = verify[i];
    }
    if (accept_as_T_)  // the cursor advances by the window, not the accepted count
      for (auto& [r, n] : a)
        for (const auto& row : last_)
          if (row.req == r) n = row.tokens;
    inner_->accept(a);
  }
  void release(std::int64_t r) override { inner_->release(r); }

 private:
  std::unique_ptr<SessionTarget> inner_ = reference_session_target();
  bool accept_as_T_, accept_by_order_;
  Hook hook_;
  Rerotate rerotate_;
  std::vector<SessionRow> last_;
  std::int64_t qh_ = 1, kh_ = 1;
  Rotary rot_;
};

int cases_to_catch(SessionTarget& t, const std::string& model, std::uint64_t seed) {
  for (int c = 1; c <= 30; ++c) {
    const SessionReport r = run_session(draw_session(model, seed * 1000 + static_cast<std::uint64_t>(c)), t);
    if (!r.ok) return c;
  }
  return 0;
}

TEST(MropeSession, EachFaultIsCaught) {
  std::vector<std::pair<std::string, std::function<std::unique_ptr<SessionTarget>()>>> faults{
      {"verify advances by T", [] { return std::make_unique<Faulty>(true, nullptr); }},
      {"padding at the last real position + 1",
       [] {
         return std::make_unique<Faulty>(false, [](const std::vector<SessionRow>& rows, StepAnswer& a) {
           const std::int64_t N = static_cast<std::int64_t>(a.index.size());
           std::int64_t real = 0;
           for (const auto& r : rows) real += r.kind == RowKind::Pad ? 0 : r.tokens;
           for (std::int64_t t = real; t < N && real > 0; ++t)
             for (int ax = 0; ax < 3; ++ax)
               a.positions[static_cast<std::size_t>(ax * N + t)] = a.positions[static_cast<std::size_t>(ax * N + real - 1)] + 1 + t - real;
         });
       }},
      {"index from the rope coordinate",
       [] {
         return std::make_unique<Faulty>(false, [](const std::vector<SessionRow>&, StepAnswer& a) {
           for (std::size_t t = 0; t < a.index.size(); ++t)
             if (a.index[t] >= 0) a.index[t] = a.positions[t];
         });
       }},
      {"accepted counts paired with the verify rows by order",
       [] { return std::make_unique<Faulty>(false, nullptr, true); }},
      {"a cos/sin cache of 256 positions, clamped (long contexts: prefix hits)",
       [] {
         return std::make_unique<Faulty>(
             false, nullptr, false,
             [](const Rotary& rot, const std::vector<std::int64_t>& positions, std::int64_t heads, const std::vector<float>& x) {
               const std::size_t N = positions.size() / 3;
               std::vector<Pos3> pos(N);
               for (std::size_t t = 0; t < N; ++t)
                 for (int ax = 0; ax < 3; ++ax) pos[t][ax] = std::min<std::int64_t>(positions[ax * N + t], 255);
               return rotate(rot, pos, heads, x);
             });
       }},
      {"one q_rot element off by 0.01 (far above the rotary bound)",
       [] {
         return std::make_unique<Faulty>(false, [](const std::vector<SessionRow>&, StepAnswer& a) {
           if (!a.q_rot.empty()) a.q_rot[a.q_rot.size() / 3] += 0.01f;
         });
       }}};
  for (auto& [name, make] : faults) {
    for (const auto& m : preset_names()) {
      auto t = make();
      EXPECT_GT(cases_to_catch(*t, m, 3), 0) << name << " on " << m << " is never caught in 30 cases";
    }
  }
  // A perturbation well inside the bound is not a failure: the judge is a tolerance, not bit equality.
  auto inside = std::make_unique<Faulty>(false, [](const std::vector<SessionRow>&, StepAnswer& a) {
    const std::size_t per = a.k_rot.size() / a.index.size();
    for (std::size_t e = 0; e < a.k_rot.size(); ++e)
      if (a.index[e / per] >= 0) a.k_rot[e] = std::nextafter(a.k_rot[e], 2.0f);  // real tokens: one ulp
  });
  EXPECT_EQ(cases_to_catch(*inside, "qwen3.5", 4), 0);
}

}  // namespace
