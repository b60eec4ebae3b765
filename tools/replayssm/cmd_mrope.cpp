// `replayssm mrope ...`: MRoPE position questions answered by the reference library.
//   replayssm mrope positions --model qwen3.5 --request FILE.json   (request format: docs/mrope.md)
//   replayssm mrope presets                                         (the rotary and vision settings per model)
//   replayssm mrope fuzz --target exec:'COMMAND' [--model M] [--cases N] [--seed S]
//                                                                   (sessions through protocol 1.10, judged per token)
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>
#include <string>

#include "commands.hpp"
#include "connection.hpp"
#include "mrope_campaign.hpp"
#include "replayssm/error.hpp"
#include "report.hpp"
#include "replayssm/fixture.hpp"
#include "replayssm/mrope/mrope.hpp"
#include "replayssm/mrope/mrope_json.hpp"

namespace replayssm::cli {

namespace {

struct MropeOptions {
  std::string model;
  std::string request;
};

void print_presets() {
  using namespace replayssm::mrope;
  for (const auto& name : replayssm::mrope::preset_names()) {
    const Preset p = replayssm::mrope::get_preset(name);
    std::cout << name << ": head_dim " << p.head_dim << ", rotary_dim " << p.rotary_dim() << ", theta " << p.theta
              << ", mrope_section [" << p.section[0] << "," << p.section[1] << "," << p.section[2] << "] "
              << to_string(p.layout) << ", spatial_merge_size " << p.spatial_merge_size << ", video rule "
              << to_string(p.video_rule);
    if (p.video_rule == VideoRule::ScaledTime) std::cout << " (tokens_per_second " << p.tokens_per_second << ")";
    std::cout << "\n";
  }
}

}  // namespace

void register_mrope(CLI::App& app) {
  auto opts = std::make_shared<MropeOptions>();
  CLI::App* mrope = app.add_subcommand("mrope", "multimodal rotary positions (Qwen VL models, Qwen3.5)");
  mrope->require_subcommand(1);

  CLI::App* positions =
      mrope->add_subcommand("positions", "3-D positions and delta of a JSON request, optionally through an engine schedule");
  positions->add_option("--model", opts->model, "qwen2-vl, qwen2.5-vl, qwen3-vl or qwen3.5")->required();
  positions->add_option("--request", opts->request, "request file (JSON, see docs/mrope.md)")->required();
  positions->callback([opts] { std::cout << replayssm::mrope::positions_report_text(opts->model, opts->request); });

  CLI::App* presets = mrope->add_subcommand("presets", "list the MRoPE model presets");
  presets->callback([] { print_presets(); });

  struct FuzzOptions {
    std::string target;
    std::vector<std::string> models;
    int cases = 30;
    std::uint64_t seed = 20261204;
    std::string json, export_trace;
    double timeout = 60, startup_timeout = 300;
  };
  auto f = std::make_shared<FuzzOptions>();
  CLI::App* fuzz = mrope->add_subcommand(
      "fuzz", "MRoPE sessions (prefill chunks, verify windows, decode, padding, requests leaving) through an "
              "implementation's mrope_* commands (protocol 1.10), judged per token against the reference tracker");
  fuzz->add_option("--target", f->target, "exec:'COMMAND' (an implementation claiming mrope), or reference")->required();
  fuzz->add_option("--model", f->models, "Models to run (default: every model the target claims); repeatable");
  fuzz->add_option("--cases", f->cases, "Cases per model (case c draws from seed + c)")->capture_default_str();
  fuzz->add_option("--seed", f->seed, "Seed of the first case")->capture_default_str();
  fuzz->add_option("--json", f->json, "Write the machine-readable report to this file (atomically)");
  fuzz->add_option("--target-timeout", f->timeout, "Seconds one command of an exec: target may take")
      ->capture_default_str();
  fuzz->add_option("--target-startup-timeout", f->startup_timeout,
                   "Seconds an exec: target may take to answer hello (interpreter start, imports)")
      ->capture_default_str();
  fuzz->add_option("--export-trace", f->export_trace,
                   "Write the failing case as an MRoPE trace (a fixture of op mrope.session) to this file");
  fuzz->callback([f] {
    require(f->timeout > 0 && f->startup_timeout > 0, "target-timeout", "timeouts must be > 0 seconds");
    exec::set_timeout(f->timeout);
    exec::set_startup_timeout(f->startup_timeout);
    std::cout << "== MRoPE sessions through " << f->target << " (" << f->cases << " cases per model from seed " << f->seed
              << ")\n";
    const MropeCampaignResult r = run_mrope_campaign(f->target, f->models, f->cases, f->seed, std::cout);
    const char* level = r.failed ? "NOT CONFORMANT" : (!r.covered || !r.unmet.empty()) ? "INCOMPLETE" : "CONFORMANT";
    // A failure stops the campaign: what it had not reached yet is not listed as unexercised.
    std::cout << "== verdict for " << f->target << " (MRoPE sessions): " << level << "\n";
    if (!r.covered) std::cout << "  not exercised: MRoPE sessions (" << r.why << ")\n";
    if (!r.failed)
      for (const auto& u : r.unmet) std::cout << "  not exercised: " << u << "\n";
    if (!f->export_trace.empty() && r.failed) {
      save_fixture(f->export_trace, mrope::session_fixture(mrope::draw_session(r.failing_model, r.failing_seed)));
      std::cout << "wrote the failing case as an MRoPE trace to " << f->export_trace << "\n";
    }
    if (!f->json.empty()) {
      nlohmann::json j = nlohmann::json::parse(r.to_json().dump());
      j["command"] = "mrope fuzz";
      j["verdict"] = level;
      write_json_report(f->json, j);
    }
    exit_code = r.failed ? 1 : (!r.covered || !r.unmet.empty()) ? 3 : 0;
  });
}

}  // namespace replayssm::cli
