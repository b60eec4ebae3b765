// The lifecycle target of an implementation in its own process (exec_target.hpp): every lifecycle command
// (setup, allocate, step, commit, copy_slot, committed_state, pool, capture and the conv component's commands)
// and the `fixture` command, framed and sent over the connection of its command line (connection.hpp), the
// answers parsed strictly (answers.hpp), pools mirrored by digest.
#include "exec_target.hpp"

#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "answers.hpp"
#include "exec_conv.hpp"
#include "replayssm/error.hpp"
#include "replayssm/frame.hpp"

namespace replayssm::exec {

using nlohmann::json;

namespace {

std::string hex64(std::uint64_t x) {
  std::ostringstream os;
  os << std::hex << x;
  return os.str();
}

}  // namespace

std::map<std::string, Tensor> run_fixture(const std::string& command, const Fixture& f) {
  const auto conn = connect(command);
  const Capabilities& caps = conn->caps();
  require(caps.runs_fixture_op(f.op), "target.fixture", "the target does not run fixture op '", f.op, "'",
          caps.protocol_minor < fixture_op_minor(f.op) ? " (" + protocol_gap(caps.protocol_minor, f.op) + ")" : "");
  Frame req;
  json outputs = json::object();
  std::map<std::string, Tensor> expected;
  for (const auto& [name, t] : f.tensors) {
    if (name.rfind("out.", 0) == 0) {
      outputs[name] = json{{"dtype", std::string(dtype_name(t.dtype))}, {"shape", t.shape}};
      expected.emplace(name, Tensor{t.dtype, t.shape, {}});
    } else {
      req.tensors.emplace(name, t);  // in.* and param.*, with their stored dtypes
    }
  }
  req.msg = json{{"op", "fixture"}, {"fixture_op", f.op}, {"config", f.config}, {"outputs", outputs}};
  return parse_fixture_answer(conn->call(req, "fixture"), expected);
}

// --- the target ------------------------------------------------------------------------------------------
namespace {


// Rows before the graph tail (protocol 1.2's live_rows; all rows of an eager step).
std::int64_t live_rows(const std::vector<ref::TargetRow>& rows) {
  std::int64_t n = 0;
  while (n < static_cast<std::int64_t>(rows.size()) && !rows[static_cast<std::size_t>(n)].graph_tail) ++n;
  return n;
}

class ExecTarget : public ref::Target {
 public:
  explicit ExecTarget(std::string command) : command_(std::move(command)), conn_(connect(command_)) {}
  std::string name() const override { return "exec:" + command_; }
  bool bit_exact() const override { return conn_->caps().bit_exact; }
  std::string design() const override { return conn_->caps().design; }
  bool pad_outputs_zero() const override { return conn_->caps().pad_outputs_zero; }
  Tolerance tolerance(const std::vector<double>& term_scale, bool state) const override {
    return tier_tolerance(conn_->caps().tier, s_.cfg, term_scale, state);
  }
  std::string unsupported(const ModelConfig& cfg, std::int32_t max_T) const override {
    return conn_->caps().unsupported(cfg, max_T);
  }
  bool implements_copy() const override { return conn_->caps().copy_slot; }
  std::vector<ref::PadConvention> pad_conventions() const override { return conn_->caps().pad_conventions; }
  bool graph_padding() const override { return conn_->caps().graph_padding; }
  bool out_of_place_commit() const override { return conn_->caps().out_of_place_commit; }
  bool captures() const override { return conn_->caps().captures(); }
  ref::StepMix step_mix() const override { return conn_->caps().step_mixes(); }
  ref::SelfClaim self_claim() const override { return conn_->caps().self_claims(); }
  bool graph_replay() const override { return conn_->caps().graph_replays(); }
  // The next step or commit carries "replay": {"rows", "T"} (protocol 1.9).
  void replaying(std::int32_t rows, std::int32_t T) override {
    require(conn_->caps().graph_replays(), "target.step.replay",
            conn_->caps().graph_replay ? "the target speaks a protocol before 1.9, which has no graph replay"
                                       : "the target does not claim the graph_replay capability");
    replay_ = json{{"rows", rows}, {"T", T}};
  }
  void capture(std::int32_t rows, std::int32_t T) override {
    require(conn_->caps().captures(), "target.capture",
            conn_->caps().capture ? "the target speaks a protocol before 1.4, which has no capture command"
                                  : "the target does not claim the capture capability");
    Frame f;
    f.msg = json{{"op", "capture"}, {"rows", rows}, {"T", T}};
    parse_capture_answer(mutate(f, "capture"));
  }

  // The conv component (protocol 1.5): frames and answers in exec_conv.hpp.
  bool conv_state() const override { return conn_->caps().conv_states(); }
  std::vector<std::vector<float>> conv_step(const std::vector<ref::TargetRow>& rows,
                                            const std::vector<ref::SequenceInputs>& inputs) override {
    return parse_conv_step_answer(mutate(conv_step_command(s_, rows, inputs), "conv_step"), s_,
                                  inputs.empty() ? 0 : inputs[0].T);
  }
  void conv_commit(const std::vector<ref::TargetRow>& rows) override { mutate(conv_commit_command(rows), "conv_commit"); }
  std::vector<float> conv_committed_state(std::int32_t layer, std::int32_t slot) const override {
    return parse_conv_committed_state_answer(
        conn_->call(conv_committed_state_command(layer, slot), "conv_committed_state"), s_);
  }
  std::vector<float> conv_pool(std::int32_t layer) const override {
    if (conv_mirror_.valid(layer)) return conv_mirror_.values(layer);
    return conv_mirror_.apply(layer, conn_->call(conv_mirror_.request(layer), "conv_pool"));
  }

  void setup(const ref::EngineSetup& s) override {
    const std::string why = conn_->caps().unsupported(s.cfg, s.max_T);
    require(why.empty(), "target.setup", why);
    require(!s.conv || conv_state(), "target.setup.conv", "the target does not keep conv windows (conv_state, 1.5)");
    require(s.step_mix.any() || conn_->caps().protocol_minor >= kStepMixMinor, "target.setup.step_mix",
            "the target speaks a protocol before 1.7, which has no step_mix");
    s_ = s;
    stride_ = s.pool_geometry().stride(s.cfg);
    Frame f;
    std::uint32_t poison_bits = 0;
    std::memcpy(&poison_bits, &s.poison, 4);
    f.msg = json{{"op", "setup"}, {"setup", s.to_json()}, {"poison_bits", hex64(poison_bits)}};
    // Before 1.6 "checkpoint" is no value of setup.gates: its gates are the realistic ones (informational).
    if (conn_->caps().protocol_minor < kL2normFormulaMinor && s.gates == ref::GateRange::Checkpoint)
      f.msg["setup"]["gates"] = "realistic";
    for (std::size_t l = 0; l < s.params.size(); ++l) {
      const auto& p = s.params[l];
      f.tensors["A_log." + std::to_string(l)] = Tensor::from_f32(DType::F32, {s.cfg.HV}, p.A_log);
      f.tensors["dt_bias." + std::to_string(l)] =
          Tensor::from_f32(DType::F32, {s.cfg.HV, s.cfg.a_width()}, p.dt_bias);
    }
    add_conv_setup_tensors(s, f);
    conn_->call(f, "setup");
    conv_mirror_.reset(s);
    const auto L = static_cast<std::size_t>(s.cfg.num_layers);
    mirror_.assign(L, std::vector<float>(static_cast<std::size_t>(s.num_slots * stride_), s.poison));
    mirror_digests_.assign(L, std::vector<std::uint64_t>(static_cast<std::size_t>(2 * s.num_slots), 0));
    mirror_valid_.assign(L, false);
    states_.clear();
  }

  void allocate(std::int32_t slot) override {
    simple(json{{"op", "allocate"}, {"slot", slot}}, "allocate");
  }

  std::vector<std::vector<float>> step(const std::vector<ref::TargetRow>& rows,
                                       const std::vector<ref::SequenceInputs>& inputs) override {
    const auto& cfg = s_.cfg;
    const std::int64_t N = inputs.empty() ? 0 : inputs[0].T;
    Frame f;
    f.msg = json{{"op", "step"}, {"rows", ref::rows_to_json(rows, true)}, {"total_tokens", N},
                 {"live_rows", live_rows(rows)}};
    take_replay(f);
    for (std::size_t l = 0; l < inputs.size(); ++l) {
      const auto& in = inputs[l];
      const std::string sfx = "." + std::to_string(l);
      f.tensors["q" + sfx] = Tensor::from_f32(cfg.act_dtype, {N, cfg.H, cfg.K}, in.q);
      f.tensors["k" + sfx] = Tensor::from_f32(cfg.act_dtype, {N, cfg.H, cfg.K}, in.k);
      f.tensors["v" + sfx] = Tensor::from_f32(cfg.act_dtype, {N, cfg.HV, cfg.V}, in.v);
      f.tensors["a" + sfx] = Tensor::from_f32(cfg.act_dtype, {N, cfg.HV, cfg.a_width()}, in.a);
      f.tensors["b" + sfx] = Tensor::from_f32(cfg.act_dtype, {N, cfg.HV}, in.b);
    }
    const Frame a = mutate(f, "step");
    std::vector<std::vector<float>> out;
    for (std::size_t l = 0; l < inputs.size(); ++l) {
      const std::string name = "o." + std::to_string(l);
      out.push_back(answer_tensor(a, name, cfg.act_dtype, {N, cfg.HV, cfg.V}, "target.step." + name).to_f32());
    }
    return out;
  }

  void commit(const std::vector<ref::TargetRow>& rows) override {
    Frame f;
    f.msg = json{{"op", "commit"}, {"rows", ref::rows_to_json(rows, false)}, {"live_rows", live_rows(rows)}};
    take_replay(f);
    mutate(f, "commit");
  }

  void copy_slot(std::int32_t src, std::int32_t dst) override {
    require(conn_->caps().copy_slot, "target.copy_slot", "the target does not implement copy_slot");
    simple(json{{"op", "copy_slot"}, {"src", src}, {"dst", dst}}, "copy_slot");
  }

  std::vector<float> committed_state(std::int32_t layer, std::int32_t slot) const override {
    const auto& cfg = s_.cfg;
    auto& cached = states_[{layer, slot}];
    Frame f;
    f.msg = json{{"op", "committed_state"}, {"layer", layer}, {"slot", slot}};
    if (cached.valid) f.msg["known"] = hex64(cached.digest);
    const Frame a = conn_->call(f, "committed_state");
    const std::uint64_t d = parse_hex64(a.msg.contains("digest") ? a.msg.at("digest") : json(),
                                        "target.committed_state.digest");
    if (cached.valid && d == cached.digest && !a.tensors.count("state")) return cached.values;
    const Shape shape = cfg.layout == StateLayout::KV ? Shape{cfg.HV, cfg.K, cfg.V} : Shape{cfg.HV, cfg.V, cfg.K};
    cached.values = answer_tensor(a, "state", cfg.state_dtype, shape, "target.committed_state.state").to_f32();
    cached.digest = d;
    cached.valid = true;
    return cached.values;
  }

  std::vector<float> pool(std::int32_t layer) const override {
    const auto l = static_cast<std::size_t>(layer);
    require(l < mirror_.size(), "layer", "is ", layer, ", outside [0, ", mirror_.size(), ")");
    if (mirror_valid_[l]) return mirror_[l];
    Frame f;
    json known = json::array();
    for (auto d : mirror_digests_[l]) known.push_back(hex64(d));
    f.msg = json{{"op", "pool"}, {"layer", layer}, {"known", known}};
    const PoolAnswer a = parse_pool_answer(conn_->call(f, "pool"), s_.num_slots, stride_, s_.cfg.state_dtype);
    std::vector<bool> sent(static_cast<std::size_t>(s_.num_slots), false);
    for (std::size_t i = 0; i < a.slots.size(); ++i) {
      const auto s = a.slots[i];
      std::copy(a.values.begin() + static_cast<std::int64_t>(i) * stride_,
                a.values.begin() + static_cast<std::int64_t>(i + 1) * stride_, mirror_[l].begin() + s * stride_);
      sent[static_cast<std::size_t>(s)] = true;
    }
    // A slot whose digests changed must come with its values: otherwise the mirror would keep stale bytes
    // under new digests and a stray write would go unseen.
    for (std::size_t i = 0; i < a.digests.size(); ++i) {
      const std::uint64_t d = a.digests[i];
      require(d == mirror_digests_[l][i] || sent[i / 2], "target.pool.slots",
              "slot ", i / 2, " changed (digest ", hex64(mirror_digests_[l][i]), " -> ", hex64(d),
              ") but its values were not sent");
      mirror_digests_[l][i] = d;
    }
    mirror_valid_[l] = true;
    return mirror_[l];
  }

 private:
  struct CachedState {
    bool valid = false;
    std::uint64_t digest = 0;
    std::vector<float> values;
  };
  Frame mutate(const Frame& f, const std::string& op) {
    std::fill(mirror_valid_.begin(), mirror_valid_.end(), false);
    conv_mirror_.invalidate();
    return conn_->call(f, op);
  }
  // Moves the announced replay (replaying) into the step or commit message f.
  void take_replay(Frame& f) {
    if (replay_.is_null()) return;
    f.msg["replay"] = std::move(replay_);
    replay_ = json();
  }
  void simple(json msg, const std::string& op) {
    Frame f;
    f.msg = std::move(msg);
    mutate(f, op);
  }

  std::string command_;
  std::shared_ptr<Connection> conn_;
  ref::EngineSetup s_;
  std::int64_t stride_ = 0;
  mutable std::vector<std::vector<float>> mirror_;                // [layer][num_slots * stride], as last fetched
  mutable std::vector<std::vector<std::uint64_t>> mirror_digests_;  // [layer][2 * slot + (0 state, 1 gap)]
  mutable std::vector<bool> mirror_valid_;                          // no mutating command since the fetch
  mutable std::map<std::pair<std::int32_t, std::int32_t>, CachedState> states_;
  mutable ConvPoolMirror conv_mirror_;
  json replay_;  // the bucket the next step or commit replays (null: none)
};

}  // namespace

std::unique_ptr<ref::Target> make_exec_target(const std::string& command) {
  require(!command.empty(), "target", "exec: needs a command, e.g. exec:'python3 my_target.py'");
  return std::make_unique<ExecTarget>(command);
}

bool register_exec_targets() {
  return ref::register_target_prefix("exec:", [](const std::string& command, ref::Fault fault) {
    require(fault == ref::Fault::None, "fault", "faults are injected into the project's own targets only; an exec: "
                                                "target carries its own");
    return make_exec_target(command);
  });
}

}  // namespace replayssm::exec
