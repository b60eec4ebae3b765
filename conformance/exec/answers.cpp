#include "answers.hpp"

#include <algorithm>

#include "replayssm/error.hpp"

namespace replayssm::exec {

using nlohmann::json;

void check_answer_ok(const json& msg, const std::string& op) {
  const auto ok = msg.is_object() ? msg.find("ok") : msg.end();
  if (msg.is_object() && ok != msg.end() && ok->is_boolean() && ok->get<bool>()) return;
  const json* err = msg.is_object() && msg.contains("error") ? &msg.at("error") : nullptr;
  const bool obj = err && err->is_object();
  const std::string field = obj && err->contains("field") && err->at("field").is_string()
                                ? err->at("field").get<std::string>()
                                : "";
  const std::string message = obj && err->contains("message") && err->at("message").is_string()
                                  ? err->at("message").get<std::string>()
                                  : msg.dump(-1, ' ', false, json::error_handler_t::replace);
  fail("target." + op + (field.empty() ? "" : "." + field), "the target refused: ", message,
       answer_is_fatal(msg) ? " (fatal: the target ended its process after this error; the next command starts a "
                              "fresh one)"
                            : "");
}

bool answer_is_fatal(const json& msg) {
  if (!msg.is_object() || !msg.contains("error") || !msg.at("error").is_object()) return false;
  const auto& err = msg.at("error");
  const auto f = err.find("fatal");
  return f != err.end() && f->is_boolean() && f->get<bool>();
}

Capabilities parse_hello_answer(const json& msg) {
  require(msg.is_object(), "target.hello", "the answer must be a JSON object");
  const auto p = msg.find("protocol");
  require(p != msg.end() && p->is_string() && p->get<std::string>() == kProtocolName, "target.hello.protocol",
          "is ", p == msg.end() ? std::string("missing") : p->dump(), ", expected ", kProtocolName);
  const auto v = msg.find("version");
  require(v != msg.end() && v->is_array() && v->size() == 2 && (*v)[0].is_number_integer() &&
              (*v)[1].is_number_integer(),
          "target.hello.version", "must be [major, minor]");
  require((*v)[0] == kProtocolMajor, "target.hello.version", "protocol major version ", (*v)[0].dump(),
          " is not supported (this judge speaks ", kProtocolMajor, ".", kProtocolMinor, ")");
  require((*v)[1] >= 0, "target.hello.version", "minor version ", (*v)[1].dump(), " is negative");
  Capabilities c = Capabilities::from_json(msg.contains("capabilities") ? msg.at("capabilities") : json::object());
  // Any minor >= 0 is read (a newer minor only adds optional fields); only "at least 1" matters here.
  c.protocol_minor = (*v)[1].is_number_unsigned() ? static_cast<int>(std::min<std::uint64_t>((*v)[1].get<std::uint64_t>(), 1u << 20))
                                                   : static_cast<int>(std::min<std::int64_t>((*v)[1].get<std::int64_t>(), 1 << 20));
  if (c.protocol_minor < kL2normFormulaMinor)
    for (L2Norm n : c.l2norms)
      require(n == L2Norm::RsqrtMul || n == L2Norm::DivSqrt || n == L2Norm::None, "target.hello.capabilities.l2norms",
              "'", to_string(n), "' (", l2norm_formula(n), ") is a form of protocol 1.", kL2normFormulaMinor,
              "; the target answered 1.", c.protocol_minor);
  return c;
}

std::uint64_t parse_hex64(const json& j, const std::string& field) {
  require(j.is_string(), field, "must be a hexadecimal string");
  const std::string& s = j.get_ref<const std::string&>();
  require(!s.empty() && s.size() <= 16 && s.find_first_not_of("0123456789abcdefABCDEF") == std::string::npos, field,
          "'", s, "' is not a 64-bit hexadecimal digest");
  std::uint64_t x = 0;
  for (char c : s) x = (x << 4) | static_cast<std::uint64_t>(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
  return x;
}

PoolAnswer parse_pool_answer(const Frame& a, std::int32_t num_slots, std::int64_t stride, DType state_dtype,
                             const std::string& op) {
  const std::string p = "target." + op + ".";
  PoolAnswer out;
  const json& m = a.msg;
  const json& digests = m.is_object() && m.contains("digests") ? m.at("digests") : json();
  require(digests.is_array() && digests.size() == 2u * static_cast<std::size_t>(num_slots), p + "digests",
          "must list 2 digests per slot (", 2 * static_cast<std::int64_t>(num_slots), ")");
  for (const auto& d : digests) out.digests.push_back(parse_hex64(d, p + "digests"));
  const json& slots = m.is_object() && m.contains("slots") ? m.at("slots") : json();
  require(slots.is_array(), p + "slots", "must be an array of slot indices");
  std::vector<bool> seen(static_cast<std::size_t>(num_slots), false);
  for (std::size_t i = 0; i < slots.size(); ++i) {
    const auto& js = slots[i];
    require(js.is_number_integer() && js.get<std::int64_t>() >= 0 && js.get<std::int64_t>() < num_slots,
            p + "slots", "entry ", i, " is not a slot index in [0, ", num_slots, ")");
    const auto s = js.get<std::int64_t>();
    require(!seen[static_cast<std::size_t>(s)], p + "slots", "entry ", i, " lists slot ", s, " again");
    seen[static_cast<std::size_t>(s)] = true;
    out.slots.push_back(s);
  }
  if (!out.slots.empty()) {
    const auto k = static_cast<std::int64_t>(out.slots.size());
    const auto it = a.tensors.find("values");
    require(it != a.tensors.end(), p + "values", "is missing from the answer");
    it->second.expect(state_dtype, {k, stride}, p + "values");
    out.values = it->second.to_f32();
  }
  return out;
}

const Tensor& answer_tensor(const Frame& a, const std::string& name, DType dtype, const Shape& shape,
                            const std::string& field) {
  const auto it = a.tensors.find(name);
  require(it != a.tensors.end(), field, "is missing from the answer");
  require(it->second.dtype == dtype, field, "has dtype ", std::string(dtype_name(it->second.dtype)), ", expected ",
          std::string(dtype_name(dtype)));
  require(it->second.shape == shape, field, "has shape ", shape_str(it->second.shape), ", expected ", shape_str(shape));
  return it->second;
}

std::map<std::string, Tensor> parse_fixture_answer(const Frame& a, const std::map<std::string, Tensor>& expected) {
  std::string names;
  for (const auto& [name, t] : expected) names += (names.empty() ? "" : ", ") + name;
  for (const auto& [name, t] : a.tensors)
    require(expected.count(name), "target.fixture." + name, "is not an output of this fixture (expected ",
            names.empty() ? std::string("none") : names, ")");
  std::map<std::string, Tensor> out;
  for (const auto& [name, want] : expected)
    out.emplace(name, answer_tensor(a, name, want.dtype, want.shape, "target.fixture." + name));
  return out;
}

void parse_capture_answer(const Frame& a) {
  check_answer_ok(a.msg, "capture");
  if (!a.tensors.empty())
    fail("target.capture." + a.tensors.begin()->first, "a capture answers no tensor, got ", a.tensors.size());
}

}  // namespace replayssm::exec
