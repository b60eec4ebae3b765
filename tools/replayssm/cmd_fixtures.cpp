#include <algorithm>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <cstdio>

#include "commands.hpp"
#include "exec_target.hpp"
#include "report.hpp"
#include "replayssm/error.hpp"
#include "replayssm/manifest.hpp"
#include "replayssm/mrope/mrope_session.hpp"
#include "replayssm/fixtures/trace.hpp"
#include "replayssm/fixtures/golden.hpp"
#include "replayssm/fixtures/conv_fixture.hpp"
#include "replayssm/fixtures/ring_fixture.hpp"
#include "replayssm/fixtures/tree_fixture.hpp"
#include "trace_gen.hpp"

namespace replayssm::cli {

namespace fs = std::filesystem;

// Expands files and directories (recursively) into a sorted list of .safetensors files.
std::vector<std::string> collect_fixtures(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (const auto& a : args) {
    require(fs::exists(a), "path", "'", a, "' does not exist");
    if (fs::is_directory(a)) {
      std::vector<std::string> here;
      for (const auto& e : fs::recursive_directory_iterator(a))
        if (e.is_regular_file() && e.path().extension() == ".safetensors") here.push_back(e.path().string());
      std::sort(here.begin(), here.end());
      out.insert(out.end(), here.begin(), here.end());
    } else {
      out.push_back(a);
    }
  }
  return out;
}

// Checks every fixture; prints one line per fixture and per tensor; returns the number of failures.
int check_and_print(const std::vector<std::string>& files, nlohmann::json* report, bool quiet,
                    std::optional<Tier> tier) {
  int failures = 0;
  auto arr = nlohmann::json::array();
  for (const auto& f : files) {
    const auto r = ref::check_fixture_file(f, tier);
    failures += r.ok ? 0 : 1;
    if (!quiet || !r.ok) {
      std::cout << (r.ok ? "ok   " : "FAIL ") << f << " (" << (r.op.empty() ? "?" : r.op) << ")\n";
      if (!r.error.empty()) std::cout << "     error: " << r.error << "\n";
      for (const auto& t : r.tensors) std::cout << "     " << t.name << ": " << t.report.str() << "\n";
    }
    arr.push_back(r.to_json());
  }
  if (report) *report = arr;
  return failures;
}

void register_fixtures(CLI::App& app) {
  auto* fx = app.add_subcommand("fixtures", "Golden fixture files (safetensors, docs/fixture-format.md)");
  fx->require_subcommand(1);
  auto* gen = fx->add_subcommand("generate", "Write the golden set of a model preset (or a golden matrix, its traces, its ring-step or conv fixtures) into a directory");
  struct Opts {
    std::string preset = "qwen3.5", matrix, out, gates = "benign", name = "trace";
    std::uint64_t seed = 20261129;
    bool traces = false, ring = false, conv = false, trees = false, out_of_place = false, graph_padding = false,
         captures = false, mrope_traces = false;
    std::string pad_convention = "minus_one", step_mix = "any";
    std::string dims, state_dtype, act_dtype;  // a trace's heads and dims, dtypes: the preset's when empty
    int cases = 0, max_commands = 0, slots = 0, max_T = 0, layers = 0;  // the trace generator's defaults, set below
  };
  auto o = std::make_shared<Opts>();
  {
    const fuzz::TraceSetOptions d;
    o->cases = d.cases, o->max_commands = d.max_commands, o->slots = d.num_slots, o->max_T = d.max_T;
  }
  gen->add_option("--preset", o->preset, "Model preset (" + [] {
    std::string s;
    for (const auto& n : preset_names()) s += (s.empty() ? "" : ", ") + n;
    return s + "); the set also holds the MRoPE fixtures (mrope/)";
  }())->capture_default_str();
  gen->add_option("--out", o->out, "Output directory (created if missing)")->required();
  auto* matrix = gen->add_option("--matrix", o->matrix, "Write a golden matrix instead of a preset's set (" + [] {
    std::string s;
    for (const auto& n : ref::matrix_names()) s += (s.empty() ? "" : ", ") + n;
    return s;
  }() + "): shapes of public kernel test suites");
  gen->add_option("--seed", o->seed, "Seed of all generated inputs (and, with --traces, of the command sequences)")
      ->capture_default_str();
  auto* traces = gen->add_flag("--traces", o->traces,
                               "Write lifecycle traces of the preset instead (op lifecycle.trace, docs/fixture-format.md "
                               "section 9): command sequences of the fuzz generator with the oracle's results");
  auto* ring = gen->add_flag("--ring", o->ring,
                             "Write ring-step fixtures of the preset instead (op ring.step, docs/fixture-format.md "
                             "section 10): one verify + commit of a spec-ring slot");
  auto* conv = gen->add_flag("--conv", o->conv,
                             "Write short-convolution fixtures of the preset instead (ops conv.prefill, conv.update, "
                             "conv.commit, docs/fixture-format.md section 11): the conv state of a GDN/KDA layer");
  auto* trees = gen->add_flag("--trees", o->trees,
                              "Write tree-verify fixtures of the preset instead (ops tree.verify, tree.commit, "
                              "docs/fixture-format.md section 12): draft trees of top-k 1..4, depth 2..6, up to 16 "
                              "nodes, each node's state from its parent's");
  auto* mrope_traces = gen->add_flag(
      "--mrope-traces", o->mrope_traces,
      "Write MRoPE traces instead (op mrope.session, docs/fixture-format.md section 13): --cases drawn sessions per "
      "MRoPE model (seed + i), one q head and one k head, with the reference tracker's positions and rotations");
  for (auto* other : {matrix, traces, ring, conv}) trees->excludes(other);
  for (auto* other : {matrix, traces, ring, conv, trees}) mrope_traces->excludes(other);
  traces->excludes(matrix);
  ring->excludes(matrix);
  ring->excludes(traces);
  conv->excludes(matrix);
  conv->excludes(traces);
  conv->excludes(ring);
  gen->add_option("--cases", o->cases, "Traces to write (--traces)")->capture_default_str();
  gen->add_option("--max-commands", o->max_commands, "Longest lifecycle command sequence of a trace (--traces)")
      ->capture_default_str();
  gen->add_option("--slots", o->slots, "State pool slots of a trace (--traces)")->capture_default_str();
  gen->add_option("--max-T", o->max_T, "Largest verify window of a trace (--traces)")->capture_default_str();
  gen->add_option("--gates", o->gates, "Input ranges of a trace's inputs and parameters: benign, realistic or checkpoint (--traces)")
      ->capture_default_str();
  gen->add_flag("--out-of-place", o->out_of_place,
                "A quarter of a trace's verify rows commit into a free slot, leaving the read slot untouched (--traces)");
  gen->add_option("--pad-convention", o->pad_convention,
                  "The slot a trace's PAD rows carry: minus_one, null_block (slot 0 never allocated) or pad_slot (the "
                  "last slot never allocated); other than minus_one makes a trace_version 1.1 trace (--traces)")
      ->capture_default_str();
  gen->add_flag("--graph-padding", o->graph_padding,
                "Half a trace's steps run as captured batches whose tail holds stale rows of an earlier, larger batch "
                "or PAD rows; makes a trace_version 1.1 trace (--traces)");
  gen->add_flag("--captures", o->captures,
                "Half a trace's lifecycle steps (at least the first) are followed by the capture of a new CUDA-graph "
                "bucket while requests are live; makes a trace_version 1.2 trace (--traces)");
  gen->add_option("--step-mix", o->step_mix,
                  "What one step of a trace may mix: any, one_width (every row of a step one width), prefill_apart "
                  "(prefill chunks never beside verify rows) or both; a narrowed trace is one a kernel claiming that "
                  "step_mix can replay (--traces)")
      ->capture_default_str();
  gen->add_option("--name", o->name, "File names <preset>__<name>__<i>, e.g. named for a hazard (--traces)")
      ->capture_default_str();
  gen->add_option("--dims", o->dims,
                  "H,HV,K,V: a trace's heads and dims instead of the preset's; the files are named "
                  "<preset>-h<H>x<HV>-k<K>v<V>__<name>__<i> (--traces)");
  gen->add_option("--state-dtype", o->state_dtype, "A trace's state dtype instead of the preset's: F32 or BF16 (--traces)");
  gen->add_option("--act-dtype", o->act_dtype, "A trace's activation dtype instead of the preset's: F32 or BF16 (--traces)");
  gen->add_option("--layers", o->layers, "At most this many layers in a trace (0: the preset's) (--traces)");
  gen->callback([o, gen] {
    if (!o->matrix.empty()) {
      const auto paths = ref::write_matrix_set(o->matrix, o->seed, o->out);
      std::cout << "wrote " << paths.size() << " fixtures for matrix " << o->matrix << " (seed " << o->seed
                << ") to " << o->out << "\n";
      return;
    }
    if (o->mrope_traces) {
      std::filesystem::create_directories(o->out);
      int n = 0;
      for (const auto& m : mrope::preset_names())
        for (int i = 0; i < (gen->count("--cases") > 0 ? o->cases : 1); ++i) {
          mrope::DrawOptions d;
          d.steps_min = 5, d.steps_max = 8, d.q_heads = 1, d.k_heads = 1;
          const auto sc = mrope::draw_session(m, o->seed + static_cast<std::uint64_t>(i), d);
          save_fixture(o->out + "/" + m + "__session__" + std::to_string(i) + ".safetensors", mrope::session_fixture(sc));
          ++n;
        }
      std::cout << "wrote " << n << " MRoPE traces (seed " << o->seed << ") to " << o->out << "\n";
      return;
    }
    if (o->ring) {
      const auto paths = ref::write_ring_set(preset(o->preset), o->seed, o->out);
      std::cout << "wrote " << paths.size() << " ring-step fixtures for preset " << o->preset << " (seed " << o->seed
                << ") to " << o->out << "\n";
      return;
    }
    if (o->trees) {
      const auto paths = ref::write_tree_set(preset(o->preset), o->seed, o->out);
      std::cout << "wrote " << paths.size() << " tree fixtures for preset " << o->preset << " (seed " << o->seed
                << ") to " << o->out << "\n";
      return;
    }
    if (o->conv) {
      const auto paths = ref::write_conv_set(preset(o->preset), o->seed, o->out);
      std::cout << "wrote " << paths.size() << " conv fixtures for preset " << o->preset << " (seed " << o->seed
                << ") to " << o->out << "\n";
      return;
    }
    if (o->traces) {
      fuzz::TraceSetOptions t;
      t.cfg = preset(o->preset);
      if (!o->dims.empty()) {
        int v[4] = {0, 0, 0, 0};
        char tail = 0;
        require(std::sscanf(o->dims.c_str(), "%d,%d,%d,%d%c", &v[0], &v[1], &v[2], &v[3], &tail) == 4, "dims",
                "must be H,HV,K,V (four integers), got '", o->dims, "'");
        t.cfg.H = v[0], t.cfg.HV = v[1], t.cfg.K = v[2], t.cfg.V = v[3];
        t.cfg.name = o->preset + "-h" + std::to_string(v[0]) + "x" + std::to_string(v[1]) + "-k" + std::to_string(v[2]) +
                     "v" + std::to_string(v[3]);
      }
      if (!o->state_dtype.empty()) t.cfg.state_dtype = parse_dtype(o->state_dtype, "state-dtype");
      if (!o->act_dtype.empty()) t.cfg.act_dtype = parse_dtype(o->act_dtype, "act-dtype");
      require(o->layers >= 0, "layers", "must be >= 0, got ", o->layers);
      if (o->layers > 0) t.cfg.num_layers = std::min(o->layers, t.cfg.num_layers);
      t.cfg.validate();
      t.seed = o->seed;
      t.cases = o->cases;
      t.max_commands = o->max_commands;
      t.num_slots = o->slots;
      t.max_T = o->max_T;
      t.gates = ref::parse_gate_range(o->gates, "gates");
      t.name = o->name;
      t.out_of_place = o->out_of_place;
      t.pad_convention = ref::parse_pad_convention(o->pad_convention, "pad-convention");
      t.graph_padding = o->graph_padding;
      t.captures = o->captures;
      t.step_mix = ref::parse_step_mix(o->step_mix, "step-mix");
      const auto paths = fuzz::write_trace_set(t, o->out);
      std::set<std::string> covered;
      for (const auto& p : paths) {
        const auto c = fuzz::trace_coverage(ref::load_trace(p));
        covered.insert(c.begin(), c.end());
      }
      std::string missing;
      for (const auto& g : fuzz::trace_coverage_goal())
        if (!covered.count(g)) missing += (missing.empty() ? "" : ", ") + g;
      std::cout << "wrote " << paths.size() << " traces for preset " << o->preset << " (seed " << o->seed << ") to "
                << o->out << "\n";
      if (!missing.empty()) std::cout << "note: these traces do not cover " << missing << "\n";
      return;
    }
    const auto paths = ref::write_golden_set(preset(o->preset), o->seed, o->out);
    std::cout << "wrote " << paths.size() << " fixtures for preset " << o->preset << " (seed " << o->seed << ") to "
              << o->out << "\n";
  });

  auto* man = fx->add_subcommand("manifest", "Write or check DIR/MANIFEST.json (name, op, config, bytes, sha256 of every fixture)");
  struct ManOpts {
    std::string dir, file;
    bool check = false;
  };
  auto m = std::make_shared<ManOpts>();
  man->add_option("dir", m->dir, "Fixture directory (searched recursively)")->required();
  man->add_option("--file", m->file, "Manifest path (default DIR/MANIFEST.json)");
  man->add_flag("--check", m->check, "Compare instead of writing: exit 1 on a missing, extra or modified fixture");
  man->callback([m] {
    const std::string file = m->file.empty() ? (fs::path(m->dir) / "MANIFEST.json").string() : m->file;
    if (m->check) {
      const auto d = check_manifest(m->dir, file);
      std::cout << d.str() << "\n";
      if (!d.ok()) exit_code = 1;
      return;
    }
    const auto entries = write_manifest(m->dir, file);
    std::cout << "wrote " << file << " (" << entries.size() << " fixtures)\n";
  });
}

void register_check(CLI::App& app) {
  auto* chk = app.add_subcommand("check", "Re-run the reference on fixtures and compare under their tolerances");
  auto paths = std::make_shared<std::vector<std::string>>();
  auto json_out = std::make_shared<std::string>();
  auto quiet = std::make_shared<bool>(false);
  auto tier = std::make_shared<std::string>();
  auto target = std::make_shared<std::string>();
  auto timeout = std::make_shared<double>(exec::timeout());
  auto startup = std::make_shared<double>(exec::startup_timeout());
  auto junit_out = std::make_shared<std::string>();
  chk->add_option("paths", *paths, "Fixture files or directories (searched recursively)")->required();
  chk->add_option("--tier", *tier,
                  "Judge the oracle's replay of traces at this precision tier (fp32, tf32, bf16) instead of their "
                  "stored tolerance (exact)");
  chk->add_option("--json", *json_out, "Write a machine-readable report to this file (atomically)");
  chk->add_option("--junit", *junit_out,
                  "Write a JUnit XML report to this file (atomically): one test case per fixture, a failure naming "
                  "the worst element and the command that reproduces it");
  chk->add_flag("--quiet", *quiet, "Print failing fixtures only");
  chk->add_option("--target", *target,
                  "Judge an implementation instead of the reference: exec:'COMMAND' runs static fixtures through its "
                  "`fixture` command and traces through its lifecycle commands, at the tier it claims "
                  "(docs/target-protocol.md)");
  chk->add_option("--target-timeout", *timeout, "Seconds an exec: target may take for one command")
      ->capture_default_str();
  chk->add_option("--target-startup-timeout", *startup,
                  "Seconds a new exec: target process may take to start and answer hello")
      ->capture_default_str();
  chk->callback([paths, json_out, quiet, tier, target, timeout, startup, junit_out] {
    const auto files = collect_fixtures(*paths);
    require(!files.empty(), "paths", "no .safetensors files found");
    if (!target->empty()) {
      require(target->rfind("exec:", 0) == 0 && target->size() > 5, "target",
              "must be exec:'COMMAND' (the reference is what check runs without --target)");
      require(tier->empty(), "tier", "an exec: target is judged at the tier it claims (its capabilities)");
      exec::set_timeout(*timeout);
      exec::set_startup_timeout(*startup);
      nlohmann::json rep;
      const auto n = check_through_and_print(target->substr(5), files, &rep, *quiet);
      const nlohmann::json report{{"command", "check"},
                                  {"target", *target},
                                  {"passed", n.passed},
                                  {"failed", n.failed},
                                  {"not_covered", n.not_covered},
                                  {"fixtures_through_target", nlohmann::json::array({{{"target", *target},
                                                                                      {"passed", n.passed},
                                                                                      {"failed", n.failed},
                                                                                      {"not_covered", n.not_covered},
                                                                                      {"results", rep}}})}};
      if (!json_out->empty()) write_json_report(*json_out, report);
      if (!junit_out->empty()) write_junit(*junit_out, junit_suites(report));
      if (n.passed + n.failed == 0) std::cout << "nothing was judged: every fixture is outside the target's capabilities\n";
      if (n.failed || n.passed + n.failed == 0) exit_code = 1;
      return;
    }
    nlohmann::json rep;
    const int failures =
        check_and_print(files, &rep, *quiet, tier->empty() ? std::nullopt : std::optional<Tier>(parse_tier(*tier, "tier")));
    std::cout << (files.size() - failures) << " passed, " << failures << " failed\n";
    const nlohmann::json report{
        {"command", "check"}, {"fixtures", rep}, {"passed", files.size() - failures}, {"failed", failures}};
    if (!json_out->empty()) write_json_report(*json_out, report);
    if (!junit_out->empty()) write_junit(*junit_out, junit_suites(report));
    if (failures) exit_code = 1;
  });
}

}  // namespace replayssm::cli
