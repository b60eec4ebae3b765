// MRoPE session commands over the target protocol (exec_mrope.hpp).
#include "exec_mrope.hpp"

#include <nlohmann/json.hpp>

#include "answers.hpp"
#include "connection.hpp"
#include "replayssm/error.hpp"

namespace replayssm::exec {

using nlohmann::json;

namespace {

class ExecSession : public mrope::SessionTarget {
 public:
  explicit ExecSession(std::string command) : command_(std::move(command)), conn_(connect(command_)) {
    const Capabilities& c = conn_->caps();
    require(!c.mrope_models.empty(), "target.mrope", "the target does not claim the mrope capability");
    require(c.mropes(), "target.mrope", "the target speaks protocol 1.", c.protocol_minor,
            ", which has no MRoPE commands (added in 1.10)");
  }
  std::string name() const override { return "exec:" + command_; }
  std::vector<std::string> models() const override { return conn_->caps().mrope_models; }
  bool pad_zero() const override { return conn_->caps().mrope_pad_zero; }

  void setup(const mrope::Preset& preset, std::int64_t q_heads, std::int64_t k_heads) override {
    preset_ = preset, q_heads_ = q_heads, k_heads_ = k_heads;
    call(json{{"op", "mrope_setup"}, {"config", mrope::preset_to_json(preset)}, {"q_heads", q_heads},
              {"k_heads", k_heads}},
         "mrope_setup");
  }
  void admit(std::int64_t req, const std::vector<mrope::Segment>& segments, std::int64_t cached) override {
    mrope::SessionCommand c;
    c.op = mrope::SessionCommand::Op::Admit, c.req = req, c.segments = segments, c.cached = cached;
    call(c.to_json(), "mrope_admit");
  }
  mrope::StepAnswer step(const std::vector<mrope::SessionRow>& rows, const std::vector<float>& q,
                         const std::vector<float>& k) override {
    mrope::SessionCommand c;
    c.op = mrope::SessionCommand::Op::Step, c.rows = rows;
    const std::int64_t N = c.tokens(), D = preset_.head_dim;
    Frame f;
    f.msg = c.to_json();
    f.tensors["q"] = Tensor::from_f32(DType::F32, {N, q_heads_, D}, q);
    f.tensors["k"] = Tensor::from_f32(DType::F32, {N, k_heads_, D}, k);
    return parse_mrope_step_answer(live()->call(f, "mrope_step"), N, q_heads_, k_heads_, D);
  }
  void accept(const std::vector<std::pair<std::int64_t, std::int64_t>>& accepted) override {
    mrope::SessionCommand c;
    c.op = mrope::SessionCommand::Op::Accept, c.accepted = accepted;
    call(c.to_json(), "mrope_accept");
  }
  void release(std::int64_t req) override { call(json{{"op", "mrope_release"}, {"req", req}}, "mrope_release"); }

 private:
  // The connection, restarted (hello included) after a failed command ended the last one.
  std::shared_ptr<Connection> live() {
    if (!conn_->alive()) conn_ = connect(command_);
    return conn_;
  }
  void call(const json& msg, const std::string& op) {
    Frame f;
    f.msg = msg;
    const Frame a = live()->call(f, op);
    require(a.tensors.empty(), "target." + op, "the answer must carry no tensor, got ", a.tensors.size());
  }
  std::string command_;
  std::shared_ptr<Connection> conn_;
  mrope::Preset preset_;
  std::int64_t q_heads_ = 1, k_heads_ = 1;
};

}  // namespace

mrope::StepAnswer parse_mrope_step_answer(const Frame& a, std::int64_t N, std::int64_t q_heads, std::int64_t k_heads,
                                          std::int64_t head_dim) {
  for (const auto& [name, t] : a.tensors)
    require(name == "positions" || name == "index" || name == "q_rot" || name == "k_rot", "target.mrope_step." + name,
            "is not an answer tensor of mrope_step (positions, index, q_rot, k_rot)");
  mrope::StepAnswer s;
  s.positions = answer_tensor(a, "positions", DType::I64, {3, N}, "target.mrope_step.positions").to_i64();
  s.index = answer_tensor(a, "index", DType::I64, {N}, "target.mrope_step.index").to_i64();
  s.q_rot = answer_tensor(a, "q_rot", DType::F32, {N, q_heads, head_dim}, "target.mrope_step.q_rot").to_f32();
  s.k_rot = answer_tensor(a, "k_rot", DType::F32, {N, k_heads, head_dim}, "target.mrope_step.k_rot").to_f32();
  return s;
}

std::unique_ptr<mrope::SessionTarget> exec_session_target(const std::string& command) {
  return std::make_unique<ExecSession>(command);
}

}  // namespace replayssm::exec
