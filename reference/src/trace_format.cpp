// Trace fixtures <-> files (docs/fixture-format.md section 9): the tensor names and metadata keys of a
// "lifecycle.trace" fixture, and the checks that name the field a reader trips over.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <sstream>

#include "replayssm/error.hpp"
#include "replayssm/reference/trace.hpp"
#include "replayssm/tier.hpp"

namespace replayssm::ref {

namespace {

using json = nlohmann::json;

const char* op_names[] = {"allocate", "step", "commit", "copy_slot", "capture"};
constexpr int kOps = 5;

std::string meta(const std::string& k) { return "__metadata__." + k; }
std::string tname(const std::string& n) { return "tensor '" + n + "'"; }
std::string cmd_field(std::size_t c) { return meta("commands") + "[" + std::to_string(c) + "]"; }
std::string in_name(std::size_t c, const char* x) { return "in." + std::to_string(c) + "." + x; }
std::string out_name(std::size_t c, const char* x) { return "out." + std::to_string(c) + "." + x; }

Shape state_shape(const ModelConfig& c) {
  return c.layout == StateLayout::KV ? Shape{c.HV, c.K, c.V} : Shape{c.HV, c.V, c.K};
}
Shape prepend(std::int64_t d, Shape s) {
  s.insert(s.begin(), d);
  return s;
}
// Per-token shapes of q, k, v, a, b and o.
struct TokenShapes {
  Shape q, v, a, b, o;
  explicit TokenShapes(const ModelConfig& c)
      : q{c.H, c.K}, v{c.HV, c.V}, a{c.HV, c.a_width()}, b{c.HV}, o{c.HV, c.V} {}
};

std::vector<float> stack(const std::vector<std::vector<float>>& per_layer) {
  std::vector<float> all;
  for (const auto& x : per_layer) all.insert(all.end(), x.begin(), x.end());
  return all;
}
std::vector<float> part(const std::vector<float>& all, std::size_t i, std::size_t n) {
  return std::vector<float>(all.begin() + static_cast<std::ptrdiff_t>(i * n),
                            all.begin() + static_cast<std::ptrdiff_t>((i + 1) * n));
}
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

json slots_json(const std::vector<std::int32_t>& v) { return json(v); }

// An Error's message without its "field: " prefix.
std::string message_of(const Error& e) {
  const std::string w = e.what();
  return e.field().empty() ? w : w.substr(e.field().size() + 2);
}

}  // namespace

bool trace_commits_out_of_place(const Trace& t) {
  for (const auto& c : t.commands)
    for (const auto& r : c.rows)
      if (r.kind == RowKind::Verify && r.row.slot != kPadSlot && r.row.write_slot != kPadSlot &&
          r.row.write_slot != r.row.slot)
        return true;
  return false;
}

bool trace_has_graph_tail(const Trace& t) {
  for (const auto& c : t.commands)
    for (const auto& r : c.rows)
      if (r.graph_tail) return true;
  return false;
}

bool trace_has_capture(const Trace& t) {
  for (const auto& c : t.commands)
    if (c.op == TraceCommand::Op::Capture) return true;
  return false;
}

std::string trace_not_covered(const Trace& t, const Target& target) {
  if (std::string why = target.unsupported(t.setup.cfg, t.setup.max_T); !why.empty()) return why;
  for (const auto& c : t.commands)
    if (c.op == TraceCommand::Op::CopySlot && !target.implements_copy())
      return "the trace copies a slot and the target does not implement copy_slot";
  if (trace_commits_out_of_place(t) && !target.out_of_place_commit())
    return "the trace commits out of place and the target does not claim out_of_place_commit";
  if (trace_has_graph_tail(t) && !target.graph_padding())
    return "the trace has captured steps (graph tail rows) and the target does not claim graph_padding";
  if (trace_has_capture(t) && !target.captures())
    return "the trace captures CUDA-graph buckets while requests are live and the target does not claim captures";
  const auto conv = target.pad_conventions();
  if (std::find(conv.begin(), conv.end(), t.setup.pad_convention) == conv.end())
    return "the trace runs under the " + to_string(t.setup.pad_convention) +
           " PAD convention, which the target does not claim (pad_conventions)";
  return {};
}

std::string trace_version_of(const Trace& t) {
  const bool v11 = trace_has_graph_tail(t) || t.setup.pad_convention != PadConvention::MinusOne;
  return std::to_string(kTraceMajor) + "." + (trace_has_capture(t) ? "2" : v11 ? "1" : "0");
}

std::int32_t TraceCommand::live_rows() const {
  std::int32_t n = 0;
  for (const auto& r : rows) n += r.graph_tail ? 0 : 1;
  return n;
}

std::string TraceCommand::op_name() const { return op_names[static_cast<int>(op)]; }

std::string TraceCommand::str() const {
  std::ostringstream os;
  os << op_name();
  if (op == Op::Allocate) os << " slot " << slot;
  if (op == Op::CopySlot) os << " " << src << " -> " << dst;
  if (op == Op::Capture) os << " rows=" << capture_rows << " T=" << capture_T;
  if (op == Op::Step || op == Op::Commit) {
    os << " [";
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const auto& r = rows[i];
      os << (i ? ", " : "");
      if (r.graph_tail) {
        os << "TAIL slot " << r.row.slot << " T=" << r.row.T;
        continue;
      }
      if (r.row.slot == kPadSlot) {
        os << "PAD T=" << r.row.T;
        continue;
      }
      os << (r.kind == RowKind::Prefill ? (r.fresh ? "prefill(fresh) " : "prefill ") : "verify ") << "slot "
         << r.row.slot << " T=" << r.row.T;
      if (op == Op::Commit && r.kind == RowKind::Verify) os << " n=" << r.row.accepted;
    }
    os << "]";
  }
  return os.str();
}

Fixture trace_to_fixture(const Trace& t) {
  const EngineSetup& s = t.setup;
  s.validate();
  const ModelConfig& cfg = s.cfg;
  const std::int64_t L = cfg.num_layers;
  const TokenShapes sh(cfg);
  Fixture f;
  f.op = kTraceOp;
  f.seed = t.seed;
  f.precision = "f32";
  f.generator = "replayssm-lifecycle/v1";
  std::uint32_t poison_bits = 0;
  std::memcpy(&poison_bits, &s.poison, 4);
  std::ostringstream hex;
  hex << std::hex << poison_bits;
  f.config = json{{"setup", s.to_json()}, {"poison_bits", hex.str()}};
  std::vector<std::vector<float>> A, dt;
  for (const auto& p : s.params) {
    A.push_back(p.A_log);
    dt.push_back(p.dt_bias);
  }
  f.tensors["param.A_log"] = Tensor::from_f32(DType::F32, {L, cfg.HV}, stack(A));
  f.tensors["param.dt_bias"] = Tensor::from_f32(DType::F32, {L, cfg.HV, cfg.a_width()}, stack(dt));

  std::map<std::pair<std::int32_t, std::int32_t>, std::pair<std::vector<float>, json>> stored;  // last per (l, slot)
  json cmds = json::array();
  for (std::size_t c = 0; c < t.commands.size(); ++c) {
    const TraceCommand& k = t.commands[c];
    json j{{"op", k.op_name()}, {"lifecycle", k.lifecycle}};
    if (k.op == TraceCommand::Op::Allocate) j["slot"] = k.slot;
    if (k.op == TraceCommand::Op::CopySlot) {
      j["src"] = k.src;
      j["dst"] = k.dst;
    }
    if (k.op == TraceCommand::Op::Capture) {  // 1.2: the protocol's capture message, {"rows": R, "T": W}
      j["rows"] = k.capture_rows;
      j["T"] = k.capture_T;
    }
    if (k.op == TraceCommand::Op::Step || k.op == TraceCommand::Op::Commit) {
      require(k.notes.size() == k.rows.size(), cmd_field(c) + ".rows", "needs one note per row");
      json rows = rows_to_json(k.rows, false);  // recorded as the protocol sent them
      const auto canon = canonical_rows(k.rows, s);
      for (std::size_t i = 0; i < k.rows.size(); ++i) {
        rows[i]["request"] = k.notes[i].request;
        if (k.rows[i].kind == RowKind::Verify && canon[i].row.slot != kPadSlot) rows[i]["stop_at"] = k.notes[i].stop_at;
      }
      j["rows"] = rows;
      if (k.live_rows() != static_cast<std::int32_t>(k.rows.size())) j["live_rows"] = k.live_rows();  // 1.1
    }
    if (k.op == TraceCommand::Op::Step) {
      const std::int64_t N = k.inputs.empty() ? 0 : k.inputs[0].T;
      j["total_tokens"] = N;
      std::vector<std::vector<float>> q, kk, v, a, b;
      for (const auto& in : k.inputs) {
        q.push_back(in.q);
        kk.push_back(in.k);
        v.push_back(in.v);
        a.push_back(in.a);
        b.push_back(in.b);
      }
      auto put = [&](const std::string& name, DType d, const Shape& tok, const std::vector<std::vector<float>>& x) {
        f.tensors[name] = Tensor::from_f32(d, prepend(L, prepend(N, tok)), stack(x));
      };
      put(in_name(c, "q"), cfg.act_dtype, sh.q, q);
      put(in_name(c, "k"), cfg.act_dtype, sh.q, kk);
      put(in_name(c, "v"), cfg.act_dtype, sh.v, v);
      put(in_name(c, "a"), cfg.act_dtype, sh.a, a);
      put(in_name(c, "b"), cfg.act_dtype, sh.b, b);
      put(out_name(c, "o"), cfg.act_dtype, sh.o, k.outputs);
      f.tolerance[out_name(c, "o")] = Tolerance::exact();
    }
    json states = json::array();
    std::vector<std::vector<float>> fresh;
    for (const auto& e : k.states) {
      auto& last = stored[{e.layer, e.slot}];
      if (last.second.is_null() || !same_bits(last.first, e.values)) {
        last = {e.values, json{c, fresh.size()}};
        fresh.push_back(e.values);
      }
      states.push_back(json{e.layer, e.slot, last.second[0], last.second[1]});
    }
    if (!fresh.empty()) {
      f.tensors[out_name(c, "states")] =
          Tensor::from_f32(cfg.state_dtype, prepend(static_cast<std::int64_t>(fresh.size()), state_shape(cfg)), stack(fresh));
      f.tolerance[out_name(c, "states")] = Tolerance::exact();
    }
    j["states"] = states;
    j["unchanged"] = slots_json(k.unchanged);
    if (k.op == TraceCommand::Op::Commit) j["kept"] = slots_json(k.kept);
    cmds.push_back(j);
  }
  json life = json::array();
  for (const auto& c : t.lifecycle) life.push_back(c.to_json());
  f.extra_metadata["trace_version"] = trace_version_of(t);
  if (trace_version_of(t) != "1.0") f.extra_metadata["pad_convention"] = to_string(s.pad_convention);
  f.extra_metadata["tier_vocabulary"] = kTierVocabularyVersion;
  f.extra_metadata["pad_rule"] = kPadRuleZerosIfClaimed;
  f.extra_metadata["commands"] = cmds.dump();
  f.extra_metadata["lifecycle"] = life.dump();
  f.extra_metadata["source"] = t.source;
  validate_fixture(f);
  return f;
}

// --- reading ---------------------------------------------------------------------------------------------------
namespace {

const std::string& extra(const Fixture& f, const std::string& k) {
  const auto it = f.extra_metadata.find(k);
  require(it != f.extra_metadata.end(), meta(k), "is missing (a trace records it)");
  return it->second;
}

json parse(const std::string& text, const std::string& field) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    fail(field, "is not JSON text: ", e.what());
  }
}

// "MAJOR.MINOR" with a known major and minor; returns the minor.
int check_version(const std::string& v) {
  const auto dot = v.find('.');
  require(dot != std::string::npos && dot > 0 && dot + 1 < v.size() &&
              v.find_first_not_of("0123456789.") == std::string::npos && v.find('.', dot + 1) == std::string::npos,
          meta("trace_version"), "'", v, "' is not MAJOR.MINOR");
  const std::string major = v.substr(0, dot);
  require(major == std::to_string(kTraceMajor), meta("trace_version"), "major version ", major,
          " is not supported (this reader knows ", kTraceMajor, ".0 to ", kTraceMajor, ".", kTraceMinor, ")");
  const std::string minor = v.substr(dot + 1);
  // A minor changes what rows mean (1.1: graph tail rows are PAD rows) or adds a command (1.2: capture), so an
  // unknown one is refused too.
  require(minor.size() <= 3 && std::stoi(minor) <= kTraceMinor, meta("trace_version"), "minor version ", minor,
          " is not supported (this reader knows ", kTraceMajor, ".0 to ", kTraceMajor, ".", kTraceMinor, ")");
  return std::stoi(minor);
}

std::int32_t int_of(const json& j, const char* k, const std::string& field) {
  require(j.contains(k) && j.at(k).is_number_integer(), field + "." + k, "must be an integer");
  return j.at(k).get<std::int32_t>();
}

std::vector<std::int32_t> slot_list(const json& j, const char* k, const std::string& field, std::int32_t S) {
  require(j.contains(k) && j.at(k).is_array(), field + "." + k, "must be an array of slots");
  std::vector<std::int32_t> v;
  for (std::size_t i = 0; i < j.at(k).size(); ++i) {
    const auto& x = j.at(k)[i];
    const std::string fi = field + "." + k + "[" + std::to_string(i) + "]";
    require(x.is_number_integer() && x.get<std::int64_t>() >= 0 && x.get<std::int64_t>() < S, fi,
            "must be a slot in [0, ", S, ")");
    v.push_back(x.get<std::int32_t>());
  }
  return v;
}

const Tensor& need(const Fixture& f, const std::string& name, DType d, const Shape& shape) {
  const auto it = f.tensors.find(name);
  require(it != f.tensors.end(), tname(name), "is missing");
  it->second.expect(d, shape, tname(name));
  return it->second;
}

void require_finite(const std::vector<float>& x, const std::string& field) {
  for (std::size_t i = 0; i < x.size(); ++i)
    require(std::isfinite(x[i]), field, "element ", i, " is not finite (an expectation must be a number)");
}

}  // namespace

Trace trace_from_fixture(const Fixture& f) {
  require(f.op == kTraceOp, meta("op"), "is '", f.op, "', expected ", kTraceOp);
  const int minor = check_version(extra(f, "trace_version"));
  require(extra(f, "tier_vocabulary") == kTierVocabularyVersion, meta("tier_vocabulary"), "version '",
          extra(f, "tier_vocabulary"), "' is not supported (this reader knows ", kTierVocabularyVersion, ")");
  require(extra(f, "pad_rule") == kPadRuleZerosIfClaimed, meta("pad_rule"), "'", extra(f, "pad_rule"),
          "' is not a PAD rule this reader knows (", kPadRuleZerosIfClaimed, ")");
  Trace t;
  t.seed = f.seed;
  t.source = extra(f, "source");
  require(f.config.is_object() && f.config.contains("poison_bits") && f.config.at("poison_bits").is_string(),
          meta("config.poison_bits"), "must be a hexadecimal string");
  const std::string pb = f.config.at("poison_bits").get<std::string>();
  require(!pb.empty() && pb.size() <= 8 && pb.find_first_not_of("0123456789abcdef") == std::string::npos,
          meta("config.poison_bits"), "'", pb, "' is not 32 bits of lowercase hexadecimal");
  const std::uint32_t bits = static_cast<std::uint32_t>(std::stoul(pb, nullptr, 16));
  float poison;
  std::memcpy(&poison, &bits, 4);
  require(f.config.contains("setup"), meta("config.setup"), "is missing");
  const ModelConfig cfg0 = [&] {
    const auto& sj = f.config.at("setup");
    require(sj.is_object() && sj.contains("config"), meta("config.setup.config"), "is missing");
    return config_from_json(sj.at("config"));
  }();
  const std::int64_t L = cfg0.num_layers;
  const auto A = need(f, "param.A_log", DType::F32, {L, cfg0.HV}).to_f32();
  const auto dt = need(f, "param.dt_bias", DType::F32, {L, cfg0.HV, cfg0.a_width()}).to_f32();
  std::vector<LayerParams> params;
  for (std::int64_t l = 0; l < L; ++l)
    params.push_back(LayerParams{part(A, static_cast<std::size_t>(l), static_cast<std::size_t>(cfg0.HV)),
                                 part(dt, static_cast<std::size_t>(l), static_cast<std::size_t>(cfg0.HV * cfg0.a_width()))});
  t.setup = EngineSetup::from_json(f.config.at("setup"), std::move(params), poison, meta("config.setup"));
  const ModelConfig& cfg = t.setup.cfg;
  const std::int32_t S = t.setup.num_slots;
  // 1.1 names its PAD convention (the setup's); a 1.0 reader would take another convention's PAD rows as live.
  if (minor >= 1) {
    require(extra(f, "pad_convention") == to_string(t.setup.pad_convention), meta("pad_convention"), "'",
            extra(f, "pad_convention"), "' differs from ", meta("config.setup.pad_convention"), " '",
            to_string(t.setup.pad_convention), "'");
  } else {
    require(t.setup.pad_convention == PadConvention::MinusOne, meta("config.setup.pad_convention"), "is '",
            to_string(t.setup.pad_convention), "', which needs ", meta("trace_version"), " 1.1 (this file says 1.0)");
  }
  const TokenShapes sh(cfg);
  const std::size_t E = static_cast<std::size_t>(cfg.state_elems());

  const json life = parse(extra(f, "lifecycle"), meta("lifecycle"));
  require(life.is_array(), meta("lifecycle"), "must be an array of lifecycle commands");
  for (const auto& c : life) t.lifecycle.push_back(Cmd::from_json(c));

  const json cmds = parse(extra(f, "commands"), meta("commands"));
  require(cmds.is_array(), meta("commands"), "must be an array of commands");
  std::set<std::string> used;
  for (std::size_t c = 0; c < cmds.size(); ++c) {
    const std::string cf = cmd_field(c);
    const json& j = cmds[c];
    require(j.is_object() && j.contains("op") && j.at("op").is_string(), cf + ".op", "is missing");
    TraceCommand k;
    const std::string op = j.at("op").get<std::string>();
    bool known = false;
    for (int i = 0; i < kOps; ++i)
      if (op == op_names[i]) {
        k.op = static_cast<TraceCommand::Op>(i);
        known = true;
      }
    require(known, cf + ".op", "unknown command '", op, "' (allocate, step, commit, copy_slot, capture)");
    require(k.op != TraceCommand::Op::Capture || minor >= 2, cf + ".op", "capture needs ", meta("trace_version"),
            " 1.2 (this file says 1.", minor, ", whose readers know no capture command)");
    k.lifecycle = int_of(j, "lifecycle", cf);
    require(k.lifecycle >= -1 && k.lifecycle < static_cast<std::int32_t>(t.lifecycle.size()), cf + ".lifecycle",
            "is ", k.lifecycle, ", outside [-1, ", t.lifecycle.size(), ")");
    auto slot_in_range = [&](const char* key) {
      const std::int32_t x = int_of(j, key, cf);
      require(x >= 0 && x < S, cf + "." + key, "is ", x, ", outside [0, ", S, ")");
      return x;
    };
    if (k.op == TraceCommand::Op::Allocate) k.slot = slot_in_range("slot");
    if (k.op == TraceCommand::Op::CopySlot) {
      k.src = slot_in_range("src");
      k.dst = slot_in_range("dst");
    }
    if (k.op == TraceCommand::Op::Capture) {
      k.capture_rows = int_of(j, "rows", cf);
      require(k.capture_rows >= 1 && k.capture_rows <= t.setup.max_rows(), cf + ".rows", "is ", k.capture_rows,
              ", outside [1, max_rows = ", t.setup.max_rows(), "]");
      k.capture_T = int_of(j, "T", cf);
      require(k.capture_T >= 1 && k.capture_T <= t.setup.max_T, cf + ".T", "is ", k.capture_T, ", outside [1, max_T = ",
              t.setup.max_T, "]");
    }
    if (k.op == TraceCommand::Op::Step || k.op == TraceCommand::Op::Commit) {
      require(j.contains("rows"), cf + ".rows", "is missing");
      k.rows = rows_from_json(j.at("rows"), cf + ".rows");
      for (std::size_t i = 0; i < k.rows.size(); ++i) {
        const json& r = j.at("rows")[i];
        const std::string rf = cf + ".rows[" + std::to_string(i) + "]";
        require(minor >= 1 || !k.rows[i].graph_tail, rf + ".graph_tail", "needs ", meta("trace_version"),
                " 1.1 (this file says 1.0, whose readers take every row as live)");
        if (k.rows[i].graph_tail) {  // a stale tail row holds what an earlier captured step left: slots of the pool
          const BatchRow& b = k.rows[i].row;
          for (const auto& [key, s] : {std::pair<const char*, std::int32_t>{"slot", b.slot}, {"write_slot", b.write_slot}})
            require(s == kPadSlot || (s >= 0 && s < S), rf + "." + key, "is ", s, ", outside [-1, ", S, ")");
          require(b.T >= 0 && b.T <= t.setup.max_T, rf + ".T", "is ", b.T, ", outside [0, ", t.setup.max_T, "]");
          require(b.accepted >= 0 && b.accepted <= b.T, rf + ".accepted", "is ", b.accepted, ", outside [0, T = ", b.T,
                  "]");
        }
        TraceRowNote n;
        n.request = int_of(r, "request", rf);
        if (r.contains("stop_at")) n.stop_at = int_of(r, "stop_at", rf);
        k.notes.push_back(n);
      }
      // live_rows: the rows before it are the live batch, the rest the captured batch's tail (graph_tail).
      if (j.contains("live_rows") || k.live_rows() != static_cast<std::int32_t>(k.rows.size())) {
        require(minor >= 1, cf + ".live_rows", "needs ", meta("trace_version"), " 1.1 (this file says 1.0)");
        require(int_of(j, "live_rows", cf) == k.live_rows(), cf + ".live_rows", "is ", int_of(j, "live_rows", cf),
                ", but ", k.live_rows(), " rows are not graph_tail rows");
      }
    }
    if (k.op == TraceCommand::Op::Step) {
      const std::int64_t N = int_of(j, "total_tokens", cf);
      require(N >= 0, cf + ".total_tokens", "must be >= 0");
      std::vector<BatchRow> plain;  // PAD and tail rows as PAD (a stale tail may repeat a live row's slot)
      for (const auto& r : canonical_rows(k.rows, t.setup)) plain.push_back(r.row);
      try {
        validate_batch(plain, t.setup.pool_geometry(), cfg, t.setup.max_T, N, false);
      } catch (const Error& e) {
        fail(cf + "." + e.field(), message_of(e));
      }
      auto get = [&](const char* x, const Shape& tok) {
        return need(f, in_name(c, x), cfg.act_dtype, prepend(L, prepend(N, tok))).to_f32();
      };
      const auto q = get("q", sh.q), kk = get("k", sh.q), v = get("v", sh.v), a = get("a", sh.a), b = get("b", sh.b);
      const auto o = need(f, out_name(c, "o"), cfg.act_dtype, prepend(L, prepend(N, sh.o))).to_f32();
      require_finite(o, tname(out_name(c, "o")));
      used.insert(out_name(c, "o"));
      // The PAD rule: the oracle wrote exact zeros (+0) in every PAD row's window.
      const std::size_t per = static_cast<std::size_t>(cfg.HV) * cfg.V;
      const auto canon = canonical_rows(k.rows, t.setup);
      for (std::size_t i = 0; i < k.rows.size(); ++i) {
        if (canon[i].row.slot != kPadSlot) continue;
        for (std::size_t l = 0; l < static_cast<std::size_t>(L); ++l)
          for (std::size_t e = 0; e < static_cast<std::size_t>(k.rows[i].row.T) * per; ++e) {
            const float x = o[(l * static_cast<std::size_t>(N) + static_cast<std::size_t>(k.rows[i].row.token_offset)) * per + e];
            std::uint32_t xb;
            std::memcpy(&xb, &x, 4);
            require(xb == 0u, tname(out_name(c, "o")), "PAD row ", i, " (layer ", l, ") is not +0 at window element ", e,
                    ": the trace's PAD rule (", kPadRuleZerosIfClaimed, ") says the oracle wrote zeros");
          }
      }
      const std::size_t n = static_cast<std::size_t>(N);
      for (std::size_t l = 0; l < static_cast<std::size_t>(L); ++l) {
        SequenceInputs in;
        in.T = static_cast<int>(N);
        in.q = part(q, l, n * cfg.H * cfg.K);
        in.k = part(kk, l, n * cfg.H * cfg.K);
        in.v = part(v, l, n * cfg.HV * cfg.V);
        in.a = part(a, l, n * cfg.HV * cfg.a_width());
        in.b = part(b, l, n * cfg.HV);
        k.inputs.push_back(std::move(in));
        k.outputs.push_back(part(o, l, n * cfg.HV * cfg.V));
      }
    }
    require(j.contains("states") && j.at("states").is_array(), cf + ".states", "must be an array");
    for (std::size_t i = 0; i < j.at("states").size(); ++i) {
      const json& e = j.at("states")[i];
      const std::string ef = cf + ".states[" + std::to_string(i) + "]";
      require(e.is_array() && e.size() == 4 && e[0].is_number_integer() && e[1].is_number_integer() &&
                  e[2].is_number_integer() && e[3].is_number_integer(),
              ef, "must be [layer, slot, command, index]");
      StateExpectation x{e[0].get<std::int32_t>(), e[1].get<std::int32_t>(), {}};
      const std::int64_t at = e[2].get<std::int64_t>(), idx = e[3].get<std::int64_t>();
      require(x.layer >= 0 && x.layer < L, ef, "layer ", x.layer, " outside [0, ", L, ")");
      require(x.slot >= 0 && x.slot < S, ef, "slot ", x.slot, " outside [0, ", S, ")");
      require(at >= 0 && at <= static_cast<std::int64_t>(c), ef, "refers to command ", at, ", not an earlier one");
      const std::string name = out_name(static_cast<std::size_t>(at), "states");
      const auto it = f.tensors.find(name);
      require(it != f.tensors.end(), ef, "refers to ", tname(name), ", which is missing");
      require(it->second.dtype == cfg.state_dtype && it->second.shape.size() == 4 &&
                  prepend(it->second.shape[0], state_shape(cfg)) == it->second.shape,
              tname(name), "must be ", dtype_name(cfg.state_dtype), " [n, ", shape_str(state_shape(cfg)).substr(1));
      require(idx >= 0 && idx < it->second.shape[0], ef, "index ", idx, " outside [0, ", it->second.shape[0], ")");
      x.values = part(it->second.to_f32(), static_cast<std::size_t>(idx), E);
      require_finite(x.values, tname(name));
      used.insert(name);
      k.states.push_back(std::move(x));
    }
    k.unchanged = slot_list(j, "unchanged", cf, S);
    // A tail row writes nothing: its stale slot must be expected unchanged unless a live row writes it (or it
    // is the dedicated pad slot, which PAD rows may write).
    if (k.op == TraceCommand::Op::Step || k.op == TraceCommand::Op::Commit) {
      const auto canon = canonical_rows(k.rows, t.setup);
      std::set<std::int32_t> written;
      for (const auto& r : canon)
        if (r.row.slot != kPadSlot) written.insert({r.row.slot, r.row.write_slot});
      if (t.setup.pad_convention == PadConvention::PadSlot) written.insert(t.setup.pad_sentinel());
      const std::set<std::int32_t> unchanged(k.unchanged.begin(), k.unchanged.end());
      for (std::size_t i = 0; i < k.rows.size(); ++i) {
        const std::int32_t slot = k.rows[i].row.slot;
        if (!k.rows[i].graph_tail || slot < 0 || slot >= S || written.count(slot)) continue;
        require(unchanged.count(slot), cf + ".unchanged", "does not list slot ", slot, " of graph tail row ", i,
                " (a tail row must leave its stale slot untouched)");
      }
    }
    if (k.op == TraceCommand::Op::Capture) {  // a capture writes nothing: every slot but a dedicated pad slot stays
      const std::set<std::int32_t> unchanged(k.unchanged.begin(), k.unchanged.end());
      for (std::int32_t s = 0; s < S; ++s)
        require(unchanged.count(s) || (t.setup.pad_convention == PadConvention::PadSlot && s == t.setup.pad_sentinel()),
                cf + ".unchanged", "does not list slot ", s, " (a capture must leave every slot untouched)");
    }
    if (k.op == TraceCommand::Op::Commit) k.kept = slot_list(j, "kept", cf, S);
    t.commands.push_back(std::move(k));
  }
  for (const auto& [name, tol] : f.tolerance)
    require(tol.kind == Tolerance::Kind::Exact, meta("tolerance['" + name + "']"),
            "is ", tol.str(), "; a trace stores the oracle's own results, reproduced exactly (implementations are "
            "judged at the tier they claim)");
  for (const auto& name : f.tensor_names("out."))
    require(used.count(name), tname(name), "no command refers to it (an expectation nobody checks proves nothing)");
  return t;
}

Trace load_trace(const std::string& path) {
  const Fixture f = load_fixture(path);  // its errors name the path already
  try {
    return trace_from_fixture(f);
  } catch (const Error& e) {
    throw Error(e.field(), message_of(e) + " (in " + path + ")");
  }
}

}  // namespace replayssm::ref
