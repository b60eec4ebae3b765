// ring.step fixtures (ring_fixture.hpp): cases made by running a spec-ring slot through a few verify + commit
// steps, then recording one more; the check re-runs that one step.
#include "replayssm/reference/ring_fixture.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "replayssm/error.hpp"
#include "replayssm/reference/inputs.hpp"
#include "replayssm/reference/spec_ring.hpp"
#include "replayssm/reference/target.hpp"
#include "replayssm/rng.hpp"
#include "replayssm/tier.hpp"

namespace replayssm::ref {

namespace {

Shape state_shape(const ModelConfig& c) {
  return c.layout == StateLayout::KV ? Shape{c.HV, c.K, c.V} : Shape{c.HV, c.V, c.K};
}
Shape dt_shape(const ModelConfig& c) { return c.op == Op::GDN ? Shape{c.HV} : Shape{c.HV, c.K}; }
Shape a_shape(const ModelConfig& c, std::int64_t T) { return c.op == Op::GDN ? Shape{T, c.HV} : Shape{T, c.HV, c.K}; }

const Tensor& need(const std::map<std::string, Tensor>& t, const std::string& name, DType d, const Shape& s) {
  const auto it = t.find(name);
  require(it != t.end(), name, "tensor is missing");
  it->second.expect(d, s, name);
  return it->second;
}

struct RingArgs {
  SpecRingGeometry g;
  DType record_dtype = DType::F32;
  Reconstruction recon = Reconstruction::Serial;
};
RingArgs args_of(const nlohmann::json& config) {
  require(config.is_object() && config.contains("args") && config.at("args").is_object(), "config.args", "is missing");
  const auto& a = config.at("args");
  auto integer = [&](const char* k) {
    require(a.contains(k) && a.at(k).is_number_integer(), std::string("config.args.") + k, "is missing or not an integer");
    return a.at(k).get<std::int32_t>();
  };
  auto text = [&](const char* k) {
    require(a.contains(k) && a.at(k).is_string(), std::string("config.args.") + k, "is missing or not a string");
    return a.at(k).get<std::string>();
  };
  RingArgs r;
  r.g = SpecRingGeometry{integer("ring_B"), integer("ring_T")};
  try {
    r.g.validate();
  } catch (const Error& e) {
    fail("config.args", e.what());
  }
  r.record_dtype = parse_dtype(text("record_dtype"), "config.args.record_dtype");
  require(r.record_dtype == DType::F32 || r.record_dtype == DType::BF16, "config.args.record_dtype", "must be F32 or BF16");
  r.recon = parse_reconstruction(text("recon"), "config.args.recon");
  return r;
}

// Records <-> the three tensors (u, k, g), P or T of them.
struct RecordTensors {
  std::vector<float> u, k, g;
};
RecordTensors flatten(const ModelConfig& c, const std::vector<Record>& rs) {
  RecordTensors t;
  for (const auto& r : rs) {
    auto add = [](std::vector<float>& to, const std::vector<float>& x, std::size_t n) {
      if (x.empty()) to.insert(to.end(), n, 0.0f);  // a position never written: zeros
      else to.insert(to.end(), x.begin(), x.end());
    };
    add(t.u, r.u, static_cast<std::size_t>(c.HV) * c.V);
    add(t.k, r.k, static_cast<std::size_t>(c.H) * c.K);
    add(t.g, r.g, static_cast<std::size_t>(c.HV) * c.a_width());
  }
  return t;
}

std::vector<std::int32_t> cursor_values(const SpecRingCursors& c) { return {c.base, c.write_pos, c.is_flush ? 1 : 0}; }

// What an implementation must meet for an expected float tensor of a ring.step fixture (scale = max|ref|):
//   with BF16 records, whatever is computed from a rounded record (o, the window's u and k, the committed
//   state) may sit one bf16 rounding away: the storage bound;
//   otherwise the fp32 tier, with the bf16 stores the tensor really has: o in the activation dtype, the
//   checkpoint and the committed state in the state dtype, u through a bf16-rounded beta when the model rounds
//   it; k and g are F32 values computed from the inputs alone.
Tolerance ring_tolerance(const ModelConfig& cfg, DType record_dtype, const std::string& name, double scale) {
  const bool from_rounded_record =
      name == "out.o" || name == "out.window.u" || name == "out.window.k" || name == "out.committed";
  if (record_dtype == DType::BF16 && from_rounded_record) return storage_tolerance(scale);
  if (name == "out.o") return tier_tolerance(Tier::Fp32, cfg, scale, false);
  if (name == "out.checkpoint" || name == "out.committed") return tier_tolerance(Tier::Fp32, cfg, scale, true);
  ModelConfig f32_record = cfg;  // an F32 record: no bf16 store of its own
  f32_record.act_dtype = DType::F32;
  f32_record.state_dtype = DType::F32;
  f32_record.round_beta_to_act = cfg.round_beta_to_act && name == "out.window.u";
  return tier_tolerance(Tier::Fp32, f32_record, scale, false);
}

}  // namespace

std::map<std::string, Tensor> run_ring_step(const nlohmann::json& config, const std::map<std::string, Tensor>& t) {
  require(config.is_object() && config.contains("model"), "config.model", "is missing");
  const ModelConfig c = config_from_json(config.at("model"));
  const RingArgs a = args_of(config);
  const std::int64_t P = a.g.physical(), HV = c.HV, H = c.H;
  const std::size_t U = static_cast<std::size_t>(HV * c.V), Kn = static_cast<std::size_t>(H * c.K),
                    G = static_cast<std::size_t>(HV * c.a_width());
  std::vector<float> checkpoint = need(t, "in.checkpoint", c.state_dtype, state_shape(c)).to_f32();
  const auto u = need(t, "in.rec.u", a.record_dtype, {P, HV, c.V}).to_f32();
  const auto k = need(t, "in.rec.k", a.record_dtype, {P, H, c.K}).to_f32();
  const auto g = need(t, "in.rec.g", DType::F32, {P, HV, c.a_width()}).to_f32();
  std::vector<Record> records(static_cast<std::size_t>(P));
  for (std::size_t i = 0; i < records.size(); ++i) {
    records[i].u.assign(u.begin() + static_cast<std::ptrdiff_t>(i * U), u.begin() + static_cast<std::ptrdiff_t>((i + 1) * U));
    records[i].k.assign(k.begin() + static_cast<std::ptrdiff_t>(i * Kn), k.begin() + static_cast<std::ptrdiff_t>((i + 1) * Kn));
    records[i].g.assign(g.begin() + static_cast<std::ptrdiff_t>(i * G), g.begin() + static_cast<std::ptrdiff_t>((i + 1) * G));
  }
  const auto cv = need(t, "in.cursors", DType::I32, {3}).to_i64();
  SpecRingCursors cur{static_cast<std::int32_t>(cv[0]), static_cast<std::int32_t>(cv[1]), cv[2] != 0};
  require(cv[0] >= 0 && cv[0] < P, "in.cursors[0]", "base ", cv[0], " outside [0, P=", P, ")");
  require(cv[1] >= 0 && cv[1] <= a.g.B, "in.cursors[1]", "write_pos ", cv[1], " outside [0, B=", a.g.B, "]");
  require(cv[2] == (cur.write_pos + 2 * a.g.T > a.g.logical() ? 1 : 0), "in.cursors[2]", "is_flush ", cv[2],
          " is not what the cursor rule gives for write_pos ", cv[1], " (write_pos + 2T > L)");
  const auto q_it = t.find("in.q");
  require(q_it != t.end(), "in.q", "tensor is missing");
  const std::int64_t T = q_it->second.shape.empty() ? 0 : q_it->second.shape[0];
  require(T >= 1 && T <= a.g.T, "in.q", "window of ", T, " tokens outside [1, ring_T=", a.g.T, "]");
  SequenceInputs in;
  in.T = static_cast<int>(T);
  in.q = need(t, "in.q", c.act_dtype, {T, H, c.K}).to_f32();
  in.k = need(t, "in.k", c.act_dtype, {T, H, c.K}).to_f32();
  in.v = need(t, "in.v", c.act_dtype, {T, HV, c.V}).to_f32();
  in.a = need(t, "in.a", c.act_dtype, a_shape(c, T)).to_f32();
  in.b = need(t, "in.b", c.act_dtype, {T, HV}).to_f32();
  LayerParams p{need(t, "param.A_log", DType::F32, {HV}).to_f32(), need(t, "param.dt_bias", DType::F32, dt_shape(c)).to_f32()};
  const std::int64_t n = need(t, "in.accepted", DType::I32, {}).to_i64()[0];
  require(n >= 0 && n <= T, "in.accepted", "is ", n, ", outside [0, T=", T, "]");

  const SpecRingCursors before = cur;
  const auto o = spec_ring_verify(c, p, a.g, cur, in, checkpoint, records, SpecRingStepOptions{a.recon, a.record_dtype, false});
  std::vector<Record> window;
  for (std::int64_t s = 0; s < T; ++s)
    window.push_back(records[spec_ring_phys(a.g, before.base + before.write_pos + static_cast<std::int32_t>(s))]);
  cur = spec_ring_commit(cur, a.g, static_cast<std::int32_t>(n));
  const auto w = flatten(c, window);
  std::map<std::string, Tensor> out;
  out["out.o"] = Tensor::from_f32(c.act_dtype, {T, HV, c.V}, o);
  out["out.checkpoint"] = Tensor::from_f32(c.state_dtype, state_shape(c), checkpoint);
  out["out.window.u"] = Tensor::from_f32(a.record_dtype, {T, HV, c.V}, w.u);
  out["out.window.k"] = Tensor::from_f32(a.record_dtype, {T, H, c.K}, w.k);
  out["out.window.g"] = Tensor::from_f32(DType::F32, {T, HV, c.a_width()}, w.g);
  out["out.cursors"] = Tensor::from_i32({3}, cursor_values(cur));
  out["out.committed"] =
      Tensor::from_f32(DType::F32, state_shape(c), spec_ring_committed_state(c, a.g, cur, checkpoint, records, a.recon));
  return out;
}

std::vector<GoldenCase> ring_step_cases(const ModelConfig& cfg, std::uint64_t seed) {
  cfg.validate();
  struct Plan {
    const char* tag;
    DType record_dtype;
    std::vector<int> warmup;  // accepted counts of full-window steps before the recorded one
    int T, n;                 // the recorded step
  };
  const int RT = 4;  // window of the ring (max_T of a tiny campaign); B = RT + 2 as make_setup sizes it
  const SpecRingGeometry geo{RT + 2, RT};
  // B = 6, T = 4: L = 10, P = 16; is_flush after a commit when write_pos >= 3.
  const std::vector<Plan> plans{
      {"append_f32", DType::F32, {2}, 4, 3},            // no flush, history of 2, partial accept
      {"flush_wrap_f32", DType::F32, {4, 4, 4, 4}, 4, 2},  // base 12 + 4: the window wraps to physical 0
      {"flush_n0_bf16", DType::BF16, {4, 3}, 3, 0},     // a flush whose commit accepts nothing
  };
  std::vector<GoldenCase> cases;
  for (std::size_t ci = 0; ci < plans.size(); ++ci) {
    const Plan& pl = plans[ci];
    GoldenCase gc;
    gc.op = kRingStepOp;
    gc.seed = derive_seed(seed, 300 + ci);
    gc.name = cfg.name + "__ring_step__" + pl.tag;
    gc.config = nlohmann::json{{"model", to_json(cfg)},
                               {"args", {{"ring_B", geo.B}, {"ring_T", geo.T}, {"recon", "serial"},
                                         {"record_dtype", std::string(dtype_name(pl.record_dtype))}}}};
    const LayerParams p = random_params(cfg, gc.seed);
    std::vector<float> checkpoint = random_state(cfg, derive_seed(gc.seed, 1));
    std::vector<Record> records(static_cast<std::size_t>(geo.physical()));
    SpecRingCursors cur = spec_ring_reset(geo);
    const SpecRingStepOptions opt{Reconstruction::Serial, pl.record_dtype, false};
    for (std::size_t w = 0; w < pl.warmup.size(); ++w) {
      spec_ring_verify(cfg, p, geo, cur, random_inputs(cfg, RT, derive_seed(gc.seed, 10 + w)), checkpoint, records, opt);
      cur = spec_ring_commit(cur, geo, pl.warmup[w]);
    }
    const auto in = random_inputs(cfg, pl.T, derive_seed(gc.seed, 99));
    const auto rt = flatten(cfg, records);
    const std::int64_t P = geo.physical(), T = pl.T;
    auto& t = gc.tensors;
    t["in.checkpoint"] = Tensor::from_f32(cfg.state_dtype, state_shape(cfg), checkpoint);
    t["in.rec.u"] = Tensor::from_f32(pl.record_dtype, {P, cfg.HV, cfg.V}, rt.u);
    t["in.rec.k"] = Tensor::from_f32(pl.record_dtype, {P, cfg.H, cfg.K}, rt.k);
    t["in.rec.g"] = Tensor::from_f32(DType::F32, {P, cfg.HV, cfg.a_width()}, rt.g);
    t["in.cursors"] = Tensor::from_i32({3}, cursor_values(cur));
    t["in.q"] = Tensor::from_f32(cfg.act_dtype, {T, cfg.H, cfg.K}, in.q);
    t["in.k"] = Tensor::from_f32(cfg.act_dtype, {T, cfg.H, cfg.K}, in.k);
    t["in.v"] = Tensor::from_f32(cfg.act_dtype, {T, cfg.HV, cfg.V}, in.v);
    t["in.a"] = Tensor::from_f32(cfg.act_dtype, a_shape(cfg, T), in.a);
    t["in.b"] = Tensor::from_f32(cfg.act_dtype, {T, cfg.HV}, in.b);
    t["in.accepted"] = Tensor::from_i32({}, {pl.n});
    t["param.A_log"] = Tensor::from_f32(DType::F32, {cfg.HV}, p.A_log);
    t["param.dt_bias"] = Tensor::from_f32(DType::F32, dt_shape(cfg), p.dt_bias);
    for (auto& [name, x] : run_ring_step(gc.config, t)) {
      double scale = 0;
      if (is_float(x.dtype))
        for (double v : x.to_f64()) scale = std::max(scale, std::fabs(v));
      gc.tolerance[name] = name == "out.cursors" ? Tolerance::exact() : ring_tolerance(cfg, pl.record_dtype, name, scale);
      t[name] = std::move(x);
    }
    cases.push_back(std::move(gc));
  }
  return cases;
}

std::vector<std::string> write_ring_set(const ModelConfig& cfg, std::uint64_t seed, const std::string& dir) {
  std::filesystem::create_directories(dir);
  std::vector<std::string> paths;
  for (const auto& g : ring_step_cases(cfg, seed)) {
    const auto path = (std::filesystem::path(dir) / (g.name + ".safetensors")).string();
    Fixture f = to_fixture(g);
    f.precision = "f32";
    save_fixture(path, f);
    paths.push_back(path);
  }
  return paths;
}

}  // namespace replayssm::ref
