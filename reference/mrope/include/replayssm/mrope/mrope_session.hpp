// replayssm/mrope/mrope_session.hpp — MRoPE bookkeeping judged through a session of engine-like commands
// (protocol 1.10, docs/target-protocol.md "MRoPE positions (1.10)"; docs/mrope.md section 7).
//
// A session is what an engine's position code sees: requests admitted with their prompts (text, image and video
// segments), forwards of packed ragged batches (prefill chunks, verify windows, decode tokens, bucket padding at
// the tail), the accepted counts of each verify, and requests leaving. An implementation answers every forward
// with, token by token in the packed order: the (t, h, w) rope position, the absolute index (the token's KV slot
// in its request's sequence; -1 for padding) and q and k rotated. The judge follows every request with its own
// PositionTracker (mrope.hpp) and judges each token:
//   * positions and index: exact (integers);
//   * q_rot, k_rot of real tokens: allclose, rtol 0, rotary_tolerance(P, max|x|) (mrope_fixture.hpp: about twice a
//     first-order bound of any binary32 rotary path), P the largest |position| of the step's real tokens and
//     max|x| over the step's q and k; the expected values are the double-precision rotation rounded once;
//   * padding tokens (pad_positions "zero"): positions 0 on every axis and q, k unrotated, bitwise.
// Errors: malformed commands are Error naming the field ("commands[3].rows[1].tokens").
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "replayssm/fixture.hpp"
#include "replayssm/mrope/mrope.hpp"

namespace replayssm::mrope {

enum class RowKind : std::uint8_t { Prefill, Verify, Decode, Pad };
std::string to_string(RowKind);
RowKind parse_row_kind(const std::string& s, const std::string& field);

// One row of a forward: `tokens` prompt tokens (prefill), a window of T = tokens (verify: the pending token and
// T - 1 drafts), the pending token alone (decode, tokens 1), or `tokens` padding tokens (pad, req -1, last row).
struct SessionRow {
  RowKind kind = RowKind::Prefill;
  std::int64_t req = -1;
  std::int64_t tokens = 0;
  bool operator==(const SessionRow&) const = default;
};

struct SessionCommand {
  enum class Op : std::uint8_t { Admit, Step, Accept, Release };
  Op op = Op::Step;
  std::int64_t req = -1;                                     // admit, release
  std::vector<Segment> segments;                             // admit
  std::int64_t cached = 0;                                   // admit: prompt tokens already computed (a prefix
                                                             // hit), 0 <= cached < prompt_len
  std::vector<SessionRow> rows;                              // step
  std::vector<std::pair<std::int64_t, std::int64_t>> accepted;  // accept: (req, n) per verify row of the step

  std::int64_t tokens() const;  // step: the packed token count N (padding included)
  nlohmann::ordered_json to_json() const;  // the protocol message without "op" prefix rules: {"op": "mrope_step", ...}
  static SessionCommand from_json(const nlohmann::json& j, const std::string& field);
  std::string str() const;      // one line: "step [req 2 verify 4, req 0 prefill 7, pad 5]"
};

// The preset as mrope_setup sends it (the full configuration, so an implementation needs no table).
nlohmann::ordered_json preset_to_json(const Preset& p);
Preset preset_from_json(const nlohmann::json& j, const std::string& field);

struct SessionCase {
  Preset preset;
  std::int64_t q_heads = 2, k_heads = 1;
  std::uint64_t seed = 0;  // the inputs of step c are drawn from (seed, c)
  std::vector<SessionCommand> commands;

  nlohmann::ordered_json to_json() const;
  static SessionCase from_json(const nlohmann::json& j, const std::string& field);
};

// q [N, q_heads, head_dim] and k [N, k_heads, head_dim] of the step at command c, uniform in [-1, 1) from the
// portable generator (deterministic in seed and c).
std::pair<std::vector<float>, std::vector<float>> step_inputs(const SessionCase& sc, std::size_t c);

// What a forward answers, in the packed order.
struct StepAnswer {
  std::vector<std::int64_t> positions;  // [3, N] row-major (t row, h row, w row)
  std::vector<std::int64_t> index;      // [N]
  std::vector<float> q_rot, k_rot;      // [N, heads, head_dim]
};

// An implementation of the session commands (exec: the protocol, conformance/exec/exec_mrope.hpp).
class SessionTarget {
 public:
  virtual ~SessionTarget() = default;
  virtual std::string name() const = 0;
  virtual std::vector<std::string> models() const = 0;  // the presets it claims
  virtual bool pad_zero() const = 0;                    // pad_positions "zero"
  virtual void setup(const Preset& preset, std::int64_t q_heads, std::int64_t k_heads) = 0;
  virtual void admit(std::int64_t req, const std::vector<Segment>& segments, std::int64_t cached) = 0;
  virtual StepAnswer step(const std::vector<SessionRow>& rows, const std::vector<float>& q,
                          const std::vector<float>& k) = 0;
  virtual void accept(const std::vector<std::pair<std::int64_t, std::int64_t>>& accepted) = 0;
  virtual void release(std::int64_t req) = 0;
};

// The reference's expected answers: one PositionTracker per live request. apply() checks that a command is
// valid for the session so far (Error naming the field) and returns the expected answer of a step.
class SessionOracle {
 public:
  SessionOracle(const Preset& preset, std::int64_t q_heads, std::int64_t k_heads);
  std::optional<StepAnswer> apply(const SessionCommand& c, const std::vector<float>& q, const std::vector<float>& k,
                                  const std::string& field);
  const PositionTracker* request(std::int64_t req) const;
  const std::vector<std::int64_t>& live() const { return order_; }   // admission order
  bool awaiting_accept() const { return !pending_verify_.empty(); }
  // The verify rows of the last step and their T, until its accept.
  const std::vector<std::pair<std::int64_t, std::int64_t>>& pending_verify() const { return pending_verify_; }

 private:
  Preset preset_;
  Rotary rot_;
  std::int64_t q_heads_, k_heads_;
  std::map<std::int64_t, PositionTracker> req_;
  std::vector<std::int64_t> order_;
  std::vector<std::pair<std::int64_t, std::int64_t>> pending_verify_;
};

// The position a campaign must reach: long contexts (a cos/sin cache too short, positions in bf16 or fp16) show
// only past it.
inline constexpr std::int64_t kLongPosition = 4096;

// What a campaign exercised (the MRoPE line of a verdict).
struct SessionCoverage {
  long cases = 0, steps = 0;
  long prefill_chunks = 0, vision_chunks = 0, split_items = 0;  // chunks holding vision tokens; ending inside an item
  long verify_rows = 0, partial_accepts = 0, decode_rows = 0;
  long mixed_steps = 0, ragged_steps = 0, permuted_steps = 0;  // prefill with verify/decode; widths differ; rows
                                                                 // not in admission order
  long sat_out = 0;          // steps where a live request had no row
  long pad_tails = 0;        // steps with bucket padding
  long negative_delta = 0;   // requests with delta < 0 stepped past their prompt
  long releases = 0, readmits = 0;  // requests leaving; an id admitted again
  long releases_mid_prefill = 0;    // requests leaving before their prompt was computed
  long prefix_hits = 0;             // requests admitted with cached prompt tokens
  std::int64_t max_position = 0;    // the largest position of a real token judged
  std::map<std::string, long> models;  // cases per preset

  void merge(const SessionCoverage& o);
  nlohmann::ordered_json to_json() const;
  static SessionCoverage from_json(const nlohmann::json& j);
  std::string str() const;  // one line
  // What a claim of `models` (with pad judged or not) leaves unexercised.
  std::vector<std::string> unmet(const std::vector<std::string>& models) const;
};

struct SessionFailure {
  std::size_t command = 0;
  std::string check;    // positions, index, q_rot, k_rot, pad, error
  std::string message;  // the row, request, kind, token place, absolute index, axis or element, expected, got
};

struct SessionReport {
  bool ok = true;
  std::optional<SessionFailure> failure;
  SessionCoverage coverage;  // of the commands that ran
};

// The inputs (q, k) of the step at command c: step_inputs by default, a trace's stored tensors when replayed.
using StepInputs = std::function<std::pair<std::vector<float>, std::vector<float>>(std::size_t c)>;

// Runs a case through the target and judges every step; stops at the first failure. Never throws for the
// target's errors (a failure with check "error"); throws Error for a case that is invalid itself.
SessionReport run_session(const SessionCase& sc, SessionTarget& target, const StepInputs& inputs = nullptr);

// --- MRoPE traces: fixtures of op "mrope.session" (docs/fixture-format.md) ---------------------------------
// config = SessionCase::to_json(); for the step at command c the tensors in.{c}.q F32 [N, q_heads, head_dim],
// in.{c}.k F32 [N, k_heads, head_dim] and the expected out.{c}.positions I64 [3, N], out.{c}.index I64 [N],
// out.{c}.q_rot, out.{c}.k_rot F32 (tolerances: exact, exact, and the step's rotary bound).
inline constexpr const char* kSessionOp = "mrope.session";
Fixture session_fixture(const SessionCase& sc);
// The case of a trace (Error naming the config field) and its stored inputs (Error naming the tensor).
SessionCase session_case_of(const Fixture& f);
StepInputs stored_inputs(const Fixture& f);
// Recomputes every out.* tensor of a trace from its config and in.* tensors (what `replayssm check` compares).
std::map<std::string, Tensor> session_fixture_outputs(const Fixture& f);

// Draws a case for `model` from `seed` (docs/target-protocol.md "The campaign and the traces").
struct DrawOptions {
  int steps_min = 6, steps_max = 14;
  int max_live = 4;
  int max_T = 8;
  int bucket = 8;  // padding up to the next multiple
  int q_heads = 0, k_heads = 0;  // 0: drawn (1..3 q heads, 1..2 k heads)
};
SessionCase draw_session(const std::string& model, std::uint64_t seed, const DrawOptions& o = {});

// The reference implementation of the session commands (the tracker and the double-precision rotation): what
// the judge's own tests run, and the base of the teeth tests' faulty targets.
std::unique_ptr<SessionTarget> reference_session_target();

}  // namespace replayssm::mrope
