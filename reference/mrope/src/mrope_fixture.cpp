// MRoPE fixture tensors: a seeded request, positions and rotated q/k for one preset.
#include "replayssm/mrope/mrope_fixture.hpp"

#include <algorithm>
#include <cmath>

#include "replayssm/mrope/mrope_json.hpp"
#include "replayssm/rng.hpp"

namespace replayssm::mrope {

Request fixture_request(const Preset& preset, std::uint64_t seed, std::int64_t* generated) {
  Rng rng(derive_seed(seed, 1));
  const std::int64_t S = preset.spatial_merge_size;
  Request req;
  req.segments.push_back(Segment::text(rng.uniform_int(1, 6)));
  const std::int64_t items = rng.uniform_int(1, 3);
  for (std::int64_t i = 0; i < items; ++i) {
    if (rng.uniform_int(0, 1) == 0) {
      req.segments.push_back(Segment::image(1, S * rng.uniform_int(1, 4), S * rng.uniform_int(1, 4)));
    } else {
      const std::int64_t T = rng.uniform_int(1, 3);
      Segment v = Segment::video(T, S * rng.uniform_int(1, 3), S * rng.uniform_int(1, 3));
      // Timing is given for every model (it only matters for the scaled-time rule); half the videos use fps.
      static const double kFps[] = {1.0, 2.0, 3.0, 4.0, 8.0};
      const double fps = kFps[rng.uniform_int(0, 4)];
      if (rng.uniform_int(0, 1) == 0) {
        v.fps = fps;
      } else {
        v.second_per_grid = static_cast<double>(preset.temporal_patch_size) / fps;
      }
      if (preset.video_rule == VideoRule::PerFrame) {
        for (std::int64_t f = 0; f < T; ++f) v.frame_text.push_back(rng.uniform_int(2, 5));
      }
      req.segments.push_back(v);
    }
    req.segments.push_back(Segment::text(rng.uniform_int(1, 4)));
  }
  if (generated) *generated = rng.uniform_int(1, 6);
  return req;
}

Tolerance rotary_tolerance(std::int64_t max_abs_position, double max_abs_input) {
  const double pair = std::sqrt(2.0) * max_abs_input;
  const double atol = pair * (std::ldexp(1.0, -22) * static_cast<double>(max_abs_position + 1) + std::ldexp(1.0, -21));
  return Tolerance::allclose(atol, 0.0);
}

MropeFixture mrope_fixture(const std::string& model, std::uint64_t seed) {
  const Preset preset = get_preset(model);
  MropeFixture fx;
  fx.model = model;
  fx.seed = seed;
  std::int64_t generated = 0;
  const Request req = fixture_request(preset, seed, &generated);
  const PromptPlan plan(preset, req);
  const std::int64_t N = plan.prompt_len() + generated;
  const std::vector<Pos3> pos = plan.positions(0, N);

  {
    nlohmann::ordered_json doc = request_to_json(req);
    doc["generated"] = generated;
    fx.request_json = doc.dump();
  }

  // Inputs: the request.
  std::vector<std::int64_t> seg, frame_text;
  std::vector<double> spg;
  for (const Segment& s : req.segments) {
    if (s.kind == SegmentKind::Text) {
      seg.insert(seg.end(), {0, s.length, 0, 0});
    } else {
      seg.insert(seg.end(), {s.kind == SegmentKind::Image ? 1 : 2, s.grid[0], s.grid[1], s.grid[2]});
    }
    double v = -1.0;
    if (s.kind == SegmentKind::Video) {
      if (s.second_per_grid) v = *s.second_per_grid;
      else if (s.fps) v = static_cast<double>(preset.temporal_patch_size) / *s.fps;
    }
    spg.push_back(v);
    frame_text.insert(frame_text.end(), s.frame_text.begin(), s.frame_text.end());
  }
  const auto S = static_cast<std::int64_t>(req.segments.size());
  fx.tensors["in.segments"] = Tensor::from_i64({S, 4}, seg);
  fx.tensors["in.second_per_grid"] = Tensor::from_f64(DType::F64, {S}, spg);
  fx.tensors["in.frame_text"] = Tensor::from_i64({static_cast<std::int64_t>(frame_text.size())}, frame_text);
  fx.tensors["in.generated"] = Tensor::from_i64({}, {generated});

  // Inputs: the rotary configuration.
  const Rotary rot = Rotary::from(preset);
  fx.tensors["in.head_dim"] = Tensor::from_i64({}, {rot.head_dim});
  fx.tensors["in.rotary_dim"] = Tensor::from_i64({}, {rot.rotary_dim});
  fx.tensors["in.spatial_merge_size"] = Tensor::from_i64({}, {preset.spatial_merge_size});
  fx.tensors["in.interleaved"] = Tensor::from_i64({}, {rot.layout == Layout::Interleaved ? 1 : 0});
  fx.tensors["in.mrope_section"] = Tensor::from_i64({3}, {rot.section[0], rot.section[1], rot.section[2]});
  fx.tensors["in.rope_theta"] = Tensor::from_f64(DType::F64, {}, {rot.theta});
  fx.tensors["in.tokens_per_second"] = Tensor::from_f64(DType::F64, {}, {preset.tokens_per_second});

  // Inputs: q (2 heads) and k (1 head), each tensor from its own stream.
  const std::int64_t hq = 2, hk = 1, D = rot.head_dim;
  auto draw = [&](std::uint64_t stream, std::int64_t heads) {
    Rng r(derive_seed(seed, stream));
    std::vector<float> v(static_cast<std::size_t>(N * heads * D));
    for (float& x : v) x = r.normalish();
    return v;
  };
  const std::vector<float> q = draw(2, hq), k = draw(3, hk);
  fx.tensors["in.q"] = Tensor::from_f32(DType::F32, {N, hq, D}, q);
  fx.tensors["in.k"] = Tensor::from_f32(DType::F32, {N, hk, D}, k);

  // Expected outputs.
  std::vector<std::int64_t> rows(static_cast<std::size_t>(3 * N));
  std::int64_t max_pos = 0;
  for (std::int64_t n = 0; n < N; ++n) {
    for (int a = 0; a < 3; ++a) {
      const std::int64_t p = pos[static_cast<std::size_t>(n)][static_cast<std::size_t>(a)];
      rows[static_cast<std::size_t>(a * N + n)] = p;
      max_pos = std::max(max_pos, std::abs(p));
    }
  }
  fx.tensors["out.positions"] = Tensor::from_i64({3, N}, rows);
  fx.tensors["out.delta"] = Tensor::from_i64({}, {plan.delta()});
  fx.tensors["out.prompt_len"] = Tensor::from_i64({}, {plan.prompt_len()});
  fx.tensors["out.q_rot"] = Tensor::from_f32(DType::F32, {N, hq, D}, rotate(rot, pos, hq, q));
  fx.tensors["out.k_rot"] = Tensor::from_f32(DType::F32, {N, hk, D}, rotate(rot, pos, hk, k));

  double max_in = 0.0;
  for (float x : q) max_in = std::max(max_in, static_cast<double>(std::fabs(x)));
  for (float x : k) max_in = std::max(max_in, static_cast<double>(std::fabs(x)));
  fx.tolerance["out.positions"] = Tolerance::exact();
  fx.tolerance["out.delta"] = Tolerance::exact();
  fx.tolerance["out.prompt_len"] = Tolerance::exact();
  fx.tolerance["out.q_rot"] = rotary_tolerance(max_pos, max_in);
  fx.tolerance["out.k_rot"] = rotary_tolerance(max_pos, max_in);
  return fx;
}

std::map<std::string, Tensor> mrope_fixture_tensors(const std::string& model, std::uint64_t seed) {
  return mrope_fixture(model, seed).tensors;
}

}  // namespace replayssm::mrope
