#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "campaign.hpp"
#include "commands.hpp"
#include "exec_target.hpp"
#include "replayssm/lifecycle/target.hpp"
#ifdef REPLAYSSM_HAS_CUDA
#include "replayssm/cuda/bench.hpp"
#endif

namespace replayssm::cli {

// `replayssm bench fuzz`: throughput of the lifecycle judge (cases per second) for targets on a few presets.
// For an exec: target the wall time is split into transport (round trips minus the implementation's own
// compute, plus frame encoding and decoding), the implementation's compute (its answers' compute_s) and
// the rest (the oracle, the checks, the generator). A benchmark, not a test: it reports numbers and never
// fails on speed.
void register_bench_fuzz(CLI::App& bench) {
  auto* c = bench.add_subcommand("fuzz", "Fuzz throughput (cases/s) of targets, transport of exec: targets apart");
  auto presets = std::make_shared<std::vector<std::string>>(std::vector<std::string>{"tiny-gdn", "tiny-kda", "qwen3.5", "kimi-linear"});
  auto targets = std::make_shared<std::vector<std::string>>(std::vector<std::string>{"replay", "ring"});
  auto cases = std::make_shared<int>(20);
  auto layers = std::make_shared<int>(1);
  auto max_commands = std::make_shared<int>(100);
  auto json_out = std::make_shared<std::string>();
  c->add_option("--presets", *presets, "Presets to measure (comma-separated)")->delimiter(',')->capture_default_str();
  c->add_option("--targets", *targets, "Targets to measure (replay, ring, exec:'COMMAND', ...; repeat the flag or separate by spaces)")
      ->capture_default_str();
  c->add_option("--cases", *cases, "Cases per campaign")->capture_default_str();
  c->add_option("--layers", *layers, "Layers simulated per preset")->capture_default_str();
  c->add_option("--max-commands", *max_commands, "Longest command sequence")->capture_default_str();
  c->add_option("--json", *json_out, "Write the table as JSON");
  c->callback([presets, targets, cases, layers, max_commands, json_out] {
    auto rows = nlohmann::json::array();
    std::printf("| preset | target | layers | cases | seconds | cases/s | transport s (%% of wall) | target compute s | "
                "judge s |\n|---|---|---|---|---|---|---|---|---|\n");
    for (const auto& p : *presets)
      for (const auto& t : *targets) {
        fuzz::FuzzOptions o;
        o.cfg = preset(p);
        o.cfg.num_layers = std::min(*layers, o.cfg.num_layers);
        o.target = t;
        o.cases = *cases;
        o.max_commands = *max_commands;
        o.seed = 1;
        const bool exec = t.rfind("exec:", 0) == 0;
        if (exec) {
          ref::make_target(t);  // starts the process: its start-up is not part of the measured campaign
          exec::reset_transport_stats(t.substr(5));
        }
        const auto r = fuzz::run_fuzz(o, nullptr);
        const exec::TransportStats ts = exec ? exec::transport_stats(t.substr(5)) : exec::TransportStats{};
        const double transport = ts.transport_s(), judge = r.seconds - ts.round_trip_s - ts.codec_s;
        if (!r.covered)
          std::printf("| %s | %s | %d | not covered: %s | | | | | |\n", p.c_str(), t.c_str(), o.cfg.num_layers,
                      r.not_covered.c_str());
        else
          std::printf("| %s | %s | %d | %d%s | %.2f | %.2f | %.2f (%.0f%%) | %.2f | %.2f |\n", p.c_str(), t.c_str(),
                      o.cfg.num_layers, r.cases_passed, r.failed ? " (FAILED)" : "", r.seconds, r.cases_per_second,
                      transport, r.seconds > 0 ? 100.0 * transport / r.seconds : 0.0, ts.target_compute_s, judge);
        rows.push_back({{"preset", p},
                        {"target", t},
                        {"layers", o.cfg.num_layers},
                        {"report", r.to_json()},
                        {"transport_s", transport},
                        {"target_compute_s", ts.target_compute_s},
                        {"judge_s", judge},
                        {"commands", ts.commands},
                        {"bytes_sent", ts.bytes_sent},
                        {"bytes_received", ts.bytes_received}});
        if (r.failed) exit_code = 1;
      }
    if (!json_out->empty()) std::ofstream(*json_out) << rows.dump(2) << "\n";
  });
}

#ifdef REPLAYSSM_HAS_CUDA
// `replayssm bench kernels`: the GPU kernel benchmark (replayssm/cuda/bench.hpp, the same code as the
// replayssm_bench executable). Without a usable CUDA device it prints why and exits with status 2.
void register_bench_kernels(CLI::App& bench) {
  auto* c = bench.add_subcommand(
      "kernels", "GPU: ReplaySSM step vs full-state step, against the device's measured copy bandwidth");
  auto o = std::make_shared<cuda::BenchOptions>();
  auto accept = std::make_shared<std::string>("all");
  auto schedule = std::make_shared<std::string>("auto");
  c->add_option("--preset", o->preset, "Model preset")->capture_default_str();
  c->add_option("--batches", o->batches, "Batch sizes (comma-separated)")->delimiter(',')->capture_default_str();
  c->add_option("--T", o->Ts, "Draft window lengths T (comma-separated)")->delimiter(',')->capture_default_str();
  c->add_option("--accept", *accept, "Accepted tokens n per row, or 'all' (n = T)")->capture_default_str();
  c->add_option("--repeats", o->repeats, "Timed rounds per unit (medians reported)")->capture_default_str();
  c->add_option("--schedule", *schedule, "Verify / commit schedule")
      ->check(CLI::IsMember({"auto", "per-tile", "persistent"}))
      ->capture_default_str();
  c->add_option("--csv", o->csv, "Write the rows as CSV");
  c->add_option("--md", o->md, "Write the markdown table");
  c->callback([o, accept, schedule] {
    cuda::BenchOptions opts = *o;
    // The flags the replayssm_bench executable shares, parsed by the same function.
    const cuda::BenchOptions parsed = cuda::parse_bench_args({"--accept", *accept, "--schedule", *schedule});
    opts.accept = parsed.accept;
    opts.schedule = parsed.schedule;
    exit_code = cuda::run_bench(opts, stdout, stderr);
  });
}
#endif

void register_bench(CLI::App& app) {
  auto* b = app.add_subcommand("bench", "Benchmarks (speed is measured here, never asserted in unit tests)");
  b->require_subcommand(1);
  register_bench_fuzz(*b);
#ifdef REPLAYSSM_HAS_CUDA
  register_bench_kernels(*b);
#endif
}

}  // namespace replayssm::cli
