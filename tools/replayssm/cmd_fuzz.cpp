// `replayssm fuzz`: fuzz campaigns of one target (or both reference designs) against the full-state oracle, or
// the replay of a dumped failing case.
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "fuzz_args.hpp"
#include "trace_gen.hpp"

namespace replayssm::cli {

void register_fuzz(CLI::App& app) {
  auto* c = app.add_subcommand("fuzz", "Fuzz a ReplaySSM target against the full-state oracle (lifecycle model)");
  auto a = std::make_shared<FuzzArgs>();
  auto replay = std::make_shared<std::string>();
  auto json_out = std::make_shared<std::string>();
  auto export_to = std::make_shared<std::string>();
  c->add_option("--target", a->target,
                "reference (= replay and ring), replay, ring, cuda, cuda_full_state, or exec:'COMMAND' (an "
                "implementation in its own process, docs/target-protocol.md)")
      ->capture_default_str();
  add_fuzz_options(c, *a);
  c->add_option("--fault", a->fault, "Inject a catalogue fault into the target (to see the suite catch it)")
      ->capture_default_str();
  c->add_option("--replay", *replay,
                "Re-run a dumped failing case instead of fuzzing (an exec: case needs --target again)");
  c->add_option("--json", *json_out, "Write a machine-readable report to this file");
  c->add_option("--export-trace", *export_to,
                "Also write the failing (shrunk) case, or the --replay case, as a trace fixture (op lifecycle.trace) "
                "that an implementation can replay without this project (replayssm_kit.trace); a campaign then "
                "generates only what a trace records (the -1 PAD convention, no captured steps, in-place commits)");
  c->callback([c, a, replay, json_out, export_to] {
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
    auto reports = nlohmann::json::array();
    bool exported = false;
    for (const auto& t : targets_for(a->target, a->fault)) {
      auto o = options_for(*a, t);
      // A case to export must be one a trace records: no captured steps, the -1 PAD convention.
      o.trace_expressible = !export_to->empty();
      const auto r = fuzz::run_fuzz(o, progress_stream());
      print_report(r, *a);
      auto j = r.to_json();
      if (r.failed && !r.dump_path.empty() && !export_to->empty() && !exported) {
        fuzz::export_trace(fuzz::load_dump(r.dump_path), *export_to, fuzz::trace_source_of_dump(r.dump_path));
        std::cout << "  trace of the shrunk case: " << *export_to << "\n";
        j["trace_path"] = *export_to;
        exported = true;  // the first failing campaign's case; a second one would overwrite it
      }
      reports.push_back(j);
      if (r.failed) exit_code = 1;
    }
    if (!json_out->empty()) std::ofstream(*json_out) << nlohmann::json{{"campaigns", reports}}.dump(2) << "\n";
  });
}

}  // namespace replayssm::cli
