// replayssm/fixture.hpp — reference fixtures: one safetensors file per reference case.
//
// A fixture holds the inputs ("in.*"), the parameters ("param.*") and the expected results ("out.*") of one
// reference operation, plus string metadata that says how they were made and how to compare against them.
// docs/fixture-format.md is the full description for producers and consumers outside this project.
//
// __metadata__ keys (all values are strings, as safetensors requires):
//   schema             "replayssm.fixture"
//   schema_version     "1"
//   op                 non-empty name of the reference operation, e.g. "gdn.recurrent"
//   config             JSON text: the model config (to_json(ModelConfig)) or any JSON for other ops
//   seed               decimal uint64, no sign, no leading zeros
//   precision          "f64" or "f32": the arithmetic of the reference that produced out.*
//   generator          name of the input generator, e.g. kGeneratorName ("splitmix64/v1")
//   generator_version  version of the project that produced the file, e.g. "0.1.0"
//   tolerance          JSON text: an object mapping every out.* tensor to a Tolerance::str() spelling
// Other keys are kept in Fixture::extra_metadata.
//
// load_fixture / fixture_from_safetensors refuse (Error; the field names the problem):
//   any safetensors format error (see safetensors.hpp);
//   "__metadata__.<key>"             a required key missing, or a value of the wrong form (config and
//                                    tolerance: JSON text with a duplicate key or a NUL is refused too);
//   "tensor '<name>'"                a name without one of the prefixes in. / param. / out.;
//   "__metadata__.tolerance['<n>']"  an entry that names no tensor or a tensor that is not out.*, an
//                                    unparsable tolerance, or an out.* tensor that has no entry.
// save_fixture / fixture_to_safetensors apply the same checks to the Fixture (plus: extra_metadata must not
// use a reserved key) before anything is written.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "replayssm/compare.hpp"
#include "replayssm/rng.hpp"
#include "replayssm/safetensors.hpp"
#include "replayssm/tensor.hpp"
#include "replayssm/version.hpp"

namespace replayssm {

inline constexpr const char* kFixtureSchema = "replayssm.fixture";
inline constexpr const char* kFixtureSchemaVersion = "1";

struct Fixture {
  std::string op;                              // e.g. "gdn.recurrent"
  nlohmann::json config;                       // stored as JSON text in __metadata__.config
  std::uint64_t seed = 0;
  std::string precision = "f64";               // "f64" or "f32"
  std::string generator = kGeneratorName;
  std::string generator_version = project_version();
  std::map<std::string, Tolerance> tolerance;  // one entry per out.* tensor
  std::map<std::string, Tensor> tensors;       // "in.*", "param.*", "out.*"
  std::map<std::string, std::string> extra_metadata;

  // The tensor called `name`; throws Error("tensor '<name>'") if absent.
  const Tensor& tensor(const std::string& name) const;
  // Same, and checks dtype and shape (Error("tensor '<name>'") naming what differs).
  const Tensor& tensor(const std::string& name, DType dtype, const Shape& shape) const;
  // Tolerance of an expected tensor; throws Error("__metadata__.tolerance['<name>']") if absent.
  const Tolerance& tolerance_for(const std::string& name) const;
  // Sorted names of the tensors whose name starts with prefix ("in.", "param.", "out.").
  std::vector<std::string> tensor_names(std::string_view prefix) const;
};

// Throws Error naming the first problem (see the list above).
void validate_fixture(const Fixture& f);

SafetensorsFile fixture_to_safetensors(const Fixture& f);
Fixture fixture_from_safetensors(const SafetensorsFile& file);

// Reads and validates a fixture file; error messages name the path.
Fixture load_fixture(const std::string& path);
// Validates, then writes atomically (write_safetensors_atomic): an invalid fixture writes nothing.
void save_fixture(const std::string& path, const Fixture& f);

}  // namespace replayssm
