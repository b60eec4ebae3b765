// The fixture schema on top of safetensors: round trip, required metadata, naming and tolerance rules.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>

#include "replayssm/config.hpp"
#include "replayssm/error.hpp"
#include "replayssm/fixture.hpp"

using namespace replayssm;
namespace fs = std::filesystem;

namespace {

Fixture sample() {
  Fixture f;
  f.op = "gdn.recurrent";
  f.config = to_json(preset("tiny-gdn"));
  f.seed = 18446744073709551615ull;
  f.precision = "f64";
  f.tensors["in.q"] = Tensor::from_f32(DType::F32, {1, 2}, {0.5f, -1.0f});
  f.tensors["in.cu_seqlens"] = Tensor::from_i32({2}, {0, 1});
  f.tensors["param.A_log"] = Tensor::from_f32(DType::BF16, {4}, {1, 2, 3, 4});
  f.tensors["out.o"] = Tensor::from_f64(DType::F64, {1, 2}, {0.25, 0.125});
  f.tensors["out.state"] = Tensor::zeros(DType::F32, {0, 8});
  f.tolerance["out.o"] = Tolerance::allclose(1e-5, 1e-5);
  f.tolerance["out.state"] = Tolerance::exact();
  f.extra_metadata["source"] = "hand-made";
  return f;
}

struct Thrown {
  std::string field, what;
};
Thrown error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return {e.field(), e.what()};
  }
  return {"<no error>", ""};
}

void expect_same(const Fixture& a, const Fixture& b) {
  EXPECT_EQ(a.op, b.op);
  EXPECT_EQ(a.config, b.config);
  EXPECT_EQ(a.seed, b.seed);
  EXPECT_EQ(a.precision, b.precision);
  EXPECT_EQ(a.generator, b.generator);
  EXPECT_EQ(a.generator_version, b.generator_version);
  EXPECT_EQ(a.extra_metadata, b.extra_metadata);
  ASSERT_EQ(a.tolerance.size(), b.tolerance.size());
  for (const auto& [name, t] : a.tolerance) EXPECT_EQ(t.str(), b.tolerance.at(name).str()) << name;
  SafetensorsFile ta, tb;
  ta.tensors = a.tensors;
  tb.tensors = b.tensors;
  EXPECT_TRUE(ta == tb);
}

// The stored form of sample(), with one metadata value replaced (or erased when value is null).
Thrown load_error_with(const std::string& key, const char* value) {
  SafetensorsFile st = fixture_to_safetensors(sample());
  if (value) {
    st.metadata[key] = value;
  } else {
    st.metadata.erase(key);
  }
  return error_of([&] { fixture_from_safetensors(st); });
}

}  // namespace

TEST(Fixture, SavesAndLoads) {
  const fs::path path = fs::temp_directory_path() / ("replayssm-fixture-" + std::to_string(::getpid()) + ".safetensors");
  save_fixture(path.string(), sample());
  const Fixture back = load_fixture(path.string());
  expect_same(sample(), back);
  // The stored metadata spells the schema as documented.
  const SafetensorsFile raw = read_safetensors(path.string());
  fs::remove(path);
  EXPECT_EQ(raw.metadata.at("schema"), "replayssm.fixture");
  EXPECT_EQ(raw.metadata.at("schema_version"), "1");
  EXPECT_EQ(raw.metadata.at("op"), "gdn.recurrent");
  EXPECT_EQ(raw.metadata.at("seed"), "18446744073709551615");
  EXPECT_EQ(raw.metadata.at("precision"), "f64");
  EXPECT_EQ(raw.metadata.at("generator"), "splitmix64/v1");
  // The project's one version (the VERSION file, read by CMake into project_version()).
  std::string version;
  std::getline(std::ifstream(std::string(REPLAYSSM_SOURCE_DIR) + "/VERSION"), version);
  ASSERT_FALSE(version.empty());
  EXPECT_EQ(raw.metadata.at("generator_version"), version);
  const std::string tolerance_text = R"J({"out.o":"allclose(atol=1e-05,rtol=1e-05)","out.state":"exact"})J";
  EXPECT_EQ(raw.metadata.at("tolerance"), tolerance_text);
  EXPECT_EQ(config_from_json(nlohmann::json::parse(raw.metadata.at("config"))).name, "tiny-gdn");
  EXPECT_EQ(raw.metadata.at("source"), "hand-made");
  // Deterministic bytes.
  EXPECT_EQ(serialize_safetensors(fixture_to_safetensors(sample())),
            serialize_safetensors(fixture_to_safetensors(back)));
}

TEST(Fixture, TensorHelpers) {
  const Fixture f = sample();
  EXPECT_EQ(f.tensor("in.q", DType::F32, {1, 2}).to_f32(), (std::vector<float>{0.5f, -1.0f}));
  EXPECT_EQ(error_of([&] { f.tensor("in.q", DType::BF16, {1, 2}); }).field, "tensor 'in.q'");
  EXPECT_EQ(error_of([&] { f.tensor("in.q", DType::F32, {2, 1}); }).field, "tensor 'in.q'");
  EXPECT_EQ(error_of([&] { f.tensor("in.k"); }).field, "tensor 'in.k'");
  EXPECT_EQ(f.tolerance_for("out.o").kind, Tolerance::Kind::AllClose);
  EXPECT_EQ(error_of([&] { f.tolerance_for("in.q"); }).field, "__metadata__.tolerance['in.q']");
  EXPECT_EQ(f.tensor_names("out."), (std::vector<std::string>{"out.o", "out.state"}));
  EXPECT_EQ(f.tensor_names("in."), (std::vector<std::string>{"in.cu_seqlens", "in.q"}));
}

TEST(Fixture, EveryRequiredKeyIsRequired) {
  for (const char* key : {"schema", "schema_version", "op", "config", "seed", "precision", "generator",
                          "generator_version", "tolerance"}) {
    EXPECT_EQ(load_error_with(key, nullptr).field, std::string("__metadata__.") + key) << key;
  }
}

TEST(Fixture, RefusesIllFormedMetadata) {
  struct Case {
    const char* key;
    const char* value;
    const char* field;
  };
  const Case cases[] = {
      {"schema", "replayssm.fixtures", "__metadata__.schema"},
      {"schema_version", "2", "__metadata__.schema_version"},
      {"op", "", "__metadata__.op"},
      {"config", "{not json", "__metadata__.config"},
      {"seed", "", "__metadata__.seed"},
      {"seed", "-1", "__metadata__.seed"},
      {"seed", "+1", "__metadata__.seed"},
      {"seed", "007", "__metadata__.seed"},
      {"seed", "1.5", "__metadata__.seed"},
      {"seed", "18446744073709551616", "__metadata__.seed"},
      {"precision", "bf16", "__metadata__.precision"},
      {"generator", "", "__metadata__.generator"},
      {"generator_version", "", "__metadata__.generator_version"},
      {"config", R"({"K":8,"K":16})", "__metadata__.config"},
      {"tolerance", "[]", "__metadata__.tolerance"},
      {"tolerance", R"J({"out.o":"exact","out.state":"exact","out.o":"rel_rms(1)"})J", "__metadata__.tolerance"},
      {"tolerance", "not json", "__metadata__.tolerance"},
      {"tolerance", R"({"out.o":"exact"})", "__metadata__.tolerance['out.state']"},
      {"tolerance", R"({"out.o":"exact","out.state":"exact","out.gone":"exact"})",
       "__metadata__.tolerance['out.gone']"},
      {"tolerance", R"({"out.o":"exact","out.state":"exact","in.q":"exact"})", "__metadata__.tolerance['in.q']"},
      {"tolerance", R"({"out.o":"close-enough","out.state":"exact"})", "__metadata__.tolerance['out.o']"},
      {"tolerance", R"({"out.o":1e-5,"out.state":"exact"})", "__metadata__.tolerance['out.o']"},
  };
  {
    // A NUL inside nested JSON text (a JSON "\u0000" in the header) must not end the text early.
    SafetensorsFile st = fixture_to_safetensors(sample());
    st.metadata["config"] = std::string("{}\0junk", 7);
    EXPECT_EQ(error_of([&] { fixture_from_safetensors(st); }).field, "__metadata__.config");
  }
  for (const auto& c : cases) EXPECT_EQ(load_error_with(c.key, c.value).field, c.field) << c.key << "=" << c.value;
  // Boundary seeds are fine.
  EXPECT_EQ(load_error_with("seed", "0").field, "<no error>");
  EXPECT_EQ(load_error_with("seed", "18446744073709551615").field, "<no error>");
}

TEST(Fixture, RefusesBadTensorNames) {
  for (const char* name : {"q", "in.", "out", "inputs.q", "param"}) {
    SafetensorsFile st = fixture_to_safetensors(sample());
    st.tensors[name] = Tensor::zeros(DType::F32, {1});
    EXPECT_EQ(error_of([&] { fixture_from_safetensors(st); }).field, std::string("tensor '") + name + "'") << name;
  }
}

TEST(Fixture, SaveRefusesAnInvalidFixtureAndWritesNothing) {
  const fs::path path = fs::temp_directory_path() / ("replayssm-bad-" + std::to_string(::getpid()) + ".safetensors");
  Fixture f = sample();
  f.tolerance.erase("out.o");
  EXPECT_EQ(error_of([&] { save_fixture(path.string(), f); }).field, "__metadata__.tolerance['out.o']");
  f = sample();
  f.extra_metadata["seed"] = "1";
  EXPECT_EQ(error_of([&] { save_fixture(path.string(), f); }).field, "__metadata__.seed");
  f = sample();
  f.precision = "f16";
  EXPECT_EQ(error_of([&] { save_fixture(path.string(), f); }).field, "__metadata__.precision");
  EXPECT_FALSE(fs::exists(path));
}

TEST(Fixture, LoadErrorsNameTheFile) {
  const fs::path path = fs::temp_directory_path() / ("replayssm-plain-" + std::to_string(::getpid()) + ".safetensors");
  SafetensorsFile plain;
  plain.tensors["x"] = Tensor::zeros(DType::F32, {1});
  write_safetensors_atomic(path.string(), plain);
  const Thrown t = error_of([&] { load_fixture(path.string()); });
  fs::remove(path);
  EXPECT_EQ(t.field, "__metadata__.schema");
  EXPECT_NE(t.what.find(path.string()), std::string::npos) << t.what;
}

RC_GTEST_PROP(FixtureProp, RoundTripsSeedOpAndTolerances, ()) {
  Fixture f = sample();
  f.seed = *rc::gen::arbitrary<std::uint64_t>();
  f.op = *rc::gen::nonEmpty(rc::gen::container<std::string>(rc::gen::inRange('a', 'z')));
  f.precision = *rc::gen::element<std::string>("f32", "f64");
  // Decimal tolerances of at most six significant digits (what Tolerance::str() writes) round-trip exactly.
  const auto dec = [](int mantissa, int exponent) {
    return std::stod(std::to_string(mantissa) + "e" + std::to_string(exponent));
  };
  const auto pick = rc::gen::exec([dec] {
    switch (*rc::gen::inRange(0, 3)) {
      case 0: return Tolerance::exact();
      case 1:
        return Tolerance::allclose(dec(*rc::gen::inRange(0, 1000000), *rc::gen::inRange(-12, 1)),
                                   dec(*rc::gen::inRange(0, 1000000), *rc::gen::inRange(-12, 1)));
      default: return Tolerance::rel_rms(dec(*rc::gen::inRange(0, 1000000), *rc::gen::inRange(-12, 1)));
    }
  });
  f.tolerance["out.o"] = *pick;
  f.tolerance["out.state"] = *pick;
  const Fixture back = fixture_from_safetensors(parse_safetensors(serialize_safetensors(fixture_to_safetensors(f))));
  RC_ASSERT(back.seed == f.seed);
  RC_ASSERT(back.op == f.op);
  RC_ASSERT(back.precision == f.precision);
  for (const auto& [name, t] : f.tolerance) {
    const Tolerance& b = back.tolerance.at(name);
    RC_ASSERT(b.kind == t.kind);
    RC_ASSERT(b.atol == t.atol);
    RC_ASSERT(b.rtol == t.rtol);
    RC_ASSERT(b.ratio == t.ratio);
  }
}
