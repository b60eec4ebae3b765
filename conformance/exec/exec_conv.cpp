// The conv component's commands of the target protocol (exec_conv.hpp).
#include "exec_conv.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "answers.hpp"
#include "replayssm/error.hpp"
#include "replayssm/lifecycle/conv_component.hpp"

namespace replayssm::exec {

using nlohmann::json;

namespace {

const ref::ConvSetup& conv_of(const ref::EngineSetup& s, const std::string& field) {
  require(s.conv.has_value(), field, "the setup has no conv component");
  return *s.conv;
}

std::int64_t live_rows_of(const std::vector<ref::TargetRow>& rows) {
  std::int64_t n = 0;
  while (n < static_cast<std::int64_t>(rows.size()) && !rows[static_cast<std::size_t>(n)].graph_tail) ++n;
  return n;
}

std::string hex(std::uint64_t x) {
  std::ostringstream os;
  os << std::hex << x;
  return os.str();
}

// The answer holds exactly the tensors of `want` (name -> dtype, shape).
void expect_exactly(const Frame& a, const std::vector<std::pair<std::string, Tensor>>& want, const std::string& op) {
  for (const auto& entry : a.tensors) {
    // (a named variable, not a structured binding: clang 14 cannot capture a binding in a lambda)
    const std::string& name = entry.first;
    const bool known = std::any_of(want.begin(), want.end(), [&](const auto& w) { return w.first == name; });
    require(known, "target." + op + "." + name, "is not an answer tensor of ", op);
  }
  for (const auto& [name, w] : want) {
    const auto it = a.tensors.find(name);
    require(it != a.tensors.end(), "target." + op + "." + name, "is missing from the answer");
    it->second.expect(w.dtype, w.shape, "target." + op + "." + name);
  }
}

}  // namespace

std::int64_t conv_stride(const ref::ConvSetup& c) { return c.cfg.state_elems() + 4; }

void add_conv_setup_tensors(const ref::EngineSetup& s, Frame& f) {
  if (!s.conv) return;
  const auto& c = *s.conv;
  const std::int64_t C = c.cfg.channels(), W = c.cfg.kernel_size;
  for (std::size_t l = 0; l < c.params.size(); ++l) {
    f.tensors["conv_weight." + std::to_string(l)] = Tensor::from_f32(DType::F32, {C, W}, c.params[l].weight);
    if (c.cfg.bias) f.tensors["conv_bias." + std::to_string(l)] = Tensor::from_f32(DType::F32, {C}, c.params[l].bias);
  }
}

Frame conv_step_command(const ref::EngineSetup& s, const std::vector<ref::TargetRow>& rows,
                        const std::vector<ref::SequenceInputs>& inputs) {
  const auto& c = conv_of(s, "target.conv_step");
  const std::int64_t N = inputs.empty() ? 0 : inputs[0].T;
  Frame f;
  f.msg = json{{"op", "conv_step"}, {"rows", ref::rows_to_json(rows, true)}, {"total_tokens", N},
               {"live_rows", live_rows_of(rows)}};
  for (std::size_t l = 0; l < inputs.size(); ++l)
    f.tensors["x." + std::to_string(l)] = Tensor::from_f32(
        s.cfg.act_dtype, {N, c.cfg.channels()}, ref::conv_raw_inputs(s.cfg, inputs[l], 0, static_cast<int>(N)));
  return f;
}

std::vector<std::vector<float>> parse_conv_step_answer(const Frame& a, const ref::EngineSetup& s, std::int64_t N) {
  const auto& c = conv_of(s, "target.conv_step");
  std::vector<std::pair<std::string, Tensor>> want;
  for (std::int32_t l = 0; l < s.cfg.num_layers; ++l)
    want.push_back({"y." + std::to_string(l), Tensor{s.cfg.act_dtype, {N, c.cfg.channels()}, {}}});
  expect_exactly(a, want, "conv_step");
  std::vector<std::vector<float>> y;
  for (const auto& [name, w] : want) y.push_back(a.tensors.at(name).to_f32());
  return y;
}

Frame conv_commit_command(const std::vector<ref::TargetRow>& rows) {
  Frame f;
  f.msg = json{{"op", "conv_commit"}, {"rows", ref::rows_to_json(rows, false)}, {"live_rows", live_rows_of(rows)}};
  return f;
}

Frame conv_committed_state_command(std::int32_t layer, std::int32_t slot) {
  Frame f;
  f.msg = json{{"op", "conv_committed_state"}, {"layer", layer}, {"slot", slot}};
  return f;
}

std::vector<float> parse_conv_committed_state_answer(const Frame& a, const ref::EngineSetup& s) {
  const auto& c = conv_of(s, "target.conv_committed_state");
  const std::int64_t C = c.cfg.channels(), W1 = c.cfg.kernel_size - 1;
  expect_exactly(a, {{"state", Tensor{c.cfg.state_dtype, {C, W1}, {}}}}, "conv_committed_state");
  return a.tensors.at("state").to_f32();
}

void ConvPoolMirror::reset(const ref::EngineSetup& s) {
  pools_.clear();
  digests_.clear();
  valid_.clear();
  if (!s.conv) return;
  num_slots_ = s.num_slots;
  stride_ = conv_stride(*s.conv);
  dtype_ = s.conv->cfg.state_dtype;
  const auto L = static_cast<std::size_t>(s.cfg.num_layers);
  pools_.assign(L, std::vector<float>(static_cast<std::size_t>(num_slots_ * stride_), s.poison));
  digests_.assign(L, std::vector<std::uint64_t>(static_cast<std::size_t>(2 * num_slots_), 0));
  valid_.assign(L, false);
}

bool ConvPoolMirror::valid(std::int32_t layer) const {
  require(layer >= 0 && static_cast<std::size_t>(layer) < pools_.size(), "layer", "is ", layer, ", outside [0, ",
          pools_.size(), ") (or the setup has no conv component)");
  return valid_[static_cast<std::size_t>(layer)];
}

Frame ConvPoolMirror::request(std::int32_t layer) const {
  json known = json::array();
  for (auto d : digests_.at(static_cast<std::size_t>(layer))) known.push_back(hex(d));
  Frame f;
  f.msg = json{{"op", "conv_pool"}, {"layer", layer}, {"known", known}};
  return f;
}

const std::vector<float>& ConvPoolMirror::apply(std::int32_t layer, const Frame& answer) {
  const auto l = static_cast<std::size_t>(layer);
  const PoolAnswer a = parse_pool_answer(answer, num_slots_, stride_, dtype_, "conv_pool");
  auto& pool = pools_.at(l);
  std::vector<bool> sent(static_cast<std::size_t>(num_slots_), false);
  for (std::size_t i = 0; i < a.slots.size(); ++i) {
    const auto from = a.values.begin() + static_cast<std::int64_t>(i) * stride_;
    std::copy(from, from + stride_, pool.begin() + a.slots[i] * stride_);
    sent[static_cast<std::size_t>(a.slots[i])] = true;
  }
  // A changed digest without the slot's values would leave stale bytes under a new digest: a stray write unseen.
  for (std::size_t i = 0; i < a.digests.size(); ++i) {
    require(a.digests[i] == digests_[l][i] || sent[i / 2], "target.conv_pool.slots", "slot ", i / 2,
            " changed (digest ", hex(digests_[l][i]), " -> ", hex(a.digests[i]), ") but its values were not sent");
    digests_[l][i] = a.digests[i];
  }
  valid_[l] = true;
  return pool;
}

}  // namespace replayssm::exec
