// Rejection properties: a valid random file, one malformation, and the Error must name the right field.
#include "safetensors_gen.hpp"

using namespace replayssm;
using namespace st_test;

namespace {

std::string tf(const std::string& name) { return "tensor '" + name + "'"; }

std::uint64_t span(const ojson& entry) {
  return entry["data_offsets"][1].get<std::uint64_t>() - entry["data_offsets"][0].get<std::uint64_t>();
}

void shift(ojson& entry, std::int64_t by) {
  entry["data_offsets"][0] = entry["data_offsets"][0].get<std::int64_t>() + by;
  entry["data_offsets"][1] = entry["data_offsets"][1].get<std::int64_t>() + by;
}

}  // namespace

RC_GTEST_PROP(SafetensorsReject, TruncatedFile, ()) {
  const auto bytes = serialize_safetensors(*gen_file());
  const std::uint64_t n = header_length(bytes);
  const std::size_t cut = *rc::gen::inRange<std::size_t>(0, bytes.size());
  const Thrown t = parse_error(std::vector<std::uint8_t>(bytes.begin(), bytes.begin() + cut));
  if (cut < 8 + n) {
    RC_ASSERT(t.field == "header.length");
  } else {
    RC_ASSERT(ends_with(t.field, ".data_offsets"));
    RC_ASSERT(t.mentions("beyond the data section"));
  }
}

RC_GTEST_PROP(SafetensorsReject, HeaderLengthTooLarge, ()) {
  auto bytes = serialize_safetensors(*gen_file());
  const std::uint64_t n = *rc::gen::inRange<std::uint64_t>(kSafetensorsMaxHeader + 1, ~0ull);
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<std::uint8_t>(n >> (8 * i));
  const Thrown t = parse_error(bytes);
  RC_ASSERT(t.field == "header.length");
  RC_ASSERT(t.mentions("limit"));
}

RC_GTEST_PROP(SafetensorsReject, HeaderLengthBeyondFile, ()) {
  auto bytes = serialize_safetensors(*gen_file());
  const std::uint64_t n = *rc::gen::inRange<std::uint64_t>(bytes.size() - 8 + 1, kSafetensorsMaxHeader + 1);
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<std::uint8_t>(n >> (8 * i));
  const Thrown t = parse_error(bytes);
  RC_ASSERT(t.field == "header.length");
  RC_ASSERT(t.mentions("beyond the end of the file"));
}

RC_GTEST_PROP(SafetensorsReject, OverlappingOffsets, ()) {
  Raw r = split(serialize_safetensors(*gen_file(2)));
  std::vector<std::string> nonzero;
  for (const auto& k : tensor_keys(r.header))
    if (span(r.header[k]) > 0) nonzero.push_back(k);
  RC_ASSERT(nonzero.size() >= 2u);
  const std::size_t j = *rc::gen::inRange<std::size_t>(1, nonzero.size());
  // Move tensor j back into the bytes of the previous tensor that holds data.
  const auto k = *rc::gen::inRange<std::uint64_t>(1, span(r.header[nonzero[j - 1]]) + 1);
  shift(r.header[nonzero[j]], -static_cast<std::int64_t>(k));
  const Thrown t = parse_error(join(r));
  RC_ASSERT(ends_with(t.field, ".data_offsets"));
  RC_ASSERT(t.mentions("overlaps"));
}

RC_GTEST_PROP(SafetensorsReject, GappedOffsets, ()) {
  Raw r = split(serialize_safetensors(*gen_file(1)));
  const auto keys = tensor_keys(r.header);
  const std::size_t i = *rc::gen::inRange<std::size_t>(0, keys.size());
  const auto k = *rc::gen::inRange<std::int64_t>(1, 65);
  // Insert k bytes before tensor i and move it and every later tensor: only the gap is wrong.
  const auto at = r.header[keys[i]]["data_offsets"][0].get<std::size_t>();
  r.data.insert(r.data.begin() + static_cast<std::ptrdiff_t>(at), static_cast<std::size_t>(k), 0xab);
  for (std::size_t m = i; m < keys.size(); ++m) shift(r.header[keys[m]], k);
  const Thrown t = parse_error(join(r));
  RC_ASSERT(ends_with(t.field, ".data_offsets"));
  RC_ASSERT(t.mentions("gap"));
}

RC_GTEST_PROP(SafetensorsReject, TrailingBytes, ()) {
  auto bytes = serialize_safetensors(*gen_file());
  const auto extra = *rc::gen::nonEmpty(rc::gen::container<std::vector<std::uint8_t>>(rc::gen::arbitrary<std::uint8_t>()));
  bytes.insert(bytes.end(), extra.begin(), extra.end());
  const Thrown t = parse_error(bytes);
  RC_ASSERT(t.field == "data");
  RC_ASSERT(t.mentions(std::to_string(extra.size()) + " trailing bytes"));
}

RC_GTEST_PROP(SafetensorsReject, WrongByteSizeForDtype, ()) {
  Raw r = split(serialize_safetensors(*gen_file(1)));
  const auto keys = tensor_keys(r.header);
  const std::string name = keys[*rc::gen::inRange<std::size_t>(0, keys.size())];
  ojson& offs = r.header[name]["data_offsets"];
  const auto len = static_cast<std::int64_t>(span(r.header[name]));
  const auto delta = *rc::gen::suchThat(rc::gen::inRange<std::int64_t>(-len, 65), [](std::int64_t d) { return d != 0; });
  offs[1] = offs[1].get<std::int64_t>() + delta;
  const Thrown t = parse_error(join(r));
  RC_ASSERT(t.field == tf(name) + ".data_offsets");
  RC_ASSERT(t.mentions("needs"));
}

RC_GTEST_PROP(SafetensorsReject, NonStringMetadata, ()) {
  Raw r = split(serialize_safetensors(*gen_file()));
  const std::string key = *gen_text();
  const ojson value = *rc::gen::oneOf(rc::gen::map(rc::gen::arbitrary<int>(), [](int v) { return ojson(v); }),
                                      rc::gen::map(rc::gen::arbitrary<bool>(), [](bool v) { return ojson(v); }),
                                      rc::gen::just(ojson(nullptr)), rc::gen::just(ojson::array({"a"})),
                                      rc::gen::just(ojson::object({{"a", "b"}})), rc::gen::just(ojson(0.5)));
  if (!r.header.contains("__metadata__")) r.header["__metadata__"] = ojson::object();
  r.header["__metadata__"][key] = value;
  const Thrown t = parse_error(join(r));
  RC_ASSERT(t.field == "__metadata__." + key);
  RC_ASSERT(t.mentions("must be a string"));
}

RC_GTEST_PROP(SafetensorsReject, DuplicateKeys, ()) {
  const SafetensorsFile f = *gen_file(1);
  const Raw r = split(serialize_safetensors(f));
  const auto keys = tensor_keys(r.header);
  const std::string name = keys[*rc::gen::inRange<std::size_t>(0, keys.size())];
  std::vector<std::pair<std::vector<std::string>, std::string>> choices{
      {{name}, tf(name)}, {{name, "dtype"}, tf(name) + ".dtype"}, {{name, "shape"}, tf(name) + ".shape"},
      {{name, "data_offsets"}, tf(name) + ".data_offsets"}};
  if (!f.metadata.empty()) {
    choices.push_back({{"__metadata__"}, "__metadata__"});
    const auto& mkey = *rc::gen::elementOf(std::vector<std::string>{f.metadata.begin()->first, f.metadata.rbegin()->first});
    choices.push_back({{"__metadata__", mkey}, "__metadata__." + mkey});
  }
  const auto& choice = *rc::gen::elementOf(choices);
  const Thrown t = parse_error(make_bytes(dump_with_duplicate(r.header, choice.first), r.data));
  RC_ASSERT(t.field == choice.second);
  RC_ASSERT(t.mentions("duplicate"));
}

RC_GTEST_PROP(SafetensorsReject, UnknownDtype, ()) {
  Raw r = split(serialize_safetensors(*gen_file(1)));
  const auto keys = tensor_keys(r.header);
  const std::string name = keys[*rc::gen::inRange<std::size_t>(0, keys.size())];
  const std::string dtype = *rc::gen::oneOf(
      rc::gen::element<std::string>("F8_E4M3", "F8_E5M2", "F8_E8M0", "C64", "F4", "F6_E2M3", "F6_E3M2", "f32",
                                    "float32", "", "F32 ", "bf16"),
      rc::gen::suchThat(gen_text(), [](const std::string& s) {
        for (const DType d : kAllDTypes)
          if (s == dtype_name(d)) return false;
        return true;
      }));
  r.header[name]["dtype"] = dtype;
  const Thrown t = parse_error(join(r));
  RC_ASSERT(t.field == tf(name) + ".dtype");
  RC_ASSERT(t.mentions("unknown or unsupported dtype"));
}

RC_GTEST_PROP(SafetensorsReject, HeaderNotAnObject, ()) {
  const ojson header = *rc::gen::oneOf(
      rc::gen::map(rc::gen::arbitrary<std::int64_t>(), [](std::int64_t v) { return ojson(v); }),
      rc::gen::map(gen_text(), [](const std::string& s) { return ojson(s); }),
      rc::gen::map(rc::gen::arbitrary<bool>(), [](bool v) { return ojson(v); }), rc::gen::just(ojson(nullptr)),
      rc::gen::map(rc::gen::container<std::vector<int>>(rc::gen::arbitrary<int>()),
                   [](const std::vector<int>& v) { return ojson(v); }));
  std::string text = header.dump();
  text.append(*rc::gen::inRange<std::size_t>(0, 8), ' ');
  const Thrown t = parse_error(make_bytes(text));
  RC_ASSERT(t.field == "header");
}
