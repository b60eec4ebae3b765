// Hand-built safetensors files, byte by byte, against the reader and the writer.
#include <cstring>

#include "safetensors_gen.hpp"

using namespace replayssm;
using namespace st_test;

namespace {

std::vector<std::uint8_t> f32_bytes(std::initializer_list<float> v) {
  std::vector<std::uint8_t> out;
  for (float x : v) {
    const std::uint32_t u = f32_bits(x);
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::uint8_t>(u >> (8 * i)));
  }
  return out;
}

const std::string kEntryX = R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";

}  // namespace

TEST(SafetensorsHand, ReadsAFileBuiltByteByByte) {
  const std::string header =
      R"({"__metadata__":{"seed":"7","note":"{\"a\": 1}"},)"
      R"("w":{"dtype":"F32","shape":[2,1],"data_offsets":[0,8]},)"
      R"("s":{"dtype":"I16","shape":[],"data_offsets":[8,10]},)"
      R"("e":{"dtype":"F64","shape":[0,3],"data_offsets":[10,10]}})";
  std::vector<std::uint8_t> data = f32_bytes({1.0f, -2.5f});
  data.push_back(0xfd);  // int16 -3, little-endian
  data.push_back(0xff);
  const auto bytes = make_bytes(header, data);
  ASSERT_EQ(bytes[0], header.size());  // length, little-endian
  ASSERT_EQ(bytes[1], 0);

  const SafetensorsFile f = parse_safetensors(bytes);
  ASSERT_EQ(f.tensors.size(), 3u);
  EXPECT_EQ(f.metadata.at("seed"), "7");
  EXPECT_EQ(f.metadata.at("note"), "{\"a\": 1}");
  const Tensor& w = f.tensors.at("w");
  EXPECT_EQ(w.dtype, DType::F32);
  EXPECT_EQ(w.shape, (Shape{2, 1}));
  EXPECT_EQ(w.to_f32(), (std::vector<float>{1.0f, -2.5f}));
  const Tensor& s = f.tensors.at("s");
  EXPECT_EQ(s.dtype, DType::I16);
  EXPECT_TRUE(s.shape.empty());
  EXPECT_EQ(s.to_i64(), (std::vector<std::int64_t>{-3}));
  const Tensor& e = f.tensors.at("e");
  EXPECT_EQ(e.shape, (Shape{0, 3}));
  EXPECT_TRUE(e.data.empty());
}

TEST(SafetensorsHand, WriterProducesTheExpectedBytes) {
  SafetensorsFile f;
  f.tensors["x"] = Tensor::from_f32(DType::F32, {2}, {1.0f, -2.5f});
  f.tensors["b"] = Tensor{DType::U8, {3}, {1, 2, 3}};
  f.metadata["k"] = "v";
  const std::string json =
      R"({"__metadata__":{"k":"v"},"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"U8","shape":[3],"data_offsets":[8,11]}})";
  std::string padded = json;
  padded.append((8 - json.size() % 8) % 8, ' ');
  std::vector<std::uint8_t> data = f32_bytes({1.0f, -2.5f});
  data.insert(data.end(), {1, 2, 3});
  EXPECT_EQ(serialize_safetensors(f), make_bytes(padded, data));
}

TEST(SafetensorsHand, EmptyFileIsEightBytesOfHeader) {
  const auto bytes = serialize_safetensors(SafetensorsFile{});
  EXPECT_EQ(bytes, make_bytes("{}      "));
  EXPECT_EQ(parse_safetensors(bytes), SafetensorsFile{});
}

TEST(SafetensorsHand, WriterAlignsEveryTensor) {
  SafetensorsFile f;
  f.tensors["a_u8"] = Tensor{DType::U8, {3}, {1, 2, 3}};
  f.tensors["b_f64"] = Tensor::zeros(DType::F64, {2});
  f.tensors["c_bf16"] = Tensor::zeros(DType::BF16, {1});
  f.tensors["d_i32"] = Tensor::zeros(DType::I32, {3});
  f.tensors["e_i64"] = Tensor::zeros(DType::I64, {0});
  const auto bytes = serialize_safetensors(f);
  EXPECT_EQ(header_length(bytes) % 8, 0u);
  const Raw r = split(bytes);
  EXPECT_EQ(tensor_keys(r.header), (std::vector<std::string>{"b_f64", "e_i64", "d_i32", "c_bf16", "a_u8"}));
  for (const auto& name : tensor_keys(r.header)) {
    const std::uint64_t begin = r.header[name]["data_offsets"][0].get<std::uint64_t>();
    EXPECT_EQ(begin % dtype_size(f.tensors.at(name).dtype), 0u) << name;
  }
}

TEST(SafetensorsHand, BoolAndPaddingAndWhitespace) {
  // Trailing blanks (the writer's padding) and a newline are fine inside the header length.
  const auto ok = make_bytes(R"({"m":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}}   )"
                             "\n",
                             {0, 1});
  EXPECT_EQ(parse_safetensors(ok).tensors.at("m").data, (std::vector<std::uint8_t>{0, 1}));
  const auto bad = make_bytes(R"({"m":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", {0, 2});
  EXPECT_EQ(parse_error(bad).field, "tensor 'm'.data");
}

TEST(SafetensorsHand, EveryTruncationIsRefused) {
  SafetensorsFile f;
  f.tensors["x"] = Tensor::from_f32(DType::F32, {3}, {1, 2, 3});
  f.metadata["k"] = "v";
  const auto bytes = serialize_safetensors(f);
  const std::uint64_t n = header_length(bytes);
  for (std::size_t cut = 0; cut < bytes.size(); ++cut) {
    const Thrown t = parse_error(std::vector<std::uint8_t>(bytes.begin(), bytes.begin() + cut));
    EXPECT_EQ(t.field, cut < 8 + n ? "header.length" : "tensor 'x'.data_offsets") << "cut at " << cut;
  }
}

struct BadCase {
  const char* what;
  std::vector<std::uint8_t> bytes;
  std::string field;
  std::string mention;
};

TEST(SafetensorsHand, RefusesEachMalformation) {
  const auto d8 = f32_bytes({1, 2});
  auto with_length = [](std::uint64_t n, const std::string& rest) {
    std::vector<std::uint8_t> out;
    put_le64(out, n);
    out.insert(out.end(), rest.begin(), rest.end());
    return out;
  };
  std::vector<BadCase> cases{
      {"too short", {1, 0, 0}, "header.length", "fewer than the 8"},
      {"header too large", with_length(100'000'001, "{}"), "header.length", "limit"},
      {"huge header length", with_length(~0ull, "{}"), "header.length", "limit"},
      {"header beyond file", with_length(9, R"({}      )"), "header.length", "beyond"},
      {"leading blank", make_bytes(" {}"), "header", "start with"},
      {"byte-order mark", make_bytes("\xef\xbb\xbf{}"), "header", "start with"},
      {"array header", make_bytes("[]"), "header", "start with"},
      {"empty header", make_bytes(""), "header", "start with"},
      {"bad JSON", make_bytes(R"({"x":)"), "header", "invalid JSON"},
      {"NUL padding", make_bytes(std::string("{}\0\0", 4)), "header", "invalid JSON"},
      {"NUL then text", make_bytes(std::string("{}\0{\"x\":1}", 10)), "header", "NUL byte at offset 2"},
      {"NUL inside", make_bytes(std::string("{\"a\0\":\"b\"}", 10)), "header", "NUL byte at offset 3"},
      {"bad UTF-8", make_bytes("{\"\xff\":1}"), "header", "invalid JSON"},
      {"entry not object", make_bytes(R"({"x":5})"), "tensor 'x'", "must be an object"},
      {"gap",
       make_bytes(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                  R"("y":{"dtype":"U8","shape":[2],"data_offsets":[6,8]}})",
                  d8),
       "tensor 'y'.data_offsets", "gap"},
      {"overlap",
       make_bytes(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                  R"("y":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                  d8),
       "tensor 'y'.data_offsets", "overlaps tensor 'x'"},
      {"zero-size inside another",
       make_bytes(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                  R"("z":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})",
                  d8),
       "tensor 'z'.data_offsets", "overlaps"},
      {"end beyond data", make_bytes(kEntryX, {1, 2, 3}), "tensor 'x'.data_offsets", "beyond the data section"},
      {"trailing byte", make_bytes(kEntryX, f32_bytes({1, 2, 3})), "data", "4 trailing bytes"},
      {"data without tensors", make_bytes("{}", {0}), "data", "1 trailing bytes"},
      {"metadata not object", make_bytes(R"({"__metadata__":["a"]})"), "__metadata__", "must be an object"},
      {"metadata number", make_bytes(R"({"__metadata__":{"seed":7}})"), "__metadata__.seed", "must be a string"},
      {"metadata nested", make_bytes(R"({"__metadata__":{"cfg":{"a":"b"}}})"), "__metadata__.cfg",
       "must be a string"},
      {"duplicate tensor", make_bytes(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                      R"("x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                                      d8),
       "tensor 'x'", "duplicate"},
      {"duplicate metadata key", make_bytes(R"({"__metadata__":{"k":"a","k":"b"}})"), "__metadata__.k", "duplicate"},
      {"duplicate metadata", make_bytes(R"({"__metadata__":{},"__metadata__":{}})"), "__metadata__", "duplicate"},
  };
  // Malformed entries of a file whose one tensor 'x' has 8 data bytes: the members of x's entry as written, the
  // member the error must name (field "tensor 'x'.<member>") and what the message must mention.
  struct BadEntry {
    const char* what;
    const char* members;
    const char* member;
    const char* mention;
  };
  const BadEntry bad_entries[] = {
      {"extra key", R"("dtype":"F32","shape":[2],"data_offsets":[0,8],"y":1)", "y", "unexpected key"},
      {"missing dtype", R"("shape":[2],"data_offsets":[0,8])", "dtype", "missing"},
      {"dtype not string", R"("dtype":4,"shape":[2],"data_offsets":[0,8])", "dtype", "string"},
      {"unknown dtype", R"("dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8])", "dtype", "F8_E4M3"},
      {"lower-case dtype", R"("dtype":"f32","shape":[2],"data_offsets":[0,8])", "dtype", "f32"},
      {"missing shape", R"("dtype":"F32","data_offsets":[0,8])", "shape", "missing"},
      {"shape not array", R"("dtype":"F32","shape":2,"data_offsets":[0,8])", "shape", "array"},
      {"negative dim", R"("dtype":"F32","shape":[-2],"data_offsets":[0,8])", "shape", "non-negative integer"},
      {"float dim", R"("dtype":"F32","shape":[2.0],"data_offsets":[0,8])", "shape", "non-negative integer"},
      {"dim beyond int64", R"("dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,8])", "shape", "too large"},
      {"numel overflow", R"("dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8])", "shape", "overflow"},
      {"byte size overflow", R"("dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,8])", "shape", "overflow"},
      {"missing offsets", R"("dtype":"F32","shape":[2])", "data_offsets", "missing"},
      {"three offsets", R"("dtype":"F32","shape":[2],"data_offsets":[0,8,8])", "data_offsets", "[begin, end]"},
      {"negative offset", R"("dtype":"F32","shape":[2],"data_offsets":[-1,8])", "data_offsets", "non-negative"},
      {"begin after end", R"("dtype":"F32","shape":[0],"data_offsets":[8,0])", "data_offsets", "after end"},
      {"wrong size", R"("dtype":"F32","shape":[3],"data_offsets":[0,8])", "data_offsets", "needs 12"},
      {"starts after 0", R"("dtype":"F32","shape":[1],"data_offsets":[4,8])", "data_offsets", "gap"},
      {"duplicate entry key", R"("dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8])", "dtype", "duplicate"},
  };
  for (const BadEntry& e : bad_entries)
    cases.push_back({e.what, make_bytes(std::string(R"({"x":{)") + e.members + "}}", d8),
                     std::string("tensor 'x'.") + e.member, e.mention});
  for (const auto& c : cases) {
    const Thrown t = parse_error(c.bytes);
    EXPECT_EQ(t.field, c.field) << c.what << ": " << t.what;
    EXPECT_TRUE(t.mentions(c.mention)) << c.what << ": '" << t.what << "' should mention '" << c.mention << "'";
    EXPECT_TRUE(t.mentions("(in test-bytes)")) << c.what << ": " << t.what;
  }
}

TEST(SafetensorsHand, WriterRefusesInvalidInput) {
  SafetensorsFile f;
  f.tensors["x"] = Tensor{DType::F32, {2}, {0, 0, 0}};
  EXPECT_EQ(error_of([&] { serialize_safetensors(f); }).field, "tensor 'x'.data");
  f.tensors.clear();
  f.tensors["__metadata__"] = Tensor::zeros(DType::F32, {1});
  EXPECT_EQ(error_of([&] { serialize_safetensors(f); }).field, "tensor '__metadata__'");
  f.tensors.clear();
  f.tensors["bad\xff"] = Tensor::zeros(DType::F32, {1});
  EXPECT_EQ(error_of([&] { serialize_safetensors(f); }).field, "tensor 'bad\xff'");
  f.tensors.clear();
  f.tensors["neg"] = Tensor{DType::F32, {-1}, {}};
  EXPECT_EQ(error_of([&] { serialize_safetensors(f); }).field, "tensor 'neg'.shape");
  f.tensors.clear();
  f.metadata["k"] = "\xc3";
  EXPECT_EQ(error_of([&] { serialize_safetensors(f); }).field, "__metadata__.k");
}

TEST(SafetensorsHand, DeeplyNestedHeaderIsRefusedBeforeParsing) {
  std::string shape(5000, '[');
  shape += std::string(5000, ']');
  const std::string header = "{\"x\":{\"dtype\":\"F32\",\"shape\":" + shape + ",\"data_offsets\":[0,0]}}";
  std::vector<std::uint8_t> bytes(8);
  const std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) bytes[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(n >> (8 * i));
  bytes.insert(bytes.end(), header.begin(), header.end());
  try {
    replayssm::parse_safetensors(bytes, "deep");
    FAIL() << "a 5000-deep header was accepted";
  } catch (const replayssm::Error& e) {
    EXPECT_NE(std::string(e.what()).find("nesting"), std::string::npos) << e.what();
  }
}
