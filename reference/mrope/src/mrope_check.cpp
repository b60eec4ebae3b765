// MRoPE fixtures in the golden set: their fixture files (through mrope_fixture) and re-computing their out.*
// tensors from their in.* tensors for `replayssm check`.
#include <cmath>

#include "replayssm/error.hpp"
#include "replayssm/mrope/mrope.hpp"
#include "replayssm/mrope/mrope_fixture.hpp"
#include "replayssm/mrope/mrope_session.hpp"

namespace replayssm::mrope {

namespace {
// Largest head_dim and spatial merge size a fixture may declare (real models: 64..256 and 2).
constexpr std::int64_t kMaxFixtureDim = 1 << 16;

std::int64_t scalar_i(const Fixture& f, const std::string& name) {
  const Tensor& t = f.tensor(name);
  require(t.shape.empty(), name, "must be a scalar");
  return t.to_i64()[0];
}
// An integer scalar in [lo, hi]: never narrowed by a cast (2^32 + 128 is refused, not read as 128).
std::int64_t scalar_in(const Fixture& f, const std::string& name, std::int64_t lo, std::int64_t hi) {
  const std::int64_t v = scalar_i(f, name);
  require(v >= lo && v <= hi, name, "is ", v, ", outside [", lo, ", ", hi, "]");
  return v;
}
double scalar_f(const Fixture& f, const std::string& name) {
  const Tensor& t = f.tensor(name);
  require(t.shape.empty(), name, "must be a scalar");
  return t.to_f64()[0];
}
}  // namespace

Fixture to_fixture(const MropeFixture& mf) {
  Fixture f;
  f.op = "mrope.rotary";
  f.config = nlohmann::json{{"model", mf.model}, {"request", nlohmann::json::parse(mf.request_json)}};
  f.seed = mf.seed;
  f.precision = "f64";
  f.tensors = mf.tensors;
  f.tolerance = mf.tolerance;
  return f;
}

std::map<std::string, Tensor> fixture_outputs(const Fixture& f) {
  if (f.op == kSessionOp) return session_fixture_outputs(f);
  require(f.op == "mrope.rotary", "op", "unknown MRoPE operation '", f.op, "'");
  require(f.config.is_object() && f.config.contains("model") && f.config.at("model").is_string(), "config.model",
          "must name the MRoPE preset");
  Preset preset = get_preset(f.config.at("model").get<std::string>());
  preset.spatial_merge_size = static_cast<int>(scalar_in(f, "in.spatial_merge_size", 1, kMaxFixtureDim));
  preset.tokens_per_second = scalar_f(f, "in.tokens_per_second");
  const Tensor& seg_t = f.tensor("in.segments");
  require(seg_t.shape.size() == 2 && seg_t.shape[1] == 4, "in.segments", "must be [S, 4]");
  const auto seg = seg_t.to_i64();
  const auto spg = f.tensor("in.second_per_grid", DType::F64, {seg_t.shape[0]}).to_f64();
  const auto ft = f.tensor("in.frame_text").to_i64();
  Request req;
  std::size_t ft_pos = 0;
  for (std::int64_t s = 0; s < seg_t.shape[0]; ++s) {
    const std::int64_t kind = seg[s * 4], a = seg[s * 4 + 1], b = seg[s * 4 + 2], c = seg[s * 4 + 3];
    const std::string field = "in.segments[" + std::to_string(s) + "]";
    if (kind == 0) {
      req.segments.push_back(Segment::text(a));
    } else if (kind == 1) {
      req.segments.push_back(Segment::image(a, b, c));
    } else if (kind == 2) {
      Segment v = Segment::video(a, b, c);
      if (spg[static_cast<std::size_t>(s)] >= 0) v.second_per_grid = spg[static_cast<std::size_t>(s)];
      if (preset.video_rule == VideoRule::PerFrame && !ft.empty()) {
        require(ft_pos + static_cast<std::size_t>(a) <= ft.size(), "in.frame_text", "has too few entries");
        v.frame_text.assign(ft.begin() + static_cast<std::ptrdiff_t>(ft_pos),
                            ft.begin() + static_cast<std::ptrdiff_t>(ft_pos + a));
        ft_pos += static_cast<std::size_t>(a);
      }
      req.segments.push_back(v);
    } else {
      fail(field, "unknown segment kind ", kind, " (0 text, 1 image, 2 video)");
    }
  }
  require(ft_pos == ft.size(), "in.frame_text", "has ", ft.size() - ft_pos, " unused entries");
  validate(preset, req, "in.segments");
  Rotary rot;
  rot.head_dim = static_cast<int>(scalar_in(f, "in.head_dim", 2, kMaxFixtureDim));
  rot.rotary_dim = static_cast<int>(scalar_in(f, "in.rotary_dim", 2, rot.head_dim));
  rot.theta = scalar_f(f, "in.rope_theta");
  const auto sec = f.tensor("in.mrope_section", DType::I64, {3}).to_i64();
  for (std::size_t a = 0; a < 3; ++a)
    require(sec[a] >= 0 && sec[a] <= rot.rotary_dim / 2, "in.mrope_section", "entry ", a, " is ", sec[a],
            ", outside [0, rotary_dim / 2 = ", rot.rotary_dim / 2, "]");
  rot.section = {static_cast<int>(sec[0]), static_cast<int>(sec[1]), static_cast<int>(sec[2])};
  rot.layout = scalar_in(f, "in.interleaved", 0, 1) ? Layout::Interleaved : Layout::Chunked;
  const PromptPlan plan(preset, req);
  const std::int64_t N = plan.prompt_len() + scalar_in(f, "in.generated", 0, kMaxTokens);
  // The inputs' shapes first: N positions are computed only for a fixture that holds N tokens.
  const Tensor& q = f.tensor("in.q");
  const Tensor& k = f.tensor("in.k");
  require(q.shape.size() == 3 && q.shape[0] == N && q.shape[1] >= 1 && q.shape[2] == rot.head_dim, "in.q",
          "must be [N, heads >= 1, head_dim]");
  require(k.shape.size() == 3 && k.shape[0] == N && k.shape[1] >= 1 && k.shape[2] == rot.head_dim, "in.k",
          "must be [N, heads >= 1, head_dim]");
  const auto pos = plan.positions(0, N);
  std::vector<std::int64_t> rows(static_cast<std::size_t>(3 * N));
  for (std::int64_t n = 0; n < N; ++n)
    for (int ax = 0; ax < 3; ++ax) rows[static_cast<std::size_t>(ax * N + n)] = pos[static_cast<std::size_t>(n)][static_cast<std::size_t>(ax)];
  std::map<std::string, Tensor> out;
  out["out.positions"] = Tensor::from_i64({3, N}, rows);
  out["out.delta"] = Tensor::from_i64({}, {plan.delta()});
  out["out.prompt_len"] = Tensor::from_i64({}, {plan.prompt_len()});
  out["out.q_rot"] = Tensor::from_f32(DType::F32, q.shape, rotate(rot, pos, q.shape[1], q.to_f32()));
  out["out.k_rot"] = Tensor::from_f32(DType::F32, k.shape, rotate(rot, pos, k.shape[1], k.to_f32()));
  return out;
}

}  // namespace replayssm::mrope
