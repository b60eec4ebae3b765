// replayssm/reference/golden.hpp — golden cases: seeded inputs plus the reference's expected outputs, for
// every operation an engine's kernels must reproduce. One function (run_golden_op) both generates the
// expected tensors and re-checks them, so the generator and `replayssm check` cannot drift apart.
//
// Operations (config.op selects GDN or KDA math):
//   recurrent      in.q in.k in.v in.a in.b in.state param.A_log param.dt_bias -> out.o out.state
//   chunked        same inputs, args.chunk                                      -> out.o out.state
//   mtp_verify     same inputs (T = window)                                     -> out.o out.states [T, HV, ...]
//   replay_commit  in.k in.v in.a in.b in.state in.accepted (I32 scalar)        -> out.state
//   mtp_batch      in.pool [slots, HV, ...] in.slot [B] (I32, -1 = PAD) in.accepted [B] + per-row tokens
//                  in.q/k/v/a/b [B, T, ...]                                     -> out.o [B, T, HV, V] out.pool
// Expected values come from the double "truth" path, stored as F32 (states in the state dtype).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "replayssm/compare.hpp"
#include "replayssm/config.hpp"
#include "replayssm/tensor.hpp"

namespace replayssm::ref {

struct GoldenCase {
  std::string name;        // file stem, e.g. "qwen3.5__recurrent__T12"
  std::string op;          // "recurrent", "chunked", ...
  nlohmann::json config;   // {"model": ModelConfig JSON, "args": {...}}
  std::uint64_t seed = 0;
  std::map<std::string, Tensor> tensors;           // in.*, param.*, out.*
  std::map<std::string, Tolerance> tolerance;      // one entry per out.* tensor
};

// The golden set of a model configuration (dimensions as given: presets keep their real sizes).
std::vector<GoldenCase> golden_cases(const ModelConfig& cfg, std::uint64_t seed);

// Runs `op` on the in.* / param.* tensors and returns the out.* tensors. Throws Error naming the tensor
// for a missing input or a wrong dtype/shape, and Error("op") for an unknown operation.
std::map<std::string, Tensor> run_golden_op(const std::string& op, const nlohmann::json& config,
                                            const std::map<std::string, Tensor>& tensors);

std::vector<std::string> golden_ops();

// --- building cases ---------------------------------------------------------------------------------------
// Tolerances of the golden set: what an implementation's kernel must meet against the f64 truth.
//   F32 storage: allclose(1e-5, 1e-4) (fp32 accumulation over K terms); BF16 storage: allclose(2e-3, 8e-3)
//   (one bf16 rounding, 2^-9, plus fp32 noise, with margin). out.o follows act_dtype, states state_dtype.
Tolerance golden_output_tolerance(const ModelConfig& c);
Tolerance golden_state_tolerance(const ModelConfig& c);

// Writes the in.* / param.* tensors of a case (g.seed is set before it is called).
using GoldenFill = std::function<void(GoldenCase&, const ModelConfig&)>;
// One case: config {"model": to_json(c), "args": args}; `fill` writes the inputs, run_golden_op the outputs,
// each out.* gets the tolerance above.
GoldenCase make_golden_case(const std::string& op, const ModelConfig& c, const nlohmann::json& args,
                            const std::string& name, std::uint64_t seed, const GoldenFill& fill);
// Seeded q, k, v, a, b for T tokens, layer parameters and a random initial state (recurrent, chunked,
// mtp_verify).
GoldenFill sequence_fill(int T);
// mtp_batch inputs: B = slot.size() rows of T tokens each, a pool of `slots` slots filled with the marker 1e30
// except the slots the rows read (random states); slot -1 is a PAD row; accepted[r] in [0, T].
GoldenFill batch_fill(int T, int slots, std::vector<std::int32_t> slot, std::vector<std::int32_t> accepted);

// --- golden matrices ---------------------------------------------------------------------------------------
// Named sets of cases whose shapes follow public test suites rather than one model preset (golden_matrix.cpp).
//   "public": FLA test_gdn / test_kda (B, T, H, HV, D) shapes, D in {60, 64, 100, 128}, GVA up to 4 (8 in the
//             recurrent lists); FlashInfer MTP verify windows T in {2, 4, 8} with batch 1..16 and a pool larger
//             than the batch; GVA ratios 1, 2, 3, 4, 8 with K != V. Sequence lengths are cut to keep the files
//             small; config.args.public_shape records the shape each case stands for.
std::vector<std::string> matrix_names();
// Throws Error("matrix") for an unknown name.
std::vector<GoldenCase> matrix_cases(const std::string& name, std::uint64_t seed);

}  // namespace replayssm::ref

#include <optional>

#include "replayssm/fixture.hpp"
#include "replayssm/tier.hpp"

namespace replayssm::ref {

// The fixture file of a golden case (metadata per docs/fixture-format.md, precision "f64").
Fixture to_fixture(const GoldenCase& g);

// Writes the golden set of cfg into dir (created if needed), one file per case, each written atomically,
// plus the MRoPE fixtures of every MRoPE preset in dir/mrope. Returns the paths written.
std::vector<std::string> write_golden_set(const ModelConfig& cfg, std::uint64_t seed, const std::string& dir);

struct TensorCheck {
  std::string name;
  Tolerance tolerance;
  CompareReport report;
};
struct FixtureCheck {
  std::string path;
  std::string op;
  bool ok = false;
  std::string error;  // set when the file could not be checked at all (corrupt, unknown op, ...)
  std::vector<TensorCheck> tensors;
  nlohmann::json to_json() const;
};

// Re-runs the reference on a fixture's inputs and compares every out.* tensor under its tolerance; a trace
// (op lifecycle.trace) is replayed through the oracle (trace_replay.hpp), at `tier` when given (traces only).
// Never throws for a bad file: the problem is reported in FixtureCheck::error.
FixtureCheck check_fixture_file(const std::string& path, std::optional<Tier> tier = std::nullopt);
// The same for a fixture already in memory (`path` is only reported). Never throws. A refusal is an Error
// naming the field; any other exception is reported with kInternalErrorPrefix (a defect of the checker).
inline constexpr const char* kInternalErrorPrefix = "internal error: ";
FixtureCheck check_fixture(const Fixture& f, const std::string& path = "<memory>",
                           std::optional<Tier> tier = std::nullopt);

// Limits on a fixture's own tolerances: one looser than any claim the project makes would let anything
// pass, so such an expectation is a failure. The absolute part scales with the data: allclose atol <=
// kMaxAtolFraction * max(1, M), M = the largest finite |value| of the expected tensor (a rotary fixture at
// long positions with |x| ~ 4 legitimately needs atol ~ 0.1 * |x|; an atol of 10 on data of magnitude 1 is
// still refused); allclose rtol <= kMaxRtol; rel_rms ratio <= kMaxRelRms; a budget tolerance obeys both the
// atol and the rel_rms limit.
inline constexpr double kMaxAtolFraction = 0.1;
inline constexpr double kMaxRtol = 0.1;
inline constexpr double kMaxRelRms = 0.05;
// "" when `tol` is within the limits for an expected tensor of magnitude M, else why not.
std::string tolerance_too_loose(const Tolerance& tol, double magnitude);

// MRoPE fixtures ("mrope.rotary": positions, delta and rotated q/k of one generated multimodal request per
// MRoPE preset, see replayssm/mrope/mrope_fixture.hpp) written into dir; write_golden_set includes them under
// mrope/.
std::vector<std::string> write_mrope_fixtures(std::uint64_t seed, const std::string& dir);

// Writes the cases of a golden matrix into dir (created if needed), one file per case. Returns the paths.
std::vector<std::string> write_matrix_set(const std::string& name, std::uint64_t seed, const std::string& dir);

}  // namespace replayssm::ref
