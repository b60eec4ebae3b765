// replayssm/mrope/mrope_fixture.hpp — MRoPE fixture tensors for the golden set.
//
// One fixture = one generated request (text, images and videos drawn from the seed with the portable Rng),
// `generated` decode tokens after it, and q/k head vectors for every token. Tensors (row-major):
//   in.segments         I64 [S, 4]   per segment (kind, a, b, c): text (0, length, 0, 0), image (1, T, H, W),
//                                    video (2, T, H, W); grids in patches before the spatial merge
//   in.second_per_grid  F64 [S]      a video's seconds per temporal grid step (temporal_patch_size / fps when
//                                    the request gives fps); -1 for text, images and videos without timing
//   in.frame_text       I64 [F]      per-frame models: text tokens before each frame, videos in order
//   in.generated        I64 []       decode tokens after the prompt
//   in.head_dim, in.rotary_dim, in.spatial_merge_size, in.interleaved (0/1)   I64 []
//   in.mrope_section    I64 [3]
//   in.rope_theta, in.tokens_per_second                                     F64 []
//   in.q                F32 [N, 2, head_dim]   N = prompt_len + generated
//   in.k                F32 [N, 1, head_dim]
//   out.positions       I64 [3, N]   rows t, h, w
//   out.delta           I64 []
//   out.prompt_len      I64 []
//   out.q_rot, out.k_rot F32 [N, heads, head_dim]
//
// Tolerances: positions, delta and prompt_len are exact (integers; any difference is a bug). q_rot / k_rot
// come from the double-precision path rounded once to binary32; an implementation that computes in binary32
// (inv_freq, angle = pos * inv_freq, cos/sin, the two products and the sum) differs mostly through the
// rounding of the angle, which grows with the position. rotary_tolerance() states the bound used: allclose
// with atol = sqrt(2) * max|x| * (2^-22 * (P + 1) + 2^-21) and rtol 0, P = the largest position of the
// fixture. That is about twice a first-order bound on the binary32 path (angle error ~ 1.5 * 2^-23 * P from
// rounding inv_freq and the product, plus a few ulps from cos/sin and the products) and about 6x the worst
// error measured for rotate_f32_engine, at fixture positions and at positions up to 2^18 (test
// MropeRotary.Binary32EnginePath*). Bugs that matter (wrong axis, pairing, frequency, position off by one)
// produce errors of order |x|, far above it. Dims >= rotary_dim are copied, so an implementation should
// reproduce them bit for bit (the allclose check above only bounds them).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "replayssm/compare.hpp"
#include "replayssm/fixture.hpp"
#include "replayssm/mrope/mrope.hpp"
#include "replayssm/tensor.hpp"

namespace replayssm::mrope {

struct MropeFixture {
  std::string model;
  std::uint64_t seed = 0;
  std::string request_json;                      // the request in the CLI format (with "generated")
  std::map<std::string, Tensor> tensors;         // the names above
  std::map<std::string, Tolerance> tolerance;    // one entry per out.* tensor
};

// The request a fixture is built from (deterministic in model and seed).
Request fixture_request(const Preset& preset, std::uint64_t seed, std::int64_t* generated);

// Builds the fixture for a preset name ("qwen2-vl", "qwen2.5-vl", "qwen3-vl", "qwen3.5") and seed.
// Throws Error("model") for an unknown name.
MropeFixture mrope_fixture(const std::string& model, std::uint64_t seed);
// The tensors of mrope_fixture(model, seed).
std::map<std::string, Tensor> mrope_fixture_tensors(const std::string& model, std::uint64_t seed);

// allclose tolerance for rotated vectors with positions up to max_abs_position and inputs up to max_abs_input
// (formula above).
Tolerance rotary_tolerance(std::int64_t max_abs_position, double max_abs_input);

// The fixture file of mf: op "mrope.rotary", config {"model": mf.model, "request": the request document},
// mf.seed, precision "f64", mf's tensors and tolerances (docs/fixture-format.md).
Fixture to_fixture(const MropeFixture& mf);
// Recomputes out.positions, out.delta, out.prompt_len, out.q_rot and out.k_rot from the in.* tensors of an
// "mrope.rotary" fixture (what `replayssm check` compares); an "mrope.session" trace is recomputed by
// session_fixture_outputs (mrope_session.hpp). Throws Error("op") for another MRoPE operation and
// Error naming the tensor or config field for a missing or malformed input.
std::map<std::string, Tensor> fixture_outputs(const Fixture& f);

}  // namespace replayssm::mrope
