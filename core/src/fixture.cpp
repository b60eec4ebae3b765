#include "replayssm/fixture.hpp"

#include <array>
#include <vector>

#include "replayssm/error.hpp"
#include "replayssm/strict_json.hpp"

namespace replayssm {

namespace {

constexpr std::array<const char*, 9> kReservedKeys{"schema",    "schema_version",    "op",
                                                    "config",    "seed",              "precision",
                                                    "generator", "generator_version", "tolerance"};
constexpr std::array<const char*, 3> kPrefixes{"in.", "param.", "out."};

std::string meta_field(const std::string& key) { return "__metadata__." + key; }
std::string tol_field(const std::string& name) { return "__metadata__.tolerance['" + name + "']"; }
std::string tensor_field(const std::string& name) { return "tensor '" + name + "'"; }

bool starts_with(const std::string& s, std::string_view p) { return s.compare(0, p.size(), p) == 0; }

bool is_reserved(const std::string& key) {
  for (const char* k : kReservedKeys)
    if (key == k) return true;
  return false;
}

std::uint64_t parse_seed(const std::string& s) { return parse_decimal_u64(s, meta_field("seed")); }

// Checks that hold for a fixture whichever direction it travels.
void check_common(const std::string& op, const std::string& precision, const std::string& generator,
                  const std::string& generator_version, const std::map<std::string, Tensor>& tensors,
                  const std::map<std::string, Tolerance>& tolerance) {
  require(!op.empty(), meta_field("op"), "must be a non-empty operation name");
  require(precision == "f64" || precision == "f32", meta_field("precision"), "must be f64 or f32, got '",
          precision, "'");
  require(!generator.empty(), meta_field("generator"), "must be non-empty");
  require(!generator_version.empty(), meta_field("generator_version"), "must be non-empty");
  for (const auto& [name, t] : tensors) {
    bool ok = false;
    for (const char* p : kPrefixes) ok = ok || (starts_with(name, p) && name.size() > std::string_view(p).size());
    require(ok, tensor_field(name), "a fixture tensor name starts with in., param. or out. followed by a name");
  }
  for (const auto& [name, tol] : tolerance) {
    require(tensors.count(name) == 1, tol_field(name), "names no tensor of the fixture");
    require(starts_with(name, "out."), tol_field(name), "a tolerance applies to expected (out.*) tensors only");
    (void)tol;
  }
  for (const auto& [name, t] : tensors) {
    if (starts_with(name, "out."))
      require(tolerance.count(name) == 1, tol_field(name), "missing: every out.* tensor needs a tolerance");
  }
}

const std::string& required(const std::map<std::string, std::string>& m, const std::string& key) {
  const auto it = m.find(key);
  require(it != m.end(), meta_field(key), "missing (a fixture records ", key, ")");
  return it->second;
}

// JSON text nested in a metadata string: a duplicate key (nlohmann keeps the last one) and a NUL character
// (its lexer stops there) are refused (strict_json.hpp).
nlohmann::json parse_json_text(const std::string& text, const std::string& field) {
  return parse_strict_json(text, field);
}

Fixture from_file_impl(const SafetensorsFile& file) {
  const auto& m = file.metadata;
  const std::string& schema = required(m, "schema");
  require(schema == kFixtureSchema, meta_field("schema"), "is '", schema, "', expected '", kFixtureSchema, "'");
  const std::string& version = required(m, "schema_version");
  require(version == kFixtureSchemaVersion, meta_field("schema_version"), "is '", version,
          "', this reader knows version ", kFixtureSchemaVersion);

  Fixture f;
  f.op = required(m, "op");
  f.config = parse_json_text(required(m, "config"), meta_field("config"));
  f.seed = parse_seed(required(m, "seed"));
  f.precision = required(m, "precision");
  f.generator = required(m, "generator");
  f.generator_version = required(m, "generator_version");

  const nlohmann::json tol = parse_json_text(required(m, "tolerance"), meta_field("tolerance"));
  require(tol.is_object(), meta_field("tolerance"), "must be a JSON object mapping out.* names to tolerances");
  for (const auto& item : tol.items()) {
    require(item.value().is_string(), tol_field(item.key()), "must be a string such as \"exact\"");
    f.tolerance.emplace(item.key(), Tolerance::parse(item.value().get<std::string>(), tol_field(item.key())));
  }
  f.tensors = file.tensors;
  for (const auto& [k, v] : m)
    if (!is_reserved(k)) f.extra_metadata.emplace(k, v);
  check_common(f.op, f.precision, f.generator, f.generator_version, f.tensors, f.tolerance);
  return f;
}

}  // namespace

const Tensor& Fixture::tensor(const std::string& name) const {
  const auto it = tensors.find(name);
  require(it != tensors.end(), tensor_field(name), "not in the fixture (op ", op, ")");
  return it->second;
}

const Tensor& Fixture::tensor(const std::string& name, DType dtype, const Shape& shape) const {
  const Tensor& t = tensor(name);
  t.expect(dtype, shape, tensor_field(name));
  return t;
}

const Tolerance& Fixture::tolerance_for(const std::string& name) const {
  const auto it = tolerance.find(name);
  require(it != tolerance.end(), tol_field(name), "no tolerance recorded");
  return it->second;
}

std::vector<std::string> Fixture::tensor_names(std::string_view prefix) const {
  std::vector<std::string> out;
  for (const auto& kv : tensors)
    if (starts_with(kv.first, prefix)) out.push_back(kv.first);
  return out;
}

void validate_fixture(const Fixture& f) {
  check_common(f.op, f.precision, f.generator, f.generator_version, f.tensors, f.tolerance);
  for (const auto& kv : f.extra_metadata)
    require(!is_reserved(kv.first), meta_field(kv.first), "is a reserved fixture key; set the Fixture field instead");
}

SafetensorsFile fixture_to_safetensors(const Fixture& f) {
  validate_fixture(f);
  SafetensorsFile out;
  out.tensors = f.tensors;
  out.metadata = f.extra_metadata;
  nlohmann::json tol = nlohmann::json::object();
  for (const auto& [name, t] : f.tolerance) tol[name] = t.str();
  out.metadata["schema"] = kFixtureSchema;
  out.metadata["schema_version"] = kFixtureSchemaVersion;
  out.metadata["op"] = f.op;
  try {
    out.metadata["config"] = f.config.dump();
  } catch (const nlohmann::json::exception& e) {
    fail(meta_field("config"), "cannot be written as JSON text: ", e.what());
  }
  out.metadata["seed"] = std::to_string(f.seed);
  out.metadata["precision"] = f.precision;
  out.metadata["generator"] = f.generator;
  out.metadata["generator_version"] = f.generator_version;
  out.metadata["tolerance"] = tol.dump();
  return out;
}

Fixture fixture_from_safetensors(const SafetensorsFile& file) { return from_file_impl(file); }

Fixture load_fixture(const std::string& path) {
  const SafetensorsFile file = read_safetensors(path);
  try {
    return from_file_impl(file);
  } catch (const Error& e) {
    std::string msg = e.what();
    if (!e.field().empty() && msg.size() >= e.field().size() + 2) msg = msg.substr(e.field().size() + 2);
    throw Error(e.field(), msg + " (in " + path + ")");
  }
}

void save_fixture(const std::string& path, const Fixture& f) {
  write_safetensors_atomic(path, fixture_to_safetensors(f));
}

}  // namespace replayssm
