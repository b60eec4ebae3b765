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

}  // namespace replayssm::ref

#include "replayssm/fixture.hpp"

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

// Re-runs the reference on a fixture's inputs and compares every out.* tensor under its tolerance.
// Never throws for a bad file: the problem is reported in FixtureCheck::error.
FixtureCheck check_fixture_file(const std::string& path);

// MRoPE fixtures ("mrope.rotary": positions, delta and rotated q/k of one generated multimodal request per
// MRoPE preset, see mrope_fixture.hpp) written into dir; write_golden_set includes them under mrope/.
std::vector<std::string> write_mrope_fixtures(std::uint64_t seed, const std::string& dir);

}  // namespace replayssm::ref
