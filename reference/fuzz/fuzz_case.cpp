// Reading and writing replayable fuzz-case files (fuzz_case.hpp).
#include "fuzz_case.hpp"

#include <limits>
#include <nlohmann/json.hpp>

#include "replayssm/error.hpp"
#include "replayssm/strict_json.hpp"

namespace replayssm::fuzz {

namespace {

std::string meta_field(const std::string& key) { return "__metadata__." + key; }

// Re-throws e with " (in <path>)" appended to its message, keeping the field.
[[noreturn]] void rethrow_in(const Error& e, const std::string& path) {
  std::string msg = e.what();
  if (!e.field().empty() && msg.size() >= e.field().size() + 2) msg = msg.substr(e.field().size() + 2);
  throw Error(e.field(), msg + " (in " + path + ")");
}

ref::EngineSetup parse_setup(const std::string& text) {
  const std::string f = meta_field("setup");
  const nlohmann::json sj = parse_strict_json(text, f);
  require_only_keys(sj, {"config", "num_slots", "slot_stride", "max_T", "ring_B", "ring_T", "recon",
                         "ring_record_dtype", "page_tokens", "pad_convention", "gates", "conv"}, f);
  auto num = [&](const char* key, std::int64_t lo, std::int64_t hi) {
    return json_int(require_key(sj, key, f), f + "." + key, lo, hi);
  };
  auto str = [&](const char* key) -> const std::string& {
    return json_string(require_key(sj, key, f), f + "." + key);
  };
  ref::EngineSetup s;
  try {
    s.cfg = config_from_json(require_key(sj, "config", f));
  } catch (const Error& e) {
    throw Error(f + "." + e.field(), std::string(e.what()).substr(e.field().size() + 2));
  }
  s.num_slots = static_cast<std::int32_t>(num("num_slots", 1, kCaseMaxSlots));
  s.slot_stride = num("slot_stride", 0, std::numeric_limits<std::int64_t>::max());
  s.max_T = static_cast<std::int32_t>(num("max_T", 1, kCaseMaxT));
  s.spec_ring.T = static_cast<std::int32_t>(num("ring_T", 1, kCaseMaxT));
  s.spec_ring.B = static_cast<std::int32_t>(num("ring_B", s.spec_ring.T, kCaseMaxRingB));
  s.recon = ref::parse_reconstruction(str("recon"), f + ".recon");
  s.record_dtype = parse_dtype(str("ring_record_dtype"), f + ".ring_record_dtype");
  require(s.record_dtype == DType::F32 || s.record_dtype == DType::BF16, f + ".ring_record_dtype",
          "must be F32 or BF16");
  s.page_tokens = static_cast<std::int32_t>(num("page_tokens", 1, kCaseMaxPageTokens));
  if (sj.contains("pad_convention")) {  // optional: absent means minus_one
    s.pad_convention = ref::parse_pad_convention(str("pad_convention"), f + ".pad_convention");
    require(s.num_slots >= 2, f + ".pad_convention", "reserves a slot and needs num_slots >= 2");
  }
  if (sj.contains("gates")) s.gates = ref::parse_gate_range(str("gates"), f + ".gates");  // absent: benign
  if (sj.contains("conv")) s.conv = ref::ConvSetup::from_json(sj.at("conv"), s.cfg, f + ".conv");  // absent: off
  const std::int64_t stride = s.slot_stride == 0 ? s.cfg.state_elems() : s.slot_stride;
  require(stride >= s.cfg.state_elems(), f + ".slot_stride", "must be 0 or >= HV*K*V = ", s.cfg.state_elems());
  // Pool bytes, overflow-safe: every factor is positive.
  const std::int64_t per_layer_cap = kCaseMaxPoolBytes / 4 / s.cfg.num_layers / s.num_slots;
  require(stride <= per_layer_cap, f, "pools of ", s.cfg.num_layers, " layers x ", s.num_slots, " slots x ", stride,
          " values exceed the cap of ", kCaseMaxPoolBytes, " bytes");
  s.poison = std::numeric_limits<float>::quiet_NaN();
  return s;
}

std::vector<float> param(const SafetensorsFile& file, const std::string& name, std::int64_t len) {
  const auto it = file.tensors.find(name);
  require(it != file.tensors.end(), "tensor '" + name + "'", "is missing (one per layer)");
  it->second.expect(DType::F32, {len}, "tensor '" + name + "'");
  return it->second.to_f32();
}

// "param.A_log.<l>" or "param.dt_bias.<l>" with l a decimal layer index below num_layers.
bool is_layer_param(const std::string& name, int num_layers) {
  for (const std::string prefix : {"param.A_log.", "param.dt_bias."}) {
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string digits = name.substr(prefix.size());
    if (digits.empty() || digits.size() > 10 || (digits.size() > 1 && digits[0] == '0') ||
        digits.find_first_not_of("0123456789") != std::string::npos)
      return false;
    std::uint64_t l = 0;
    for (char ch : digits) l = l * 10 + static_cast<std::uint64_t>(ch - '0');  // at most 10 digits
    return l < static_cast<std::uint64_t>(num_layers);
  }
  return false;
}

// Bounds a command by the setup (the engine checks the rest when the case runs).
void check_command(const ref::Cmd& c, const ref::EngineSetup& s, const std::string& f) {
  if (c.kind == ref::Cmd::Kind::Step) {
    require(static_cast<std::int64_t>(c.rows.size()) <= s.num_slots, f + ".rows", "has ", c.rows.size(),
            " rows, more than num_slots = ", s.num_slots);
    require(static_cast<std::int64_t>(c.pad_at.size()) <= kCaseMaxPads, f + ".pad_at", "has ", c.pad_at.size(),
            " PAD rows, more than ", kCaseMaxPads);
    require(c.graph <= s.max_rows(), f + ".graph", "is ", c.graph, ", more than max_rows = num_slots + 8 = ",
            s.max_rows());
    for (std::size_t i = 0; i < c.rows.size(); ++i)
      require(c.rows[i].to_slot < s.num_slots, f + ".rows[" + std::to_string(i) + "].to_slot", "is ", c.rows[i].to_slot,
              ", outside [0, num_slots = ", s.num_slots, ")");
    require(c.replay_T <= s.max_T, f + ".replay_T", "is ", c.replay_T, ", more than max_T = ", s.max_T);
    for (std::size_t i = 0; i < c.rows.size(); ++i)
      require(c.rows[i].T <= s.max_T, f + ".rows[" + std::to_string(i) + "].T", "is ", c.rows[i].T,
              ", more than max_T = ", s.max_T);
  } else if (c.kind == ref::Cmd::Kind::Capture) {
    require(c.graph <= s.max_rows(), f + ".graph", "is ", c.graph, ", more than max_rows = num_slots + 8 = ",
            s.max_rows());
    require(c.capture_T <= s.max_T, f + ".T", "is ", c.capture_T, ", more than max_T = ", s.max_T);
  } else {
    require(c.prompt <= kCaseMaxPrompt, f + ".prompt", "is ", c.prompt, ", more than the cap of ", kCaseMaxPrompt);
  }
}

}  // namespace

FuzzCase parse_fuzz_case(const SafetensorsFile& file) {
  const auto& m = file.metadata;
  for (const auto& [key, value] : m) {
    (void)value;
    require(key == "schema" || key == "schema_version" || key == "setup" || key == "target" || key == "fault" ||
                key == "commands" || key == "reason",
            meta_field(key), "unknown key of a fuzz case (schema, schema_version, setup, target, fault, commands, "
            "reason)");
  }
  auto meta = [&](const char* key) -> const std::string& {
    const auto it = m.find(key);
    require(it != m.end(), meta_field(key), "is missing");
    return it->second;
  };
  require(meta("schema") == kFuzzCaseSchema, meta_field("schema"), "is '", meta("schema"), "', expected ",
          kFuzzCaseSchema);
  require(meta("schema_version") == kFuzzCaseSchemaVersion, meta_field("schema_version"), "is '",
          meta("schema_version"), "', this reader knows version ", kFuzzCaseSchemaVersion);
  FuzzCase c;
  c.setup = parse_setup(meta("setup"));
  c.target = meta("target");
  require(!c.target.empty(), meta_field("target"), "must name a target");
  try {
    c.fault = ref::parse_fault(meta("fault"));
  } catch (const Error& e) {
    throw Error(meta_field("fault"), std::string(e.what()).substr(e.field().size() + 2));
  }
  c.reason = meta("reason");

  const auto& cfg = c.setup.cfg;
  for (const auto& [name, t] : file.tensors) {
    (void)t;
    require(is_layer_param(name, cfg.num_layers), "tensor '" + name + "'",
            "is not a layer parameter of this case (param.A_log.<l>, param.dt_bias.<l>, l < num_layers = ",
            cfg.num_layers, ")");
  }
  // Every tensor present is one of 2 * num_layers names, so the loop below ends at the first missing one.
  for (int l = 0; l < cfg.num_layers; ++l) {
    const std::string sl = std::to_string(l);
    ref::LayerParams p;
    p.A_log = param(file, "param.A_log." + sl, cfg.HV);
    p.dt_bias = param(file, "param.dt_bias." + sl, static_cast<std::int64_t>(cfg.HV) * cfg.a_width());
    c.setup.params.push_back(std::move(p));
  }
  c.setup.validate();

  const std::string cf = meta_field("commands");
  const nlohmann::json cj = parse_strict_json(meta("commands"), cf);
  require(cj.is_array(), cf, "must be a JSON array of commands");
  require(static_cast<std::int64_t>(cj.size()) <= kCaseMaxCommands, cf, "has ", cj.size(),
          " commands, more than the cap of ", kCaseMaxCommands);
  for (std::size_t i = 0; i < cj.size(); ++i) {
    const std::string f = cf + "[" + std::to_string(i) + "]";
    c.commands.push_back(ref::Cmd::from_json(cj[i], f));
    check_command(c.commands.back(), c.setup, f);
  }
  return c;
}

FuzzCase read_fuzz_case(const std::string& path) {
  const SafetensorsFile file = read_safetensors(path);
  try {
    return parse_fuzz_case(file);
  } catch (const Error& e) {
    rethrow_in(e, path);
  }
}

SafetensorsFile fuzz_case_file(const FuzzCase& c) {
  SafetensorsFile f;
  for (std::size_t l = 0; l < c.setup.params.size(); ++l) {
    const auto& p = c.setup.params[l];
    f.tensors["param.A_log." + std::to_string(l)] =
        Tensor::from_f32(DType::F32, {static_cast<std::int64_t>(p.A_log.size())}, p.A_log);
    f.tensors["param.dt_bias." + std::to_string(l)] =
        Tensor::from_f32(DType::F32, {static_cast<std::int64_t>(p.dt_bias.size())}, p.dt_bias);
  }
  auto seq = nlohmann::json::array();
  for (const auto& cmd : c.commands) seq.push_back(cmd.to_json());
  f.metadata["schema"] = kFuzzCaseSchema;
  f.metadata["schema_version"] = kFuzzCaseSchemaVersion;
  f.metadata["setup"] = c.setup.to_json().dump();
  f.metadata["target"] = c.target;
  f.metadata["fault"] = ref::to_string(c.fault);
  f.metadata["commands"] = seq.dump();
  f.metadata["reason"] = c.reason;
  return f;
}

}  // namespace replayssm::fuzz
