// Pure parsing of the answers an implementation sends over the target protocol (docs/target-protocol.md):
// no process, no I/O, so hostile answers can be fuzzed directly (fuzzing/fuzz_exec_answer.cpp). The exec
// target (exec_target.cpp) reads every answer through these functions.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "exec_target.hpp"
#include "replayssm/dtype.hpp"
#include "replayssm/frame.hpp"

namespace replayssm::exec {

// Throws Error("target.<op>[.<error.field>]", "the target refused: <error.message>") unless msg.ok is true;
// a fatal error's message adds that the process ended and the next command starts a fresh one.
// A non-object msg, an "ok" that is not a boolean and an "error" of any shape are read without throwing
// anything but Error.
void check_answer_ok(const nlohmann::json& msg, const std::string& op);
// Whether an error answer says the target process ends after it (error.fatal == true: a sticky device fault,
// docs/target-protocol.md "Errors"); false for anything else, malformed answers included.
bool answer_is_fatal(const nlohmann::json& msg);

// The hello answer: "protocol" must be kProtocolName, "version" [major, minor] integers with major ==
// kProtocolMajor, "capabilities" (optional) per Capabilities::from_json. Error("target.hello.<key>").
Capabilities parse_hello_answer(const nlohmann::json& msg);

// A 64-bit digest as 1..16 hexadecimal digits. Error(field) otherwise.
std::uint64_t parse_hex64(const nlohmann::json& j, const std::string& field);

// The answer to "pool": 2 digests per slot (state, gap) and the values of the slots listed in "slots" (each in
// [0, num_slots), no slot twice) as tensor "values" [len(slots), stride] of state_dtype. `op` names the command
// in the error fields ("pool", or "conv_pool" for the conv windows of protocol 1.5).
struct PoolAnswer {
  std::vector<std::uint64_t> digests;   // 2 * num_slots
  std::vector<std::int64_t> slots;      // slots whose values were sent
  std::vector<float> values;            // slots.size() * stride
};
PoolAnswer parse_pool_answer(const Frame& a, std::int32_t num_slots, std::int64_t stride, DType state_dtype,
                             const std::string& op = "pool");

// Tensor `name` of an answer, of exactly `dtype` and `shape`: Error(field) saying it is missing, or which dtype or
// shape it has instead. Every answer parser reads its tensors through this.
const Tensor& answer_tensor(const Frame& a, const std::string& name, DType dtype, const Shape& shape,
                            const std::string& field);

// The answer to "fixture": exactly the tensors named in `expected` (the fixture's out.* tensors: name, dtype,
// shape), each with that dtype and shape; nothing else. Error("target.fixture.<name>") naming the tensor that
// is missing, extra, of another dtype or of another shape. Returns the answered tensors.
std::map<std::string, Tensor> parse_fixture_answer(const Frame& a, const std::map<std::string, Tensor>& expected);

// The answer to "capture" (1.4): ok, and no tensor (a capture changes nothing the judge reads from it).
// Error("target.capture.<name>") naming the first tensor answered.
void parse_capture_answer(const Frame& a);

}  // namespace replayssm::exec
