// Shared helpers of the safetensors tests: byte builders, header surgery and RapidCheck generators.
// Every random value comes from rc::gen, so RC_PARAMS="seed=..." reproduces a run.
#pragma once

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "replayssm/error.hpp"
#include "replayssm/safetensors.hpp"

namespace replayssm {
// Counterexample printing for RapidCheck.
inline void showValue(const Tensor& t, std::ostream& os) {
  os << dtype_name(t.dtype) << shape_str(t.shape) << " (" << t.data.size() << " bytes)";
}
}  // namespace replayssm

namespace st_test {

using replayssm::DType;
using replayssm::SafetensorsFile;
using replayssm::Tensor;
using ojson = nlohmann::ordered_json;

inline const std::vector<DType> kAllDTypes{DType::BOOL, DType::U8,  DType::I8,  DType::I16, DType::U16,
                                           DType::F16,  DType::BF16, DType::I32, DType::U32, DType::F32,
                                           DType::I64,  DType::U64, DType::F64};

inline void put_le64(std::vector<std::uint8_t>& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}

// 8-byte little-endian header length, the header text as given, the data bytes.
inline std::vector<std::uint8_t> make_bytes(const std::string& header, const std::vector<std::uint8_t>& data = {}) {
  std::vector<std::uint8_t> out;
  put_le64(out, header.size());
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

inline std::uint64_t header_length(const std::vector<std::uint8_t>& bytes) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | bytes[i];
  return v;
}

// A serialized file split into its header (keys in file order) and its data section.
struct Raw {
  ojson header;
  std::vector<std::uint8_t> data;
};

inline Raw split(const std::vector<std::uint8_t>& bytes) {
  const std::uint64_t n = header_length(bytes);
  Raw r;
  r.header = ojson::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  r.data.assign(bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n), bytes.end());
  return r;
}

inline std::vector<std::uint8_t> join(const Raw& r) { return make_bytes(r.header.dump(), r.data); }

// Tensor names of a header in file (= data) order.
inline std::vector<std::string> tensor_keys(const ojson& header) {
  std::vector<std::string> out;
  for (const auto& item : header.items())
    if (item.key() != "__metadata__") out.push_back(item.key());
  return out;
}

// Dumps an object, repeating the key at `path` (a top-level key, or a key inside a top-level object) at
// the end of its object, so that the text holds that key twice.
inline std::string dump_with_duplicate(const ojson& v, const std::vector<std::string>& path, std::size_t depth = 0) {
  if (!v.is_object() || depth >= path.size()) return v.dump();
  std::string out = "{", dup;
  bool first = true;
  for (const auto& item : v.items()) {
    const bool on_path = item.key() == path[depth];
    const std::string piece =
        ojson(item.key()).dump() + ":" + (on_path ? dump_with_duplicate(item.value(), path, depth + 1) : item.value().dump());
    out += (first ? "" : ",") + piece;
    first = false;
    if (on_path && depth + 1 == path.size()) dup = piece;
  }
  if (!dup.empty()) out += "," + dup;
  return out + "}";
}

// Field and message of the Error thrown by parsing `bytes`; field "<no error>" when it parses.
struct Thrown {
  std::string field, what;
  bool mentions(const std::string& s) const { return what.find(s) != std::string::npos; }
};
inline Thrown parse_error(const std::vector<std::uint8_t>& bytes) {
  try {
    replayssm::parse_safetensors(bytes, "test-bytes");
  } catch (const replayssm::Error& e) {
    return {e.field(), e.what()};
  }
  return {"<no error>", ""};
}

template <class F>
Thrown error_of(F&& fn) {
  try {
    fn();
  } catch (const replayssm::Error& e) {
    return {e.field(), e.what()};
  }
  return {"<no error>", ""};
}

inline bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// ---- generators ----

// Text built from ASCII, JSON-special and multi-byte UTF-8 pieces (always valid UTF-8).
inline rc::Gen<std::string> gen_text() {
  return rc::gen::map(rc::gen::container<std::vector<std::string>>(rc::gen::element<std::string>(
                          "a", "b", "x", "Z", "0", "9", ".", "_", "-", " ", "'", "\"", "\\", "/", "\t", "\n", "\x01",
                          "\xc3\xa9", "\xcf\x83", "\xe2\x82\xac", "\xf0\x9f\x99\x82", "{", "}", ":", ",", "[")),
                      [](const std::vector<std::string>& parts) {
                        std::string s;
                        for (const auto& p : parts) s += p;
                        return s;
                      });
}

inline rc::Gen<std::string> gen_name() {
  return rc::gen::suchThat(gen_text(), [](const std::string& s) { return s != "__metadata__"; });
}

// Any supported dtype, rank 0..4, dimensions 0..5 (zero dimensions included), random bytes (BOOL: 0 or 1).
inline rc::Gen<Tensor> gen_tensor(bool nonzero = false) {
  return rc::gen::exec([nonzero] {
    Tensor t;
    t.dtype = *rc::gen::elementOf(kAllDTypes);
    const int rank = *rc::gen::inRange(0, 5);
    for (int i = 0; i < rank; ++i) t.shape.push_back(*rc::gen::inRange<std::int64_t>(nonzero ? 1 : 0, 6));
    const std::size_t n = static_cast<std::size_t>(t.numel()) * replayssm::dtype_size(t.dtype);
    t.data = t.dtype == DType::BOOL
                 ? *rc::gen::container<std::vector<std::uint8_t>>(n, rc::gen::inRange<std::uint8_t>(0, 2))
                 : *rc::gen::container<std::vector<std::uint8_t>>(n, rc::gen::arbitrary<std::uint8_t>());
    return t;
  });
}

inline rc::Gen<std::map<std::string, std::string>> gen_metadata() {
  return rc::gen::container<std::map<std::string, std::string>>(gen_text(), gen_text());
}

// A valid file; at least `min_nonzero` tensors hold data.
inline rc::Gen<SafetensorsFile> gen_file(int min_nonzero = 0) {
  return rc::gen::exec([min_nonzero] {
    SafetensorsFile f;
    f.tensors = *rc::gen::resize(30, rc::gen::container<std::map<std::string, Tensor>>(gen_name(), gen_tensor()));
    f.metadata = *rc::gen::resize(30, gen_metadata());
    for (int i = 0; i < min_nonzero; ++i) {
      // A distinct name (control characters do not appear in gen_name's pieces except \x01, hence \x02).
      const std::string name = *gen_name() + "\x02" + std::to_string(i);
      f.tensors.insert_or_assign(name, *gen_tensor(true));
    }
    return f;
  });
}

}  // namespace st_test
