#include "exec_target.hpp"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "answers.hpp"
#include "child_process.hpp"
#include "exec_conv.hpp"
#include "replayssm/error.hpp"
#include "replayssm/frame.hpp"

namespace replayssm::exec {

using nlohmann::json;

namespace {

double g_timeout_s = 60.0;
double g_startup_timeout_s = 300.0;

std::mutex g_stats_mu;
std::map<std::string, TransportStats>& stats_by_command() {
  static std::map<std::string, TransportStats> s;
  return s;
}

std::string hex64(std::uint64_t x) {
  std::ostringstream os;
  os << std::hex << x;
  return os.str();
}

// --- capabilities ----------------------------------------------------------------------------------------
template <class T, class Parse>
std::vector<T> list_of(const json& j, const char* key, std::vector<T> def, Parse&& parse) {
  if (!j.contains(key)) return def;
  const std::string f = std::string("target.hello.capabilities.") + key;
  require(j.at(key).is_array(), f, "must be an array");
  std::vector<T> out;
  for (const auto& e : j.at(key)) out.push_back(parse(e, f));
  return out;
}
std::string str_of(const json& e, const std::string& f) {
  require(e.is_string(), f, "entries must be strings");
  return e.get<std::string>();
}
int int_of(const json& e, const std::string& f) {
  require(e.is_number_integer(), f, "must be integers");
  return e.get<int>();
}
bool bool_of(const json& j, const char* key, bool def) {
  if (!j.contains(key)) return def;
  require(j.at(key).is_boolean(), std::string("target.hello.capabilities.") + key, "must be true or false");
  return j.at(key).get<bool>();
}
template <class T>
bool has(const std::vector<T>& v, const T& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

Capabilities Capabilities::from_json(const json& j) {
  require(j.is_object(), "target.hello.capabilities", "must be an object");
  Capabilities c;
  const std::string p = "target.hello.capabilities.";
  if (j.contains("name")) c.name = str_of(j.at("name"), p + "name");
  c.ops = list_of<Op>(j, "ops", c.ops, [](const json& e, const std::string& f) { return parse_op(str_of(e, f), f); });
  c.act_dtypes = list_of<DType>(j, "act_dtypes", c.act_dtypes,
                                [](const json& e, const std::string& f) { return parse_dtype(str_of(e, f), f); });
  c.state_dtypes = list_of<DType>(j, "state_dtypes", c.state_dtypes,
                                  [](const json& e, const std::string& f) { return parse_dtype(str_of(e, f), f); });
  c.layouts = list_of<StateLayout>(j, "layouts", c.layouts,
                                   [](const json& e, const std::string& f) { return parse_layout(str_of(e, f), f); });
  c.l2norms = list_of<L2Norm>(j, "l2norms", c.l2norms,
                              [](const json& e, const std::string& f) { return parse_l2norm(str_of(e, f), f); });
  c.kda_gates = list_of<KdaGate>(j, "kda_gates", c.kda_gates,
                                 [](const json& e, const std::string& f) { return parse_kda_gate(str_of(e, f), f); });
  c.gva_ratios = list_of<int>(j, "gva_ratios", {}, int_of);
  c.K = list_of<int>(j, "K", {}, int_of);
  c.V = list_of<int>(j, "V", {}, int_of);
  c.fixture_ops = list_of<std::string>(j, "fixture_ops", {}, [](const json& e, const std::string& f) {
    const std::string op = str_of(e, f);
    std::string known;
    for (const auto& k : kFixtureOps) known += (known.empty() ? "" : ", ") + k;
    require(has(kFixtureOps, op), f, "'", op, "' is not a fixture op (known: ", known, ")");
    return op;
  });
  for (std::size_t i = 0; i < c.fixture_ops.size(); ++i)
    for (std::size_t k = 0; k < i; ++k)
      require(c.fixture_ops[k] != c.fixture_ops[i], p + "fixture_ops", "lists '", c.fixture_ops[i], "' twice");
  c.pad_conventions = list_of<ref::PadConvention>(j, "pad_conventions", c.pad_conventions,
                                                  [](const json& e, const std::string& f) {
                                                    return ref::parse_pad_convention(str_of(e, f), f);
                                                  });
  require(!c.pad_conventions.empty(), p + "pad_conventions", "must name at least one convention");
  c.graph_padding = bool_of(j, "graph_padding", c.graph_padding);
  c.out_of_place_commit = bool_of(j, "out_of_place_commit", c.out_of_place_commit);
  c.capture = bool_of(j, "capture", c.capture);
  c.conv_state = bool_of(j, "conv_state", c.conv_state);
  c.round_beta_to_act = bool_of(j, "round_beta_to_act", c.round_beta_to_act);
  c.copy_slot = bool_of(j, "copy_slot", c.copy_slot);
  c.bit_exact = bool_of(j, "bit_exact", c.bit_exact);
  c.pad_outputs_zero = bool_of(j, "pad_outputs_zero", c.pad_outputs_zero);
  if (j.contains("max_T")) c.max_T = int_of(j.at("max_T"), p + "max_T");
  if (j.contains("max_layers")) c.max_layers = int_of(j.at("max_layers"), p + "max_layers");
  require(c.max_T >= 1, p + "max_T", "must be >= 1, got ", c.max_T);
  require(c.max_layers >= 1, p + "max_layers", "must be >= 1, got ", c.max_layers);
  if (j.contains("tier")) c.tier = parse_tier(str_of(j.at("tier"), p + "tier"), p + "tier");
  if (j.contains("design")) c.design = str_of(j.at("design"), p + "design");
  return c;
}

json Capabilities::to_json() const {
  auto names = [](const auto& v) {
    json a = json::array();
    for (const auto& x : v) {
      if constexpr (std::is_same_v<std::decay_t<decltype(x)>, DType>)
        a.push_back(std::string(dtype_name(x)));
      else
        a.push_back(to_string(x));
    }
    return a;
  };
  return json{{"name", name},         {"ops", names(ops)},
              {"act_dtypes", names(act_dtypes)}, {"state_dtypes", names(state_dtypes)},
              {"layouts", names(layouts)},       {"l2norms", names(l2norms)},
              {"kda_gates", names(kda_gates)},   {"round_beta_to_act", round_beta_to_act},
              {"gva_ratios", gva_ratios},        {"K", K},
              {"V", V},                          {"max_T", max_T},
              {"max_layers", max_layers},        {"copy_slot", copy_slot},
              {"bit_exact", bit_exact},          {"tier", to_string(tier)},
              {"pad_outputs_zero", pad_outputs_zero}, {"design", design},
              {"fixture_ops", fixture_ops},      {"pad_conventions", names(pad_conventions)},
              {"graph_padding", graph_padding},  {"out_of_place_commit", out_of_place_commit},
              {"capture", capture},              {"conv_state", conv_state}};
}

std::string Capabilities::unsupported(const ModelConfig& cfg, int max_T_wanted) const {
  std::ostringstream why;
  if (!has(ops, cfg.op)) why << "op " << to_string(cfg.op) << "; ";
  if (!has(act_dtypes, cfg.act_dtype)) why << "act_dtype " << dtype_name(cfg.act_dtype) << "; ";
  if (!has(state_dtypes, cfg.state_dtype)) why << "state_dtype " << dtype_name(cfg.state_dtype) << "; ";
  if (!has(layouts, cfg.layout)) why << "layout " << to_string(cfg.layout) << "; ";
  if (!has(l2norms, cfg.l2norm)) why << "l2norm " << to_string(cfg.l2norm) << "; ";
  if (cfg.op == Op::KDA && !has(kda_gates, cfg.kda_gate)) why << "kda_gate " << to_string(cfg.kda_gate) << "; ";
  if (cfg.round_beta_to_act && !round_beta_to_act) why << "round_beta_to_act; ";
  if (!gva_ratios.empty() && !has(gva_ratios, cfg.G())) why << "GVA ratio " << cfg.G() << "; ";
  if (!K.empty() && !has(K, cfg.K)) why << "K = " << cfg.K << "; ";
  if (!V.empty() && !has(V, cfg.V)) why << "V = " << cfg.V << "; ";
  if (max_T_wanted > max_T) why << "max_T = " << max_T_wanted << " (the target takes up to " << max_T << "); ";
  if (cfg.num_layers > max_layers) why << "num_layers = " << cfg.num_layers << "; ";
  std::string s = why.str();
  if (!s.empty()) s = "not supported by the target: " + s.substr(0, s.size() - 2);
  return s;
}

std::string Capabilities::unsupported_conv(DType act_dtype, DType state_dtype, int window) const {
  std::ostringstream why;
  if (!has(act_dtypes, act_dtype)) why << "act_dtype " << dtype_name(act_dtype) << "; ";
  if (!has(state_dtypes, state_dtype)) why << "state_dtype " << dtype_name(state_dtype) << "; ";
  if (window > max_T) why << "max_T = " << window << " (the target takes up to " << max_T << "); ";
  std::string s = why.str();
  if (!s.empty()) s = "not supported by the target: " + s.substr(0, s.size() - 2);
  return s;
}

int fixture_op_minor(const std::string& op) { return op.rfind("conv.", 0) == 0 ? 3 : 1; }

std::string protocol_gap(int minor, const std::string& op) {
  const std::string speaks = "the target speaks protocol 1." + std::to_string(minor);
  if (minor < 1) return speaks + ", which has no fixture command";
  return speaks + ", which has no fixture op '" + op + "' (added in 1." + std::to_string(fixture_op_minor(op)) + ")";
}

bool Capabilities::runs_fixture_op(const std::string& op) const {
  return protocol_minor >= fixture_op_minor(op) && has(fixture_ops, op);
}

void set_timeout(double seconds) {
  require(seconds > 0, "target-timeout", "must be > 0, got ", seconds);
  g_timeout_s = seconds;
}
double timeout() { return g_timeout_s; }

void set_startup_timeout(double seconds) {
  require(seconds > 0, "target-startup-timeout", "must be > 0, got ", seconds);
  g_startup_timeout_s = seconds;
}
double startup_timeout() { return g_startup_timeout_s; }

std::string deadline_note(bool startup, double seconds) {
  std::ostringstream os;
  os << (startup ? ", start-up budget " : ", per-command timeout ") << seconds
     << (startup ? " s (--target-startup-timeout)" : " s (--target-timeout)");
  return os.str();
}

// --- connection ------------------------------------------------------------------------------------------
namespace {

// One running implementation: framed request/answer with a deadline. A transport failure kills it.
class Connection {
 public:
  explicit Connection(const std::string& command) : child_(command) {
    Frame hello;
    hello.msg = json{{"op", "hello"}, {"protocol", kProtocolName}, {"version", {kProtocolMajor, kProtocolMinor}}};
    const Frame a = call(hello, "hello", g_startup_timeout_s);
    caps_ = parse_hello_answer(a.msg);
  }
  ~Connection() {
    if (alive_) {
      try {
        Frame bye;
        bye.msg = json{{"op", "shutdown"}};
        send(bye, std::chrono::steady_clock::now() + std::chrono::seconds(2));
        // A target exits by itself after shutdown; it gets a grace period to do so before the process group is
        // killed, so that what it writes at exit (a sanitizer's error summary, coverage, logs) is not lost.
        const auto grace = std::chrono::steady_clock::now() + std::chrono::milliseconds(kShutdownGraceMs);
        while (child_.running() && std::chrono::steady_clock::now() < grace)
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
      } catch (const Error&) {
      }
    }
  }

  const Capabilities& caps() const { return caps_; }
  bool alive() const { return alive_; }

  // Sends a command, returns the answer; an error answer is Error("target.<op>[.field]"), a transport or
  // framing failure kills the process and is Error naming what happened, with the stderr tail.
  // The deadline is the per-command timeout, or `budget_s` seconds when given (hello: the start-up budget).
  Frame call(const Frame& request, const std::string& op, double budget_s = 0) {
    require(alive_, "target." + op, "the target process failed earlier (", child_.status(), ")");
    const auto t0 = std::chrono::steady_clock::now();
    const double limit_s = budget_s > 0 ? budget_s : g_timeout_s;
    const auto deadline = t0 + std::chrono::milliseconds(static_cast<long long>(limit_s * 1000));
    Frame answer;
    TransportStats s;
    try {
      send(request, deadline, s);
      answer = receive(op, deadline, s);
    } catch (const Error& e) {
      alive_ = false;
      child_.kill();
      const std::string tail = child_.stderr_tail();
      const std::string what = e.what();
      const std::string limit = what.find("timed out") == std::string::npos ? "" : deadline_note(budget_s > 0, limit_s);
      fail(e.field() == "target.io" ? "target." + op : e.field(), what, " [command '", op, "', target ",
           child_.status(), limit, "]", tail.empty() ? "" : "\n--- target stderr (last lines) ---\n" + last_lines(tail, 40));
    }
    s.commands = 1;
    s.round_trip_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() - s.codec_s;
    if (answer.msg.contains("compute_s") && answer.msg.at("compute_s").is_number())
      s.target_compute_s = answer.msg.at("compute_s").get<double>();
    {
      std::lock_guard<std::mutex> lock(g_stats_mu);
      auto& total = stats_by_command()[child_.command()];
      total.commands += s.commands;
      total.round_trip_s += s.round_trip_s;
      total.target_compute_s += s.target_compute_s;
      total.codec_s += s.codec_s;
      total.bytes_sent += s.bytes_sent;
      total.bytes_received += s.bytes_received;
    }
    if (answer_is_fatal(answer.msg)) {
      // The target ends its process after this answer (a sticky device fault): wait for it to exit so that the
      // next command of this command line starts a fresh process instead of reaching a dying one.
      alive_ = false;
      const auto grace = std::chrono::steady_clock::now() + std::chrono::milliseconds(kShutdownGraceMs);
      while (child_.running() && std::chrono::steady_clock::now() < grace)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      child_.kill();
    }
    check_answer_ok(answer.msg, op);
    return answer;
  }

 private:
  static std::string last_lines(const std::string& s, int n) {
    std::size_t pos = s.size();
    for (int i = 0; i < n && pos > 0; ++i) {
      pos = s.rfind('\n', pos - 1);
      if (pos == std::string::npos) return s;
    }
    return s.substr(pos + 1);
  }
  // Encoding and decoding time are counted apart from the round trip (codec_s).
  void send(const Frame& f, ChildProcess::Deadline deadline, TransportStats& s) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto bytes = encode_frame(f);
    s.codec_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    s.bytes_sent += static_cast<long long>(bytes.size());
    child_.write_all(bytes.data(), bytes.size(), deadline);
  }
  void send(const Frame& f, ChildProcess::Deadline deadline) {
    TransportStats ignored;
    send(f, deadline, ignored);
  }
  Frame receive(const std::string& op, ChildProcess::Deadline deadline, TransportStats& s) {
    std::uint8_t len[8];
    child_.read_exact(len, 8, deadline);
    std::uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= static_cast<std::uint64_t>(len[i]) << (8 * i);
    require(n <= kDefaultMaxFrameBytes, "target." + op + ".frame", "declares ", n, " bytes, more than the cap of ",
            kDefaultMaxFrameBytes);
    std::vector<std::uint8_t> body(static_cast<std::size_t>(n));
    child_.read_exact(body.data(), body.size(), deadline);
    s.bytes_received += static_cast<long long>(8 + n);
    try {
      const auto t0 = std::chrono::steady_clock::now();
      Frame f = decode_frame(body, "target." + op + ".frame");
      s.codec_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      return f;
    } catch (const Error& e) {
      const std::string f = e.field().rfind("target.", 0) == 0 ? e.field() : "target." + op + ".frame." + e.field();
      throw Error(f, std::string("malformed answer: ") + e.what());
    }
  }

  ChildProcess child_;
  bool alive_ = true;
  Capabilities caps_;
};

// One live process per command line, reused by every case of a campaign until it fails.
std::mutex g_live_mu;
std::map<std::string, std::shared_ptr<Connection>>& live_connections() {
  static auto* live = new std::map<std::string, std::shared_ptr<Connection>>();  // closed by shutdown_targets()
  return *live;
}
std::shared_ptr<Connection> connect(const std::string& command) {
  std::lock_guard<std::mutex> lock(g_live_mu);
  auto& c = live_connections()[command];
  if (!c || !c->alive()) c = std::make_shared<Connection>(command);
  return c;
}

}  // namespace

void shutdown_targets() {
  std::map<std::string, std::shared_ptr<Connection>> closing;
  {
    std::lock_guard<std::mutex> lock(g_live_mu);
    closing.swap(live_connections());
  }
  closing.clear();  // each Connection still unused elsewhere sends shutdown and waits for its process to exit
}

namespace {
// Processes still live when the program ends are shut down the same way.
[[maybe_unused]] const int kShutdownAtExit = std::atexit(shutdown_targets);
}  // namespace

Capabilities capabilities(const std::string& command) { return connect(command)->caps(); }

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

TransportStats transport_stats(const std::string& command) {
  std::lock_guard<std::mutex> lock(g_stats_mu);
  return stats_by_command()[command];
}
void reset_transport_stats(const std::string& command) {
  std::lock_guard<std::mutex> lock(g_stats_mu);
  stats_by_command()[command] = TransportStats{};
}

// --- the target ------------------------------------------------------------------------------------------
namespace {

const Tensor& tensor(const Frame& f, const std::string& name, DType dtype, const Shape& shape, const std::string& field) {
  const auto it = f.tensors.find(name);
  require(it != f.tensors.end(), field, "is missing from the answer");
  require(it->second.dtype == dtype, field, "has dtype ", std::string(dtype_name(it->second.dtype)), ", expected ",
          std::string(dtype_name(dtype)));
  require(it->second.shape == shape, field, "has shape ", shape_str(it->second.shape), ", expected ", shape_str(shape));
  return it->second;
}

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
  Tolerance tolerance(double scale, bool state) const override {
    return tier_tolerance(conn_->caps().tier, s_.cfg, scale, state);
  }
  std::string unsupported(const ModelConfig& cfg, std::int32_t max_T) const override {
    return conn_->caps().unsupported(cfg, max_T);
  }
  bool implements_copy() const override { return conn_->caps().copy_slot; }
  std::vector<ref::PadConvention> pad_conventions() const override { return conn_->caps().pad_conventions; }
  bool graph_padding() const override { return conn_->caps().graph_padding; }
  bool out_of_place_commit() const override { return conn_->caps().out_of_place_commit; }
  bool captures() const override { return conn_->caps().captures(); }
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
    s_ = s;
    stride_ = s.pool_geometry().stride(s.cfg);
    Frame f;
    std::uint32_t poison_bits = 0;
    std::memcpy(&poison_bits, &s.poison, 4);
    f.msg = json{{"op", "setup"}, {"setup", s.to_json()}, {"poison_bits", hex64(poison_bits)}};
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
      out.push_back(tensor(a, name, cfg.act_dtype, {N, cfg.HV, cfg.V}, "target.step." + name).to_f32());
    }
    return out;
  }

  void commit(const std::vector<ref::TargetRow>& rows) override {
    Frame f;
    f.msg = json{{"op", "commit"}, {"rows", ref::rows_to_json(rows, false)}, {"live_rows", live_rows(rows)}};
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
    cached.values = tensor(a, "state", cfg.state_dtype, shape, "target.committed_state.state").to_f32();
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
