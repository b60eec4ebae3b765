// Engine-level case files (engine_case.hpp). The setup and the layer parameters are read by the kernel-level
// case reader (fuzz_case.hpp) so both files are held to one set of rules.
#include "engine_case.hpp"

#include <nlohmann/json.hpp>

#include "fuzz_case.hpp"
#include "replayssm/error.hpp"
#include "replayssm/strict_json.hpp"

namespace replayssm::fuzz {

namespace el = ref::engine_level;

namespace {
std::string meta_field(const std::string& key) { return "__metadata__." + key; }

void check_event(const el::Event& e, const el::EngineLevelSetup& s, const std::string& f) {
  require(static_cast<std::int64_t>(e.entries.size()) <= s.options.max_live, f + ".entries", "has ",
          e.entries.size(), " entries, more than max_live = ", s.options.max_live);
  for (std::size_t i = 0; i < e.entries.size(); ++i)
    require(e.entries[i].T <= s.base.max_T, f + ".entries[" + std::to_string(i) + "].T", "is ", e.entries[i].T,
            ", more than max_T = ", s.base.max_T);
  require(e.prompt <= kCaseMaxPrompt, f + ".prompt", "is ", e.prompt, ", more than the cap of ", kCaseMaxPrompt);
}
}  // namespace

EngineCase parse_engine_case(const SafetensorsFile& file) {
  const auto& m = file.metadata;
  for (const auto& [key, value] : m) {
    (void)value;
    require(key == "schema" || key == "schema_version" || key == "setup" || key == "options" || key == "target" ||
                key == "fault" || key == "events" || key == "reason",
            meta_field(key), "unknown key of an engine case (schema, schema_version, setup, options, target, fault, "
            "events, reason)");
  }
  auto meta = [&](const char* key) -> const std::string& {
    const auto it = m.find(key);
    require(it != m.end(), meta_field(key), "is missing");
    return it->second;
  };
  require(meta("schema") == kEngineCaseSchema, meta_field("schema"), "is '", meta("schema"), "', expected ",
          kEngineCaseSchema);
  require(meta("schema_version") == kFuzzCaseSchemaVersion, meta_field("schema_version"), "is '",
          meta("schema_version"), "', this reader knows version ", kFuzzCaseSchemaVersion);
  // Setup and parameters through the fuzz-case reader: the same file with the kernel-level keys.
  SafetensorsFile as_fuzz;
  as_fuzz.tensors = file.tensors;
  as_fuzz.metadata = {{"schema", kFuzzCaseSchema},   {"schema_version", kFuzzCaseSchemaVersion},
                      {"setup", meta("setup")},      {"target", "engine"},
                      {"fault", "none"},             {"commands", "[]"},
                      {"reason", ""}};
  EngineCase c;
  c.setup.base = parse_fuzz_case(as_fuzz).setup;
  const std::string of = meta_field("options");
  const nlohmann::json oj = parse_strict_json(meta("options"), of);
  require(oj.is_array() && !oj.empty() && oj.size() <= 4, of, "must be an array of 1 to 4 option objects");
  for (std::size_t i = 0; i < oj.size(); ++i) {
    const std::string f = of + "[" + std::to_string(i) + "]";
    c.variants.push_back(el::EngineOptions::from_json(oj[i], f));
    require(c.variants[i].max_live == c.variants[0].max_live, f + ".max_live", "differs from options[0].max_live");
    require(c.variants[i].block == c.variants[0].block, f + ".block", "differs from options[0].block");
  }
  c.setup.options = c.variants[0];
  try {
    c.setup.validate();
  } catch (const Error& e) {
    throw Error(meta_field(e.field()), std::string(e.what()).substr(e.field().size() + 2));
  }
  c.target = meta("target");
  require(!c.target.empty(), meta_field("target"), "must name an engine");
  try {
    c.fault = el::parse_engine_fault(meta("fault"));
  } catch (const Error& e) {
    throw Error(meta_field("fault"), std::string(e.what()).substr(e.field().size() + 2));
  }
  c.reason = meta("reason");
  const std::string ef = meta_field("events");
  const nlohmann::json ej = parse_strict_json(meta("events"), ef);
  require(ej.is_array(), ef, "must be a JSON array of events");
  require(static_cast<std::int64_t>(ej.size()) <= kCaseMaxCommands, ef, "has ", ej.size(),
          " events, more than the cap of ", kCaseMaxCommands);
  for (std::size_t i = 0; i < ej.size(); ++i) {
    const std::string f = ef + "[" + std::to_string(i) + "]";
    c.events.push_back(el::Event::from_json(ej[i], f));
    check_event(c.events.back(), c.setup, f);
  }
  return c;
}

EngineCase read_engine_case(const std::string& path) {
  const SafetensorsFile file = read_safetensors(path);
  try {
    return parse_engine_case(file);
  } catch (const Error& e) {
    std::string msg = e.what();
    if (!e.field().empty() && msg.size() >= e.field().size() + 2) msg = msg.substr(e.field().size() + 2);
    throw Error(e.field(), msg + " (in " + path + ")");
  }
}

SafetensorsFile engine_case_file(const EngineCase& c) {
  SafetensorsFile f = fuzz_case_file(FuzzCase{c.setup.base, c.target, ref::Fault::None, {}, c.reason});
  auto evs = nlohmann::json::array();
  for (const auto& e : c.events) evs.push_back(e.to_json());
  f.metadata.erase("commands");
  f.metadata["schema"] = kEngineCaseSchema;
  auto variants = nlohmann::json::array();
  for (const auto& o : c.variants.empty() ? std::vector<el::EngineOptions>{c.setup.options} : c.variants)
    variants.push_back(o.to_json());
  f.metadata["options"] = variants.dump();
  f.metadata["fault"] = el::to_string(c.fault);
  f.metadata["events"] = evs.dump();
  return f;
}

bool is_engine_case(const std::string& path) {
  const SafetensorsFile file = read_safetensors(path);
  const auto it = file.metadata.find("schema");
  return it != file.metadata.end() && it->second == kEngineCaseSchema;
}

}  // namespace replayssm::fuzz
