// Round-trip properties of the safetensors codec: every dtype, random shapes (zero dimensions and
// scalars included), random names and metadata.
#include "safetensors_gen.hpp"

using namespace replayssm;
using namespace st_test;

RC_GTEST_PROP(SafetensorsProp, RoundTripsEveryFile, ()) {
  const SafetensorsFile f = *gen_file();
  const auto bytes = serialize_safetensors(f);
  const SafetensorsFile back = parse_safetensors(bytes, "round trip");
  RC_ASSERT(back == f);
  // Deterministic: the decoded file encodes to the same bytes.
  RC_ASSERT(serialize_safetensors(back) == bytes);
}

RC_GTEST_PROP(SafetensorsProp, RoundTripsOneTensorOfEachDtype, ()) {
  for (const DType dt : kAllDTypes) {
    Tensor t = *gen_tensor();
    // Same shape and byte count, the dtype under test.
    const std::size_t n = static_cast<std::size_t>(t.numel()) * dtype_size(dt);
    t.dtype = dt;
    t.data = dt == DType::BOOL ? *rc::gen::container<std::vector<std::uint8_t>>(n, rc::gen::inRange<std::uint8_t>(0, 2))
                               : *rc::gen::container<std::vector<std::uint8_t>>(n, rc::gen::arbitrary<std::uint8_t>());
    SafetensorsFile f;
    f.tensors.emplace(*gen_name(), t);
    RC_ASSERT(parse_safetensors(serialize_safetensors(f)) == f);
  }
}

RC_GTEST_PROP(SafetensorsProp, WriterLayoutIsAlignedAndPadded, ()) {
  const SafetensorsFile f = *gen_file();
  const auto bytes = serialize_safetensors(f);
  const std::uint64_t n = header_length(bytes);
  RC_ASSERT(n % 8 == 0);
  RC_ASSERT(bytes.at(8) == '{');
  const Raw r = split(bytes);
  std::size_t prev_size = 8;
  std::string prev_name;
  std::uint64_t cursor = 0;
  for (const auto& name : tensor_keys(r.header)) {
    const Tensor& t = f.tensors.at(name);
    const std::size_t es = dtype_size(t.dtype);
    const std::uint64_t begin = r.header[name]["data_offsets"][0].get<std::uint64_t>();
    RC_ASSERT(begin == cursor);
    RC_ASSERT(begin % es == 0);
    RC_ASSERT(es < prev_size || (es == prev_size && (prev_name.empty() || prev_name < name)));
    cursor = r.header[name]["data_offsets"][1].get<std::uint64_t>();
    prev_size = es;
    prev_name = name;
  }
  RC_ASSERT(cursor == r.data.size());
}
