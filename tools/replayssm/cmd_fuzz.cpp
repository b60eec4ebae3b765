// `replayssm fuzz`: fuzz campaigns of one target (or both reference designs) against the full-state oracle, or
// the replay of a dumped failing case.
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "engine_case.hpp"
#include "engine_campaign.hpp"
#include "engine_fuzz.hpp"
#include "fuzz_args.hpp"
#include "replayssm/error.hpp"
#include "report.hpp"
#include "trace_gen.hpp"
#include "verdict.hpp"

namespace replayssm::cli {

void register_fuzz(CLI::App& app) {
  auto* c = app.add_subcommand("fuzz", "Fuzz a ReplaySSM target against the full-state oracle (lifecycle model)");
  auto a = std::make_shared<FuzzArgs>();
  auto lvl = std::make_shared<EngineLevelArgs>();
  auto replay = std::make_shared<std::string>();
  auto json_out = std::make_shared<std::string>();
  auto export_to = std::make_shared<std::string>();
  auto junit_out = std::make_shared<std::string>();
  c->add_option("--target", a->target,
                "reference (= replay and ring), replay, ring, cuda, cuda_full_state, cuda_fused (the fused step, commits "
                "deferred to the next step), or exec:'COMMAND' (an "
                "implementation in its own process, docs/target-protocol.md); with --level engine: "
                "engine:reference (raw-payload design, with the spec-ring engine in lock step), engine:ring "
                "(spec-ring design) or exec:'COMMAND'")
      ->capture_default_str();
  add_fuzz_options(c, *a);
  add_engine_level_options(c, *lvl);
  c->add_option("--fault", a->fault, "Inject a catalogue fault into the target (to see the suite catch it)")
      ->capture_default_str();
  c->add_option("--replay", *replay,
                "Re-run a dumped failing case instead of fuzzing (an exec: case needs --target again)");
  c->add_option("--json", *json_out, "Write a machine-readable report to this file (atomically)");
  c->add_option("--junit", *junit_out,
                "Write a JUnit XML report to this file (atomically): one test case per campaign, failures with the "
                "first disagreement and the repro commands, campaigns the target does not cover as skipped");
  c->add_option("--export-trace", *export_to,
                "Also write the failing (shrunk) case, or the --replay case, as a trace fixture (op lifecycle.trace) "
                "that an implementation can replay without this project (replayssm_kit.trace; captured steps and "
                "every PAD convention are recorded, trace_version 1.1)");
  c->callback([c, a, lvl, replay, json_out, export_to, junit_out] {
    const bool engine_case = !replay->empty() && fuzz::is_engine_case(*replay);
    require(export_to->empty() || (!engine_case && (!replay->empty() || lvl->level != "engine")), "export-trace",
            "traces record kernel-level commands; an engine-level campaign or case has none to export");
    if (engine_case) {  // an engine-level case (docs/lifecycle.md)
      std::string notes;
      const std::string t = c->count("--target") > 0 ? a->target : "";
      const auto why = fuzz::replay_engine_dump(*replay, t.rfind("engine:", 0) == 0 ? t.substr(7) : t, &notes);
      if (!notes.empty()) std::cout << notes << "\n";
      std::cout << "replaying engine-level case " << *replay << ": " << (why.empty() ? "case passes now" : "case fails: " + why)
                << "\n";
      if (!why.empty()) exit_code = 1;
      return;
    }
    if (replay->empty() && lvl->level == "engine") {
      exit_code = run_engine_level(*a, *lvl, *json_out, *junit_out);
      return;
    }
    require(lvl->level == "kernel" || lvl->level == "engine", "level", "must be kernel or engine, got '", lvl->level, "'");
    if (!replay->empty()) {
      const bool given = c->count("--target") > 0;
      if (!export_to->empty()) {
        const auto dumped = fuzz::load_dump(*replay);
        fuzz::export_trace(dumped, *export_to, fuzz::trace_source_of_dump(*replay));
        std::cout << "wrote the trace of " << *replay << " to " << *export_to << "\n";
        if (dumped.target.rfind("exec:", 0) == 0 && !given) return;  // nothing to run it against
      }
      std::cout << "replaying " << *replay << " (fault, setup and commands as stored in the file; target "
                << (given ? a->target : "as stored") << ")\n";
      std::string notes;
      const auto why = fuzz::replay_dump(*replay, given ? a->target : "", &notes);
      if (!notes.empty()) std::cout << notes << "\n";
      std::cout << (why.empty() ? "case passes now" : "case fails: " + why) << "\n";
      if (!why.empty()) exit_code = 1;
      return;
    }
    a->export_trace = *export_to;
    auto reports = nlohmann::json::array();
    // A signal ends the run after the current call with its report written; a hung case is written by the watchdog.
    fuzz::install_stop_signals();
    fuzz::set_watchdog_handler([&](const std::string& message) {
      nlohmann::json partial{{"command", "fuzz"}, {"campaigns", reports}, {"hang", message},
                             {"verdict", fuzz::to_string(fuzz::Level::NotConformant)}};
      if (!json_out->empty()) write_json_report(*json_out, partial);
      if (!junit_out->empty()) write_junit(*junit_out, junit_suites(partial));
    });
    bool exported = false;
    const fuzz::Shard shard = shard_of(*a);
    if (shard.sharded())
      std::cout << "shard " << shard.str() << ": " << fuzz::shard_cases(a->cases, shard) << " of " << a->cases
                << " cases from seed " << fuzz::shard_seed(a->seed, shard) << " (campaign seed " << a->seed << ")\n";
    for (const auto& t : targets_for(a->target, a->fault)) {
      auto o = options_for(*a, t);
      const auto r = fuzz::run_fuzz(o, progress_stream());
      print_report(r, *a);
      auto j = campaign_record(r, *a);
      if (r.failed && !r.dump_path.empty() && !export_to->empty() && !exported) {
        fuzz::export_trace(fuzz::load_dump(r.dump_path), *export_to, fuzz::trace_source_of_dump(r.dump_path));
        std::cout << "  trace of the shrunk case: " << *export_to << "\n";
        j["trace_path"] = *export_to;
        exported = true;  // the first failing campaign's case; a second one would overwrite it
      }
      reports.push_back(j);
      if (fuzz::stop_signal() != 0) break;
    }
    // The verdict per target: what its campaigns claimed against what they exercised (verdict.hpp).
    const auto verdicts = campaign_verdicts(reports, a->requirements);
    print_verdicts(verdicts);
    const fuzz::Level level = overall(verdicts);
    nlohmann::json report{{"command", "fuzz"}, {"shard", shard.to_json()}, {"campaigns", reports},
                          {"requirements", requirements_json(a->requirements)}, {"verdict", fuzz::to_string(level)}};
    for (const auto& v : verdicts) report["verdicts"].push_back(v.to_json());
    std::cout << "== verdict: " << fuzz::to_string(level) << "\n";
    if (fuzz::stop_signal() != 0) {
      report["interrupted"] = fuzz::stop_signal();
      std::cout << "== interrupted by signal " << fuzz::stop_signal() << ": the report holds the cases run so far\n";
    }
    if (!json_out->empty()) write_json_report(*json_out, report);
    if (!junit_out->empty()) write_junit(*junit_out, junit_suites(report));
    fuzz::set_watchdog_handler(nullptr);
    exit_code = fuzz::stop_signal() != 0 ? 128 + fuzz::stop_signal() : fuzz::exit_status(level);
  });
}

}  // namespace replayssm::cli
