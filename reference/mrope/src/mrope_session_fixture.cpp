// MRoPE traces (mrope_session.hpp): a drawn session case stored as a fixture of op "mrope.session", its
// inputs read back, and its expected outputs recomputed by the oracle.
#include <algorithm>
#include <cmath>

#include "replayssm/error.hpp"
#include "replayssm/mrope/mrope_fixture.hpp"
#include "replayssm/mrope/mrope_session.hpp"

namespace replayssm::mrope {

namespace {

std::string name_of(std::size_t c, const char* what) { return "out." + std::to_string(c) + "." + what; }

// The expected tensors and tolerances of every step of `sc` with the inputs `in`.
void expected(const SessionCase& sc, const StepInputs& in, std::map<std::string, Tensor>& out,
              std::map<std::string, Tolerance>* tol) {
  SessionOracle o(sc.preset, sc.q_heads, sc.k_heads);
  const std::int64_t D = sc.preset.head_dim;
  for (std::size_t c = 0; c < sc.commands.size(); ++c) {
    const SessionCommand& cmd = sc.commands[c];
    std::vector<float> q, k;
    if (cmd.op == SessionCommand::Op::Step) std::tie(q, k) = in(c);
    const auto a = o.apply(cmd, q, k, "config.commands[" + std::to_string(c) + "]");
    if (!a) continue;
    const std::int64_t N = cmd.tokens();
    out[name_of(c, "positions")] = Tensor::from_i64({3, N}, a->positions);
    out[name_of(c, "index")] = Tensor::from_i64({N}, a->index);
    out[name_of(c, "q_rot")] = Tensor::from_f32(DType::F32, {N, sc.q_heads, D}, a->q_rot);
    out[name_of(c, "k_rot")] = Tensor::from_f32(DType::F32, {N, sc.k_heads, D}, a->k_rot);
    if (!tol) continue;
    std::int64_t P = 0;
    for (std::int64_t t = 0; t < N; ++t)
      if (a->index[static_cast<std::size_t>(t)] >= 0)
        for (int ax = 0; ax < 3; ++ax) P = std::max(P, std::abs(a->positions[static_cast<std::size_t>(ax * N + t)]));
    double maxx = 0;
    for (float x : q) maxx = std::max(maxx, std::fabs(static_cast<double>(x)));
    for (float x : k) maxx = std::max(maxx, std::fabs(static_cast<double>(x)));
    (*tol)[name_of(c, "positions")] = Tolerance::exact();
    (*tol)[name_of(c, "index")] = Tolerance::exact();
    (*tol)[name_of(c, "q_rot")] = rotary_tolerance(P, maxx);
    (*tol)[name_of(c, "k_rot")] = rotary_tolerance(P, maxx);
  }
}

}  // namespace

Fixture session_fixture(const SessionCase& sc) {
  Fixture f;
  f.op = kSessionOp;
  f.config = nlohmann::json::parse(sc.to_json().dump());
  f.seed = sc.seed;
  f.precision = "f64";
  const std::int64_t D = sc.preset.head_dim;
  for (std::size_t c = 0; c < sc.commands.size(); ++c) {
    if (sc.commands[c].op != SessionCommand::Op::Step) continue;
    const std::int64_t N = sc.commands[c].tokens();
    const auto [q, k] = step_inputs(sc, c);
    f.tensors["in." + std::to_string(c) + ".q"] = Tensor::from_f32(DType::F32, {N, sc.q_heads, D}, q);
    f.tensors["in." + std::to_string(c) + ".k"] = Tensor::from_f32(DType::F32, {N, sc.k_heads, D}, k);
  }
  expected(sc, [&](std::size_t c) { return step_inputs(sc, c); }, f.tensors, &f.tolerance);
  return f;
}

SessionCase session_case_of(const Fixture& f) {
  require(f.op == kSessionOp, "op", "is '", f.op, "', expected ", kSessionOp);
  return SessionCase::from_json(f.config, "config");
}

StepInputs stored_inputs(const Fixture& f) {
  const SessionCase sc = session_case_of(f);
  return [sc, &f](std::size_t c) {
    const std::int64_t N = sc.commands.at(c).tokens(), D = sc.preset.head_dim;
    const std::string p = "in." + std::to_string(c) + ".";
    return std::make_pair(f.tensor(p + "q", DType::F32, {N, sc.q_heads, D}).to_f32(),
                          f.tensor(p + "k", DType::F32, {N, sc.k_heads, D}).to_f32());
  };
}

std::map<std::string, Tensor> session_fixture_outputs(const Fixture& f) {
  const SessionCase sc = session_case_of(f);
  std::map<std::string, Tensor> out;
  expected(sc, stored_inputs(f), out, nullptr);
  return out;
}

}  // namespace replayssm::mrope
