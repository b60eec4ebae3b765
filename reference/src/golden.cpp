#include "replayssm/reference/golden.hpp"

#include <cmath>
#include <filesystem>
#include <limits>

#include "replayssm/error.hpp"
#include "replayssm/mrope/mrope_fixture.hpp"
#include "replayssm/reference/gdn.hpp"
#include "replayssm/reference/inputs.hpp"
#include "replayssm/reference/ring_fixture.hpp"
#include "replayssm/reference/trace_replay.hpp"
#include "replayssm/rng.hpp"
#include "replayssm/strict_json.hpp"

namespace replayssm::ref {

namespace {
constexpr float kMarker = 1.0e30f;  // pool slots a step must not touch hold this marker

Shape state_shape(const ModelConfig& c) {
  return c.layout == StateLayout::KV ? Shape{c.HV, c.K, c.V} : Shape{c.HV, c.V, c.K};
}
Shape a_shape(const ModelConfig& c, std::int64_t T) {
  return c.op == Op::GDN ? Shape{T, c.HV} : Shape{T, c.HV, c.K};
}
Shape prepend(std::int64_t d, Shape s) {
  s.insert(s.begin(), d);
  return s;
}

const Tensor& need(const std::map<std::string, Tensor>& t, const std::string& name) {
  const auto it = t.find(name);
  require(it != t.end(), name, "tensor is missing");
  return it->second;
}
std::vector<float> get(const std::map<std::string, Tensor>& t, const std::string& name, DType dtype,
                       const Shape& shape) {
  const Tensor& x = need(t, name);
  x.expect(dtype, shape, name);
  return x.to_f32();
}

ModelConfig model_of(const nlohmann::json& config) {
  require(config.is_object() && config.contains("model"), "config.model", "is missing");
  return config_from_json(config.at("model"));
}
// An integer argument in [lo, hi] (never wrapped: 2^32 + 1 is refused, not read as 1).
std::int64_t arg(const nlohmann::json& config, const char* key, std::int64_t lo, std::int64_t hi) {
  const std::string f = std::string("config.args.") + key;
  require(config.contains("args") && config.at("args").is_object() && config.at("args").contains(key), f,
          "is missing");
  return json_int(config.at("args").at(key), f, lo, hi);
}

// The element count of an output the reference is about to allocate, refused (Error(field)) when its bytes
// would exceed the per-tensor cap of the safetensors limits: a fixture declares its own shapes.
std::size_t output_elems(const Shape& shape, std::size_t elem_bytes, const std::string& field) {
  const std::int64_t n = shape_numel(shape, field);
  const std::uint64_t cap = default_safetensors_limits().max_tensor_bytes;
  require(static_cast<std::uint64_t>(n) <= cap / elem_bytes, field, "the output ", shape_str(shape), " would need ",
          n, " elements of ", elem_bytes, " bytes, more than the cap of ", cap, " bytes per tensor");
  return static_cast<std::size_t>(n);
}

SequenceInputs read_inputs(const ModelConfig& c, const std::map<std::string, Tensor>& t, std::int64_t T,
                           const std::string& prefix = "in.", std::int64_t row = -1) {
  SequenceInputs in;
  in.T = static_cast<int>(T);
  auto sh = [&](Shape s) { return row < 0 ? s : prepend(row, s); };
  in.q = get(t, prefix + "q", c.act_dtype, sh({T, c.H, c.K}));
  in.k = get(t, prefix + "k", c.act_dtype, sh({T, c.H, c.K}));
  in.v = get(t, prefix + "v", c.act_dtype, sh({T, c.HV, c.V}));
  in.a = get(t, prefix + "a", c.act_dtype, sh(a_shape(c, T)));
  in.b = get(t, prefix + "b", c.act_dtype, sh({T, c.HV}));
  return in;
}
LayerParams read_params(const ModelConfig& c, const std::map<std::string, Tensor>& t) {
  LayerParams p;
  p.A_log = get(t, "param.A_log", DType::F32, {c.HV});
  p.dt_bias = get(t, "param.dt_bias", DType::F32, c.op == Op::GDN ? Shape{c.HV} : Shape{c.HV, c.K});
  return p;
}
void put_inputs(const ModelConfig& c, std::map<std::string, Tensor>& t, const SequenceInputs& in,
                std::int64_t rows = -1) {
  const std::int64_t T = rows < 0 ? in.T : in.T / rows;
  auto sh = [&](Shape s) { return rows < 0 ? s : prepend(rows, s); };
  t["in.q"] = Tensor::from_f32(c.act_dtype, sh({T, c.H, c.K}), in.q);
  t["in.k"] = Tensor::from_f32(c.act_dtype, sh({T, c.H, c.K}), in.k);
  t["in.v"] = Tensor::from_f32(c.act_dtype, sh({T, c.HV, c.V}), in.v);
  t["in.a"] = Tensor::from_f32(c.act_dtype, sh(a_shape(c, T)), in.a);
  t["in.b"] = Tensor::from_f32(c.act_dtype, sh({T, c.HV}), in.b);
}
void put_params(const ModelConfig& c, std::map<std::string, Tensor>& t, const LayerParams& p) {
  t["param.A_log"] = Tensor::from_f32(DType::F32, {c.HV}, p.A_log);
  t["param.dt_bias"] = Tensor::from_f32(DType::F32, c.op == Op::GDN ? Shape{c.HV} : Shape{c.HV, c.K}, p.dt_bias);
}
std::vector<double> round_state(const ModelConfig& c, std::vector<double> S) {
  if (c.state_dtype != DType::F32) round_to_state_dtype(c, S);
  return S;
}
}  // namespace

// F32: a few ulps of fp32 accumulation over K terms; BF16: one bf16 rounding (2^-9) of the stored output plus
// fp32 noise, with 4x margin.
Tolerance golden_output_tolerance(const ModelConfig& c) {
  return c.act_dtype == DType::F32 ? Tolerance::allclose(1e-5, 1e-4) : Tolerance::allclose(2e-3, 8e-3);
}
Tolerance golden_state_tolerance(const ModelConfig& c) {
  return c.state_dtype == DType::F32 ? Tolerance::allclose(1e-5, 1e-4) : Tolerance::allclose(2e-3, 8e-3);
}

GoldenCase make_golden_case(const std::string& op, const ModelConfig& c, const nlohmann::json& args,
                            const std::string& name, std::uint64_t seed, const GoldenFill& fill) {
  GoldenCase g;
  g.op = op;
  g.seed = seed;
  g.config = nlohmann::json{{"model", to_json(c)}, {"args", args}};
  g.name = name;
  fill(g, c);
  auto out = run_golden_op(op, g.config, g.tensors);
  for (auto& [k, v] : out) {
    g.tolerance[k] = (k == "out.o") ? golden_output_tolerance(c) : golden_state_tolerance(c);
    g.tensors[k] = std::move(v);
  }
  return g;
}

GoldenFill sequence_fill(int T) {
  return [T](GoldenCase& g, const ModelConfig& c) {
    put_inputs(c, g.tensors, random_inputs(c, T, g.seed));
    put_params(c, g.tensors, random_params(c, g.seed));
    g.tensors["in.state"] = Tensor::from_f32(c.state_dtype, state_shape(c), random_state(c, g.seed));
  };
}

GoldenFill batch_fill(int T, int slots, std::vector<std::int32_t> slot, std::vector<std::int32_t> accepted) {
  require(slot.size() == accepted.size() && !slot.empty(), "slot", "needs one entry per row, like accepted");
  return [T, slots, slot = std::move(slot), acc = std::move(accepted)](GoldenCase& g, const ModelConfig& m) {
    const int B = static_cast<int>(slot.size());
    put_inputs(m, g.tensors, random_inputs(m, B * T, g.seed), B);
    put_params(m, g.tensors, random_params(m, g.seed));
    std::vector<float> pool(static_cast<std::size_t>(slots * m.state_elems()), round_to(m.state_dtype, kMarker));
    for (int r = 0; r < B; ++r)
      if (slot[r] >= 0) {
        const auto S = random_state(m, derive_seed(g.seed, 50 + r));
        std::copy(S.begin(), S.end(), pool.begin() + slot[r] * m.state_elems());
      }
    g.tensors["in.pool"] = Tensor::from_f32(m.state_dtype, prepend(slots, state_shape(m)), pool);
    g.tensors["in.slot"] = Tensor::from_i32({B}, slot);
    g.tensors["in.accepted"] = Tensor::from_i32({B}, acc);
  };
}

std::vector<std::string> golden_ops() { return {"recurrent", "chunked", "mtp_verify", "replay_commit", "mtp_batch"}; }

std::map<std::string, Tensor> run_golden_op(const std::string& op, const nlohmann::json& config,
                                            const std::map<std::string, Tensor>& t) {
  const ModelConfig c = model_of(config);
  const Shape ss = state_shape(c);
  std::map<std::string, Tensor> out;
  if (op == "recurrent" || op == "chunked" || op == "mtp_verify") {
    const std::int64_t T = need(t, "in.q").shape.empty() ? 0 : need(t, "in.q").shape[0];
    const auto in = read_inputs(c, t, T);
    const auto p = read_params(c, t);
    auto S = widen<double>(get(t, "in.state", c.state_dtype, ss));
    // mtp_verify keeps every intermediate state: T times the state, capped before anything is computed.
    if (op == "mtp_verify") (void)output_elems(prepend(T, ss), 2 * sizeof(double), "out.states");
    std::vector<double> o;
    if (op == "chunked") {
      run_chunked<double>(c, p, in, static_cast<int>(arg(config, "chunk", 1, std::numeric_limits<int>::max())), S, o);
    } else {
      std::vector<std::vector<double>> states;
      run_recurrent<double>(c, p, in, S, o, op == "mtp_verify" ? &states : nullptr);
      if (op == "mtp_verify") {
        std::vector<double> all;
        for (auto& s : states) {
          const auto r = round_state(c, s);
          all.insert(all.end(), r.begin(), r.end());
        }
        out["out.states"] = Tensor::from_f64(c.state_dtype, prepend(T, ss), all);
      }
    }
    out["out.o"] = Tensor::from_f64(DType::F32, {T, c.HV, c.V}, o);
    if (op != "mtp_verify") out["out.state"] = Tensor::from_f64(c.state_dtype, ss, round_state(c, S));
    return out;
  }
  if (op == "replay_commit") {
    const std::int64_t T = need(t, "in.k").shape.empty() ? 0 : need(t, "in.k").shape[0];
    SequenceInputs in;
    in.T = static_cast<int>(T);
    in.k = get(t, "in.k", c.act_dtype, {T, c.H, c.K});
    in.v = get(t, "in.v", c.act_dtype, {T, c.HV, c.V});
    in.a = get(t, "in.a", c.act_dtype, a_shape(c, T));
    in.b = get(t, "in.b", c.act_dtype, {T, c.HV});
    in.q.assign(in.k.size(), 0.0f);
    const auto p = read_params(c, t);
    const auto& acc = need(t, "in.accepted");
    acc.expect(DType::I32, {}, "in.accepted");
    const std::int64_t n = acc.to_i64()[0];
    require(n >= 0 && n <= T, "in.accepted", "is ", n, ", outside [0, T=", T, "]");
    auto S = widen<double>(get(t, "in.state", c.state_dtype, ss));
    std::vector<double> o;
    if (n > 0) {
      run_recurrent<double>(c, p, in.slice(c, 0, static_cast<int>(n)), S, o);
      S = round_state(c, S);
    }
    out["out.state"] = Tensor::from_f64(c.state_dtype, ss, S);
    return out;
  }
  if (op == "mtp_batch") {
    const auto& slots_t = need(t, "in.slot");
    require(slots_t.dtype == DType::I32 && slots_t.shape.size() == 1, "in.slot", "must be I32 [B]");
    const std::int64_t B = slots_t.shape[0];
    const auto slots = slots_t.to_i64();
    const auto& acc_t = need(t, "in.accepted");
    acc_t.expect(DType::I32, {B}, "in.accepted");
    const auto acc = acc_t.to_i64();
    const auto& pool_t = need(t, "in.pool");
    require(pool_t.shape.size() == ss.size() + 1, "in.pool", "must be [slots, ", shape_str(ss).substr(1));
    const std::int64_t num_slots = pool_t.shape[0];
    auto pool = widen<double>(get(t, "in.pool", c.state_dtype, prepend(num_slots, ss)));
    const std::int64_t T = need(t, "in.q").shape.size() > 1 ? need(t, "in.q").shape[1] : 0;
    const auto p = read_params(c, t);
    const std::size_t E = static_cast<std::size_t>(c.state_elems());
    // Inputs first (their shapes are checked against the data), then the outputs, whose size is capped.
    const auto all_in = read_inputs(c, t, T, "in.", B);
    std::vector<double> o_all(output_elems({B, T, c.HV, c.V}, sizeof(double), "out.o"), 0.0);
    std::vector<std::vector<double>> committed(static_cast<std::size_t>(B));
    SequenceInputs flat = all_in;
    flat.T = static_cast<int>(B * T);
    for (std::int64_t r = 0; r < B; ++r) {
      const std::string f = "in.slot[" + std::to_string(r) + "]";
      require(slots[r] >= -1 && slots[r] < num_slots, f, "is ", slots[r], ", outside [-1, ", num_slots, ")");
      require(acc[r] >= 0 && acc[r] <= T, "in.accepted[" + std::to_string(r) + "]", "is ", acc[r],
              ", outside [0, T=", T, "]");
      for (std::int64_t q = 0; q < r; ++q)
        require(slots[r] == -1 || slots[q] != slots[r], f, "slot ", slots[r], " used twice");
      if (slots[r] < 0) continue;  // PAD: no read, no write, zero output
      std::vector<double> S(pool.begin() + slots[r] * E, pool.begin() + (slots[r] + 1) * E), o;
      std::vector<std::vector<double>> states;
      run_recurrent<double>(c, p, flat.slice(c, static_cast<int>(r * T), static_cast<int>(T)), S, o, &states);
      std::copy(o.begin(), o.end(), o_all.begin() + r * T * c.HV * c.V);
      if (acc[r] > 0) committed[static_cast<std::size_t>(r)] = round_state(c, states[static_cast<std::size_t>(acc[r]) - 1]);
    }
    for (std::int64_t r = 0; r < B; ++r)
      if (!committed[static_cast<std::size_t>(r)].empty())
        std::copy(committed[r].begin(), committed[r].end(), pool.begin() + slots[r] * E);
    out["out.o"] = Tensor::from_f64(DType::F32, {B, T, c.HV, c.V}, o_all);
    out["out.pool"] = Tensor::from_f64(c.state_dtype, prepend(num_slots, ss), pool);
    return out;
  }
  std::string known;
  for (const auto& o : golden_ops()) known += (known.empty() ? "" : ", ") + o;
  fail("op", "unknown golden operation '", op, "' (known: ", known, ")");
}

std::vector<GoldenCase> golden_cases(const ModelConfig& cfg0, std::uint64_t seed) {
  cfg0.validate();
  std::vector<GoldenCase> cases;
  const bool small = cfg0.state_elems() <= 64 * 64;
  auto make = [&](const std::string& op, const ModelConfig& c, nlohmann::json args, const std::string& tag,
                  const GoldenFill& fill) {
    cases.push_back(make_golden_case(op, c, args, c.name + "__" + op + (tag.empty() ? "" : "__" + tag),
                                     derive_seed(seed, cases.size() + 1), fill));
  };
  auto seq_fill = [](int T) { return sequence_fill(T); };
  std::vector<ModelConfig> variants{cfg0};
  if (small) {  // the small presets also pin the other public conventions
    ModelConfig v = cfg0;
    v.layout = cfg0.layout == StateLayout::VK ? StateLayout::KV : StateLayout::VK;
    v.l2norm = L2Norm::DivSqrt;
    v.round_beta_to_act = true;
    v.name = cfg0.name + "-alt";
    variants.push_back(v);
    ModelConfig f = cfg0;
    f.act_dtype = DType::F32;
    f.state_dtype = DType::BF16;
    f.name = cfg0.name + "-f32act-bf16state";
    if (f.op == Op::KDA) f.kda_gate = KdaGate::LowerBoundSigmoid;
    variants.push_back(f);
  }
  for (const auto& c : variants) {
    make("recurrent", c, nlohmann::json::object(), "T12", seq_fill(12));
    for (int chunk : small ? std::vector<int>{16, 64} : std::vector<int>{64})
      make("chunked", c, nlohmann::json{{"chunk", chunk}}, "T70_C" + std::to_string(chunk), seq_fill(70));
    make("mtp_verify", c, nlohmann::json::object(), "T4", seq_fill(4));
    for (int n : small ? std::vector<int>{0, 4, 6} : std::vector<int>{4}) {
      make("replay_commit", c, nlohmann::json::object(), "T6_n" + std::to_string(n), [n](GoldenCase& g, const ModelConfig& m) {
        const auto in = random_inputs(m, 6, g.seed);
        g.tensors["in.k"] = Tensor::from_f32(m.act_dtype, {6, m.H, m.K}, in.k);
        g.tensors["in.v"] = Tensor::from_f32(m.act_dtype, {6, m.HV, m.V}, in.v);
        g.tensors["in.a"] = Tensor::from_f32(m.act_dtype, a_shape(m, 6), in.a);
        g.tensors["in.b"] = Tensor::from_f32(m.act_dtype, {6, m.HV}, in.b);
        put_params(m, g.tensors, random_params(m, g.seed));
        g.tensors["in.state"] = Tensor::from_f32(m.state_dtype, state_shape(m), random_state(m, g.seed));
        g.tensors["in.accepted"] = Tensor::from_i32({}, {n});
      });
    }
    // Permuted, non-contiguous slots with a PAD row; accepted lengths cover 0, partial and full.
    make("mtp_batch", c, nlohmann::json::object(), "B4_T4", batch_fill(4, 5, {3, -1, 0, 1}, {4, 1, 0, 2}));
  }
  return cases;
}

Fixture to_fixture(const GoldenCase& g) {
  Fixture f;
  f.op = g.op;
  f.config = g.config;
  f.seed = g.seed;
  f.precision = "f64";
  f.tolerance = g.tolerance;
  f.tensors = g.tensors;
  return f;
}

std::vector<std::string> write_golden_set(const ModelConfig& cfg, std::uint64_t seed, const std::string& dir) {
  std::filesystem::create_directories(dir);
  std::vector<std::string> paths;
  for (const auto& g : golden_cases(cfg, seed)) {
    const auto path = (std::filesystem::path(dir) / (g.name + ".safetensors")).string();
    save_fixture(path, to_fixture(g));
    paths.push_back(path);
  }
  const auto mdir = (std::filesystem::path(dir) / "mrope").string();
  std::filesystem::create_directories(mdir);
  for (const auto& p : write_mrope_fixtures(seed, mdir)) paths.push_back(p);
  return paths;
}

std::vector<std::string> write_mrope_fixtures(std::uint64_t seed, const std::string& dir) {
  std::vector<std::string> paths;
  for (const auto& m : mrope::preset_names()) {
    const std::string path = dir + "/mrope__" + m + ".safetensors";
    save_fixture(path, mrope::to_fixture(mrope::mrope_fixture(m, seed)));
    paths.push_back(path);
  }
  return paths;
}

}  // namespace replayssm::ref
