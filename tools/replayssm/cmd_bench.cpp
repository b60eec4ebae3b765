#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "campaign.hpp"
#include "commands.hpp"
#ifdef REPLAYSSM_HAS_CUDA
#include "replayssm/cuda/bench.hpp"
#endif

namespace replayssm::cli {

// `replayssm bench fuzz`: throughput of the lifecycle judge (cases per second) for the reference targets on a
// few presets. A benchmark, not a test: it reports numbers and never fails on speed.
void register_bench_fuzz(CLI::App& bench) {
  auto* c = bench.add_subcommand("fuzz", "Fuzz throughput (cases/s) of the reference targets");
  auto presets = std::make_shared<std::vector<std::string>>(std::vector<std::string>{"tiny-gdn", "tiny-kda", "qwen3.5", "kimi-linear"});
  auto cases = std::make_shared<int>(20);
  auto layers = std::make_shared<int>(1);
  auto json_out = std::make_shared<std::string>();
  c->add_option("--presets", *presets, "Presets to measure")->capture_default_str();
  c->add_option("--cases", *cases, "Cases per campaign")->capture_default_str();
  c->add_option("--layers", *layers, "Layers simulated per preset")->capture_default_str();
  c->add_option("--json", *json_out, "Write the table as JSON");
  c->callback([presets, cases, layers, json_out] {
    auto rows = nlohmann::json::array();
    std::printf("| preset | target | layers | cases | seconds | cases/s |\n|---|---|---|---|---|---|\n");
    for (const auto& p : *presets)
      for (const char* t : {"replay", "ring"}) {
        fuzz::FuzzOptions o;
        o.cfg = preset(p);
        o.cfg.num_layers = std::min(*layers, o.cfg.num_layers);
        o.target = t;
        o.cases = *cases;
        o.seed = 1;
        const auto r = fuzz::run_fuzz(o, nullptr);
        std::printf("| %s | %s | %d | %d | %.2f | %.2f |\n", p.c_str(), t, o.cfg.num_layers, r.cases_passed,
                    r.seconds, r.cases_per_second);
        rows.push_back({{"preset", p}, {"target", t}, {"layers", o.cfg.num_layers}, {"report", r.to_json()}});
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
