// Trace sets, exported fuzz cases and what a trace covers (trace_gen.hpp).
#include "trace_gen.hpp"

#include <filesystem>

#include "lifecycle.hpp"
#include "replayssm/error.hpp"
#include "replayssm/fixtures/recording_target.hpp"
#include "replayssm/rng.hpp"

namespace replayssm::fuzz {

namespace {

// The stream of derive_seed(case seed, .) that draws a trace's captures: separate from the sequence's own draw,
// so a set with --captures holds the same sequences as one without.
constexpr std::uint64_t kCaptureStream = 0xca97u;

// Captures while requests are live (H13): after each lifecycle step, with probability 1/2, a capture of a new
// bucket (a captured size among the powers of two below max_rows and max_rows itself, a window in [1, max_T]);
// at least one (after the first step) when the sequence has a step. The requests the step left running are live
// across it.
std::vector<ref::Cmd> with_captures_after_steps(const std::vector<ref::Cmd>& cmds, const ref::EngineSetup& setup,
                                                std::uint64_t seed) {
  Rng rng(seed);
  std::vector<std::int32_t> sizes;
  for (std::int32_t z = 1; z < setup.max_rows(); z *= 2) sizes.push_back(z);
  sizes.push_back(setup.max_rows());
  std::vector<ref::Cmd> out;
  bool any = false;
  for (const auto& c : cmds) {
    out.push_back(c);
    if (c.kind != ref::Cmd::Kind::Step) continue;
    const bool draw = rng.uniform_int(0, 1) == 1;
    if (!draw && any) continue;
    ref::Cmd cap;
    cap.kind = ref::Cmd::Kind::Capture;
    cap.graph = sizes[static_cast<std::size_t>(rng.uniform_int(0, static_cast<std::int64_t>(sizes.size()) - 1))];
    cap.capture_T = static_cast<std::int32_t>(rng.uniform_int(1, setup.max_T));
    out.push_back(cap);
    any = true;
  }
  return out;
}

}  // namespace

ref::Trace make_set_trace(const TraceSetOptions& o, int j) {
  o.cfg.validate();
  require(o.max_commands >= 1 && o.max_commands <= 10000, "max-commands", "must be in [1, 10000], got ",
          o.max_commands);
  require(o.num_slots >= 1 && o.num_slots <= 4096, "slots", "must be in [1, 4096], got ", o.num_slots);
  require(o.max_T >= 1 && o.max_T <= 64, "max-T", "must be in [1, 64], got ", o.max_T);
  require(!o.name.empty() && o.name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") == std::string::npos &&
              o.name.find("__") == std::string::npos,
          "name", "must be lower-case letters, digits and single underscores, got '", o.name, "'");
  const std::uint64_t case_seed = derive_seed(o.seed, static_cast<std::uint64_t>(j) + 1);
  auto setup = ref::make_setup(o.cfg, case_seed, o.num_slots, o.max_T, o.gates);
  setup.pad_convention = o.pad_convention;
  setup.step_mix = o.step_mix;
  setup.validate();
  auto cmds = generate_commands(o.num_slots, o.max_T, true, case_seed, o.max_commands, o.out_of_place,
                                setup.reserved_slot(), o.graph_padding ? setup.max_rows() : 0, o.step_mix);
  if (o.captures) cmds = with_captures_after_steps(cmds, setup, derive_seed(case_seed, kCaptureStream));
  const std::string source = "replayssm fixtures generate --traces --preset " + o.cfg.name + " --seed " +
                             std::to_string(o.seed) + " --max-commands " + std::to_string(o.max_commands) +
                             " --slots " + std::to_string(o.num_slots) + " --max-T " + std::to_string(o.max_T) +
                             (o.gates == ref::GateRange::Benign ? "" : " --gates " + ref::to_string(o.gates)) +
                             (o.out_of_place ? " --out-of-place" : "") +
                             (o.pad_convention == ref::PadConvention::MinusOne
                                  ? ""
                                  : " --pad-convention " + ref::to_string(o.pad_convention)) +
                             (o.graph_padding ? " --graph-padding" : "") + (o.captures ? " --captures" : "") +
                             (o.step_mix.any() ? "" : " --step-mix " + o.step_mix.str()) +
                             (o.name == "trace" ? "" : " --name " + o.name) +
                             " (candidate " + std::to_string(j) + ")";
  return ref::record_trace(setup, cmds, case_seed, source);
}

std::vector<std::string> write_trace_set(const TraceSetOptions& o, const std::string& dir) {
  require(o.cases >= 1, "cases", "must be >= 1, got ", o.cases);
  std::filesystem::create_directories(dir);
  // Candidates j = 0, 1, ... in order; while the set does not cover trace_coverage_goal(), a candidate is
  // taken only if it adds to what the set covers (at most kCandidates are looked at); once it does, or
  // when no candidate is left to look at, candidates are taken as they come.
  constexpr int kCandidates = 256;
  auto goal = trace_coverage_goal();
  if (o.graph_padding) goal.insert({"graph.stale_tail", "graph.pad_tail"});  // a captured-step set has both tails
  std::set<std::string> covered;
  std::vector<std::string> paths;
  for (int j = 0; static_cast<int>(paths.size()) < o.cases; ++j) {
    ref::Trace t = make_set_trace(o, j);
    const auto c = trace_coverage(t);
    bool adds = false;
    for (const auto& x : c) adds = adds || (goal.count(x) && !covered.count(x));
    bool complete = true;
    for (const auto& g : goal) complete = complete && covered.count(g);
    if (!adds && !complete && j < kCandidates) continue;
    covered.insert(c.begin(), c.end());
    const auto path = (std::filesystem::path(dir) / (o.cfg.name + "__" + o.name + "__" + std::to_string(paths.size()) +
                                                     ".safetensors")).string();
    save_fixture(path, ref::trace_to_fixture(t));
    paths.push_back(path);
  }
  return paths;
}

void export_trace(const DumpedCase& c, const std::string& path, const std::string& source) {
  // Every case is expressible: captured steps and the null_block / pad_slot conventions make a 1.1 trace, captures
  // a 1.2 one (trace_version_of), which a reader that predates them refuses instead of misreading them.
  require(!c.setup.conv, "setup.conv", "the case carries the conv component, which the trace format does not hold; "
          "replay it with fuzz --replay");
  const auto dir = std::filesystem::path(path).parent_path();
  if (!dir.empty()) std::filesystem::create_directories(dir);
  save_fixture(path, ref::trace_to_fixture(ref::record_trace(c.setup, c.commands, 0, source)));
}

std::string trace_source_of_dump(const std::string& dump_path) {
  return "the shrunk failing case of fuzz dump " + std::filesystem::path(dump_path).filename().string();
}

std::set<std::string> trace_coverage(const ref::Trace& t) {
  std::set<std::string> s;
  for (const auto& c : t.lifecycle) {
    const std::string k = c.to_json().at("kind").get<std::string>();
    s.insert("lifecycle." + k);
  }
  for (const auto& c : t.commands) {
    s.insert(c.op_name());
    if (!c.kept.empty()) s.insert("commit.kept");
    for (std::size_t i = 0; i < c.rows.size(); ++i) {
      const auto& r = c.rows[i];
      if (r.graph_tail) {
        s.insert(r.row.slot == t.setup.pad_sentinel() ? "graph.pad_tail" : "graph.stale_tail");
        continue;
      }
      if (r.row.slot == t.setup.pad_sentinel()) {
        s.insert("pad");
        continue;
      }
      if (c.op == ref::TraceCommand::Op::Step && r.kind == ref::RowKind::Prefill)
        s.insert(r.fresh ? "prefill.fresh" : "prefill.chunk");
      if (c.op != ref::TraceCommand::Op::Commit || r.kind != ref::RowKind::Verify) continue;
      const auto n = r.row.accepted, T = r.row.T;
      s.insert(n == 0 ? "verify.n=0" : n == T ? "verify.n=T" : "verify.0<n<T");
      if (c.notes[i].stop_at > 0) s.insert("verify.early_stop");
    }
  }
  return s;
}

std::set<std::string> trace_coverage_goal() {
  return {"allocate", "step", "commit", "copy_slot", "commit.kept", "pad", "prefill.fresh", "prefill.chunk",
          "verify.n=0", "verify.0<n<T", "verify.n=T", "verify.early_stop", "lifecycle.admit", "lifecycle.step",
          "lifecycle.finish", "lifecycle.continue", "lifecycle.copy", "lifecycle.preempt", "lifecycle.resume"};
}

}  // namespace replayssm::fuzz
