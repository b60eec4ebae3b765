// replayssm/reference/ring_fixture.hpp — ring-step fixtures (op "ring.step", docs/fixture-format.md section
// 10): one verify + commit of one slot of a spec ring (spec_ring.hpp), for implementations of the
// corrected-update design that keep their own checkpoint, records and cursors.
//
//   in.checkpoint [state]            in.rec.u [P, HV, V] in.rec.k [P, H, K] (record dtype), in.rec.g [P, HV, a_width] F32
//   in.cursors I32 [3]               (base, write_pos, is_flush) before the step
//   in.q/k/v/a/b [T, ...] (act)      the window's tokens; in.accepted I32 scalar: n in [0, T]
//   param.A_log [HV], param.dt_bias [HV] (GDN) or [HV, K] (KDA)
//   -> out.o [T, HV, V] (act)        out.checkpoint [state] after the step (the history folded on a flush)
//      out.window.u/k/g [T, ...]     the window's records, stored at logical positions base + write_pos + t
//      out.cursors I32 [3]           after spec_ring_commit(n)
//      out.committed [state] F32     the committed state after the commit (checkpoint + history)
// config: {"model": ModelConfig, "args": {"ring_B", "ring_T", "recon": "serial", "record_dtype"}}.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "replayssm/reference/golden.hpp"

namespace replayssm::ref {

inline constexpr const char* kRingStepOp = "ring.step";

// Runs the step of a ring.step fixture's inputs; Error naming the tensor or config key for a missing input,
// a wrong dtype or shape, or cursors that are not the ring's (a history longer than the ring, is_flush not
// what spec_ring_commit would have set).
std::map<std::string, Tensor> run_ring_step(const nlohmann::json& config, const std::map<std::string, Tensor>& t);

// The ring.step cases of a model configuration: a partial accept appending to the history, a flush that
// wraps around the physical ring, and a flush with n = 0 on BF16 records. Tolerances: the fp32 tier against
// the F32 reference (tier.hpp, scale max|ref| of the tensor); with BF16 records, the bf16 storage bound
// (storage_tolerance) for whatever depends on a rounded record.
std::vector<GoldenCase> ring_step_cases(const ModelConfig& cfg, std::uint64_t seed);
// Writes them into dir (created if needed), one file per case. Returns the paths.
std::vector<std::string> write_ring_set(const ModelConfig& cfg, std::uint64_t seed, const std::string& dir);

}  // namespace replayssm::ref
