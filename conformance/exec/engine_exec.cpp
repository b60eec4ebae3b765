// The engine protocol's judge side (engine_exec.hpp).
#include "engine_exec.hpp"

#include <chrono>
#include <map>
#include <memory>
#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>

#include "answers.hpp"
#include "child_process.hpp"
#include "exec_target.hpp"
#include "replayssm/error.hpp"
#include "replayssm/frame.hpp"
#include "replayssm/tier.hpp"

namespace replayssm::exec {

namespace el = ref::engine_level;
using nlohmann::json;

namespace {

std::string hex32(std::uint32_t x) {
  std::ostringstream os;
  os << std::hex << x;
  return os.str();
}

const Tensor& answered(const Frame& f, const std::string& name, DType dtype, const Shape& shape, const std::string& op) {
  return answer_tensor(f, name, dtype, shape, "engine." + op + "." + name);
}

std::int32_t int_field(const json& j, const char* key, const std::string& field) {
  require(j.is_object() && j.contains(key) && j.at(key).is_number_integer(), field + "." + key,
          "must be an integer");
  const auto x = j.at(key).get<std::int64_t>();
  require(x >= -1 && x <= (1ll << 31) - 1, field + "." + key, "is out of range");
  return static_cast<std::int32_t>(x);
}

// One engine process per command line, kept for every case of a campaign (a setup discards the last case)
// until it fails; the next case then starts a fresh one.
struct Process {
  explicit Process(const std::string& command) : child(command) {}
  ~Process() {
    if (!alive) return;
    try {
      const auto bytes = encode_frame(Frame{json{{"op", "shutdown"}}, {}});
      child.write_all(bytes.data(), bytes.size(), std::chrono::steady_clock::now() + std::chrono::seconds(2));
    } catch (const Error&) {
    }
  }
  ChildProcess child;
  bool alive = true;
  bool greeted = false;
  json hello;
};

std::shared_ptr<Process> connect(const std::string& command) {
  static std::map<std::string, std::shared_ptr<Process>> live;
  auto& p = live[command];
  if (!p || !p->alive) p = std::make_shared<Process>(command);
  return p;
}

class EngineExec : public el::RequestEngine {
 public:
  explicit EngineExec(std::string command) : command_(std::move(command)), proc_(connect(command_)) {
    if (!proc_->greeted) {
      proc_->hello = call(json{{"op", "hello"}, {"protocol", kEngineProtocolName},
                              {"version", {kEngineProtocolMajor, kEngineProtocolMinor}}}, {}, "hello",
                         startup_timeout()).msg;
      proc_->greeted = true;
    }
    const json& msg = proc_->hello;
    require(msg.value("protocol", "") == kEngineProtocolName, "engine.hello.protocol", "is ",
            msg.value("protocol", json()).dump(), ", expected ", kEngineProtocolName);
    const json v = msg.value("version", json());
    require(v.is_array() && v.size() == 2 && v[0].is_number_integer() && v[0].get<int>() == kEngineProtocolMajor,
            "engine.hello.version", "is ", v.dump(), ", this judge speaks ", kEngineProtocolMajor, ".",
            kEngineProtocolMinor);
    require(v[1].is_number_integer() && v[1].get<std::int64_t>() >= 0, "engine.hello.version", "is ", v.dump(),
            ": the minor version must be a non-negative integer");
    const std::int64_t minor = v[1].get<std::int64_t>();
    const json caps = msg.value("capabilities", json::object());
    require(caps.is_object(), "engine.hello.capabilities", "must be an object");
    name_ = caps.value("name", std::string());
    bit_exact_ = caps.value("bit_exact", false);
    tier_ = parse_tier(caps.value("tier", std::string("fp32")), "engine.hello.capabilities.tier");
    snapshots_ = claim(caps, "prefix_snapshots", minor);
    migrates_ = claim(caps, "migrates", minor);
  }

  std::string name() const override { return "exec:" + command_ + (name_.empty() ? "" : " (" + name_ + ")"); }
  bool bit_exact() const override { return bit_exact_; }
  Tolerance tolerance(double scale, bool state) const override { return tier_tolerance(tier_, s_.base.cfg, scale, state); }

  void setup(const el::EngineLevelSetup& s) override {
    s_ = s;
    stride_ = s.base.pool_geometry().stride(s.base.cfg);
    std::uint32_t poison = 0;
    std::memcpy(&poison, &s.base.poison, 4);
    std::map<std::string, Tensor> t;
    for (std::size_t l = 0; l < s.base.params.size(); ++l) {
      t["A_log." + std::to_string(l)] = Tensor::from_f32(DType::F32, {s.base.cfg.HV}, s.base.params[l].A_log);
      t["dt_bias." + std::to_string(l)] =
          Tensor::from_f32(DType::F32, {s.base.cfg.HV, s.base.cfg.a_width()}, s.base.params[l].dt_bias);
    }
    call(json{{"op", "setup"}, {"setup", s.base.to_json()}, {"options", s.options.to_json()},
              {"poison_bits", hex32(poison)}},
         t, "setup");
  }

  void admit(std::int32_t req, const std::vector<ref::SequenceInputs>& prompt, std::int32_t max_new) override {
    call(json{{"op", "admit"}, {"req", req}, {"max_new", max_new}, {"tokens", prompt[0].T}}, tokens({prompt}), "admit");
  }
  void prefix_hit(std::int32_t req, std::int32_t from, const std::vector<ref::SequenceInputs>& prompt,
                  std::int32_t max_new) override {
    call(json{{"op", "prefix_hit"}, {"req", req}, {"from", from}, {"max_new", max_new}, {"tokens", prompt[0].T}},
         tokens({prompt}), "prefix_hit");
  }
  // Version 0.2: prefix snapshots and migration, sent only to an engine that claims them.
  bool prefix_snapshots() const override { return snapshots_; }
  bool migrates() const override { return migrates_; }
  void snapshot_hit(std::int32_t req, std::int32_t from, const std::vector<ref::SequenceInputs>& prompt,
                    std::int32_t max_new) override {
    require(snapshots_, "engine.snapshot_hit", "the engine does not claim prefix_snapshots");
    call(json{{"op", "snapshot_hit"}, {"req", req}, {"from", from}, {"max_new", max_new}, {"tokens", prompt[0].T}},
         tokens({prompt}), "snapshot_hit");
  }
  std::int32_t snapshot_tokens(std::int32_t req) const override {
    require(snapshots_, "engine.snapshot", "the engine does not claim prefix_snapshots");
    const Frame a = call(json{{"op", "snapshot"}, {"req", req}}, {}, "snapshot");
    require(a.tensors.empty(), "engine.snapshot.state", "must not be answered when no layer is asked");
    return snapshot_boundary(a.msg);
  }
  std::vector<float> snapshot_state(std::int32_t req, std::int32_t layer) const override {
    require(snapshots_, "engine.snapshot", "the engine does not claim prefix_snapshots");
    const auto& cfg = s_.base.cfg;
    const Frame a = call(json{{"op", "snapshot"}, {"req", req}, {"layer", layer}}, {}, "snapshot");
    require(snapshot_boundary(a.msg) > 0, "engine.snapshot.tokens", "is 0 (no snapshot) although request ", req,
            " was asked for its snapshot state in layer ", layer);
    const Shape shape = cfg.layout == StateLayout::KV ? Shape{cfg.HV, cfg.K, cfg.V} : Shape{cfg.HV, cfg.V, cfg.K};
    auto state = answered(a, "state", cfg.state_dtype, shape, "snapshot").to_f32();
    require(a.tensors.size() == 1, "engine.snapshot", "must answer one tensor, 'state', got ", a.tensors.size());
    return state;
  }
  void migrate(std::int32_t req) override {
    require(migrates_, "engine.migrate", "the engine does not claim migrates");
    call(json{{"op", "migrate"}, {"req", req}}, {}, "migrate");
  }

  void fork(std::int32_t req, std::int32_t from) override { call(json{{"op", "fork"}, {"req", req}, {"from", from}}, {}, "fork"); }
  void finish(std::int32_t req) override { call(json{{"op", "finish"}, {"req", req}}, {}, "finish"); }
  void preempt(std::int32_t req) override { call(json{{"op", "preempt"}, {"req", req}}, {}, "preempt"); }
  void resume(std::int32_t req) override { call(json{{"op", "resume"}, {"req", req}}, {}, "resume"); }

  std::vector<std::vector<std::vector<float>>> step(const std::vector<el::StepEntry>& entries,
                                                    const std::vector<std::vector<ref::SequenceInputs>>& windows) override {
    const auto& cfg = s_.base.cfg;
    json es = json::array(), w = json::array();
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const auto& e = entries[i];
      es.push_back({{"req", e.req}, {"T", e.T}, {"accepted", e.accepted}, {"eog_at", e.eog_at}});
      w.push_back(windows[i][0].T);
    }
    const Frame a = call(json{{"op", "step"}, {"entries", es}, {"window_tokens", w}}, tokens(windows), "step");
    const json n = a.msg.value("tokens", json());
    require(n.is_array() && n.size() == entries.size(), "engine.step.tokens", "must list the tokens processed by each of ",
            entries.size(), " entries");
    std::int64_t total = 0;
    for (std::size_t i = 0; i < n.size(); ++i) {
      require(n[i].is_number_integer() && n[i].get<std::int64_t>() >= 0 && n[i].get<std::int64_t>() <= s_.base.max_T,
              "engine.step.tokens[" + std::to_string(i) + "]", "must be an integer in [0, max_T]");
      total += n[i].get<std::int64_t>();
    }
    std::vector<std::vector<std::vector<float>>> out(entries.size());
    const std::size_t per = static_cast<std::size_t>(cfg.HV) * cfg.V;
    for (std::int32_t l = 0; l < cfg.num_layers; ++l) {
      const auto o = answered(a, "o." + std::to_string(l), cfg.act_dtype, {total, cfg.HV, cfg.V}, "step").to_f32();
      std::size_t at = 0;
      for (std::size_t i = 0; i < entries.size(); ++i) {
        const std::size_t m = static_cast<std::size_t>(n[i].get<std::int64_t>()) * per;
        out[i].emplace_back(o.begin() + static_cast<std::ptrdiff_t>(at), o.begin() + static_cast<std::ptrdiff_t>(at + m));
        at += m;
      }
    }
    return out;
  }

  std::map<std::int32_t, el::RequestStatus> requests() const override {
    const Frame a = call(json{{"op", "requests"}}, {}, "requests");
    const json rs = a.msg.value("requests", json());
    require(rs.is_array(), "engine.requests.requests", "must be an array");
    std::map<std::int32_t, el::RequestStatus> m;
    for (std::size_t i = 0; i < rs.size(); ++i) {
      const std::string f = "engine.requests.requests[" + std::to_string(i) + "]";
      require(rs[i].is_object() && rs[i].contains("status") && rs[i].at("status").is_string(), f + ".status",
              "must be running, finished or preempted");
      const std::string st = rs[i].at("status").get<std::string>();
      require(st == "running" || st == "finished" || st == "preempted", f + ".status", "is '", st, "'");
      const auto id = int_field(rs[i], "req", f);
      require(!m.count(id), f + ".req", "request ", id, " is listed twice");
      m[id] = el::RequestStatus{st == "running" ? el::Status::Running : st == "finished" ? el::Status::Finished
                                                                                         : el::Status::Preempted,
                                int_field(rs[i], "committed", f), int_field(rs[i], "to_prefill", f),
                                int_field(rs[i], "generated", f)};
    }
    return m;
  }

  std::vector<float> committed_state(std::int32_t req, std::int32_t layer) const override {
    const auto& cfg = s_.base.cfg;
    const Frame a = call(json{{"op", "committed_state"}, {"req", req}, {"layer", layer}}, {}, "committed_state");
    const Shape shape = cfg.layout == StateLayout::KV ? Shape{cfg.HV, cfg.K, cfg.V} : Shape{cfg.HV, cfg.V, cfg.K};
    return answered(a, "state", cfg.state_dtype, shape, "committed_state").to_f32();
  }

  std::map<std::int32_t, std::vector<std::int32_t>> slot_map() const override {
    const Frame a = call(json{{"op", "slot_map"}}, {}, "slot_map");
    const json sm = a.msg.value("slot_map", json());
    require(sm.is_array(), "engine.slot_map.slot_map", "must be an array of {req, slots}");
    std::map<std::int32_t, std::vector<std::int32_t>> m;
    for (std::size_t i = 0; i < sm.size(); ++i) {
      const std::string f = "engine.slot_map.slot_map[" + std::to_string(i) + "]";
      const auto id = int_field(sm[i], "req", f);
      require(sm[i].contains("slots") && sm[i].at("slots").is_array(), f + ".slots", "must be an array");
      auto& v = m[id];
      for (const auto& x : sm[i].at("slots")) {
        require(x.is_number_integer(), f + ".slots", "must hold integers");
        v.push_back(static_cast<std::int32_t>(x.get<std::int64_t>()));
      }
    }
    return m;
  }

  std::vector<float> pool(std::int32_t layer) const override {
    const auto& b = s_.base;
    const Frame a = call(json{{"op", "pool"}, {"layer", layer}}, {}, "pool");
    return answered(a, "values", b.cfg.state_dtype, {b.num_slots, stride_}, "pool").to_f32();
  }

 private:
  // Packs per-entry per-layer token inputs into q.l, k.l, v.l, a.l, b.l over all entries' tokens.
  std::map<std::string, Tensor> tokens(const std::vector<std::vector<ref::SequenceInputs>>& per_entry) const {
    const auto& cfg = s_.base.cfg;
    std::map<std::string, Tensor> t;
    for (std::int32_t l = 0; l < cfg.num_layers; ++l) {
      ref::SequenceInputs all;
      all.validate(cfg);
      for (const auto& e : per_entry) all = ref::SequenceInputs::concat(cfg, all, e[static_cast<std::size_t>(l)]);
      const std::int64_t N = all.T;
      const std::string sfx = "." + std::to_string(l);
      t["q" + sfx] = Tensor::from_f32(cfg.act_dtype, {N, cfg.H, cfg.K}, all.q);
      t["k" + sfx] = Tensor::from_f32(cfg.act_dtype, {N, cfg.H, cfg.K}, all.k);
      t["v" + sfx] = Tensor::from_f32(cfg.act_dtype, {N, cfg.HV, cfg.V}, all.v);
      t["a" + sfx] = Tensor::from_f32(cfg.act_dtype, {N, cfg.HV, cfg.a_width()}, all.a);
      t["b" + sfx] = Tensor::from_f32(cfg.act_dtype, {N, cfg.HV}, all.b);
    }
    return t;
  }

  // The deadline is the per-command timeout, or `budget_s` seconds when given (hello: the start-up budget).
  Frame call(json msg, std::map<std::string, Tensor> tensors, const std::string& op, double budget_s = 0) const {
    ChildProcess& child_ = proc_->child;
    require(proc_->alive, "engine." + op, "the engine process failed earlier (", child_.status(), ")");
    const double limit_s = budget_s > 0 ? budget_s : timeout();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<long long>(limit_s * 1000));
    Frame answer;
    try {
      const auto bytes = encode_frame(Frame{std::move(msg), std::move(tensors)});
      child_.write_all(bytes.data(), bytes.size(), deadline);
      std::uint8_t len[8];
      child_.read_exact(len, 8, deadline);
      std::uint64_t n = 0;
      for (int i = 0; i < 8; ++i) n |= static_cast<std::uint64_t>(len[i]) << (8 * i);
      require(n <= kDefaultMaxFrameBytes, "engine." + op + ".frame", "declares ", n, " bytes, more than the cap");
      std::vector<std::uint8_t> body(static_cast<std::size_t>(n));
      child_.read_exact(body.data(), body.size(), deadline);
      answer = decode_frame(body, "engine." + op + ".frame");
    } catch (const Error& e) {
      proc_->alive = false;
      child_.kill();
      const std::string tail = child_.stderr_tail();
      const std::string what = e.what();
      const std::string limit = what.find("timed out") == std::string::npos ? "" : deadline_note(budget_s > 0, limit_s);
      fail(e.field() == "target.io" ? "engine." + op : e.field(), what, " [command '", op, "', engine ",
           child_.status(), limit, "]", tail.empty() ? "" : "\n--- engine stderr (tail) ---\n" + tail.substr(tail.size() > 4000 ? tail.size() - 4000 : 0));
    }
    try {
      check_answer_ok(answer.msg, op);
    } catch (const Error& e) {  // an error answer is a verdict; the process keeps serving
      const std::string f = e.field();
      throw Error("engine" + f.substr(f.rfind("target", 0) == 0 ? 6 : 0), std::string(e.what()).substr(f.size() + 2));
    }
    return answer;
  }

  // An optional boolean capability of version 0.2; claimed by an engine that answered 0.1 it is refused.
  static bool claim(const json& caps, const std::string& key, std::int64_t minor) {
    std::string field = "engine.hello.capabilities.";
    field.append(key);
    if (!caps.contains(key)) return false;
    require(caps.at(key).is_boolean(), field, "must be true or false, got ", caps.at(key).dump());
    const bool on = caps.at(key).get<bool>();
    require(!on || minor >= 2, field, "is claimed by an engine answering version 0.", minor,
            "; it needs 0.2 (the snapshot_hit, snapshot and migrate commands)");
    return on;
  }
  // The "tokens" of a snapshot answer: the block boundary of the request's latest snapshot, 0 for none.
  std::int32_t snapshot_boundary(const json& msg) const {
    require(msg.contains("tokens") && msg.at("tokens").is_number_integer(), "engine.snapshot.tokens",
            "must be an integer (the snapshot's block boundary in tokens, 0 for none)");
    const auto x = msg.at("tokens").get<std::int64_t>();
    require(x >= 0 && x <= (1ll << 31) - 1, "engine.snapshot.tokens", "is ", x, ", outside [0, 2^31)");
    return static_cast<std::int32_t>(x);
  }

  std::string command_;
  std::shared_ptr<Process> proc_;
  std::string name_;
  bool bit_exact_ = false;
  bool snapshots_ = false, migrates_ = false;
  Tier tier_ = Tier::Fp32;
  el::EngineLevelSetup s_;
  std::int64_t stride_ = 0;
};

}  // namespace

std::unique_ptr<el::RequestEngine> make_engine_exec(const std::string& command) {
  require(!command.empty(), "target", "exec: needs a command, e.g. exec:'python3 my_engine.py'");
  return std::make_unique<EngineExec>(command);
}

bool register_engine_exec() {
  return el::register_request_engine_prefix("exec:", [](const std::string& rest) { return make_engine_exec(rest); });
}

}  // namespace replayssm::exec
