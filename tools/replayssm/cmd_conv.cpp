// `replayssm conv fuzz`: a front end to the kernel-level lifecycle campaigns (reference/fuzz/campaign.hpp) with
// the conv component in every case, judged by the one lifecycle judge (its conv checks: judge_conv.cpp), on the
// reference target of the chosen conv design, optionally with a conv fault of the catalogue; exit 1 when a
// check fails, with the shrunk case dumped for `replayssm fuzz --replay`.
#include <iostream>
#include <memory>

#include "campaign.hpp"
#include "commands.hpp"
#include "fuzz_args.hpp"
#include "replayssm/config.hpp"
#include "replayssm/error.hpp"
#include "replayssm/lifecycle/fault.hpp"
#include "replayssm/recurrence/conv.hpp"

namespace replayssm::cli {

namespace {

// The conv faults of the catalogue, for the option's help text.
std::string conv_fault_names() {
  std::string s;
  for (auto f : ref::all_faults())
    if (ref::conv_fault(f)) s += (s.empty() ? "" : ", ") + ref::to_string(f);
  return s;
}

}  // namespace

void register_conv(CLI::App& app) {
  auto* conv = app.add_subcommand("conv", "The short convolution's state (docs/lifecycle.md, \"The conv state\")");
  conv->require_subcommand(1);
  auto* fz = conv->add_subcommand(
      "fuzz", "Lifecycle campaigns with the conv component in every case (the lifecycle judge's conv checks "
              "after every command), on the reference target of one conv design");
  struct Opts {
    std::string preset = "tiny-gdn", design = "replay", fault = "none", state_dtype, activation = "silu", dump_dir;
    std::uint64_t seed = 1;
    int cases = 100, commands = 40, slots = 6, max_T = 5, kernel_size = 4, layers = 1;
    bool bias = false;
  };
  auto o = std::make_shared<Opts>();
  fz->add_option("--preset", o->preset, "Model preset whose heads and dims give the channels")->capture_default_str();
  fz->add_option("--layers", o->layers, "Layers to simulate (0 = all of the preset)")->capture_default_str();
  fz->add_option("--design", o->design, "Target under test: replay (ReplaySSM conv windows) or full_state")
      ->capture_default_str();
  fz->add_option("--fault", o->fault, "Inject a conv fault of the catalogue (" + conv_fault_names() + ")")
      ->capture_default_str();
  fz->add_option("--seed", o->seed, "Campaign seed")->capture_default_str();
  fz->add_option("--cases", o->cases, "Command sequences")->capture_default_str();
  fz->add_option("--commands", o->commands, "Longest command sequence")->capture_default_str();
  fz->add_option("--slots", o->slots, "State pool slots")->capture_default_str();
  fz->add_option("--max-T", o->max_T, "Largest verify window")->capture_default_str();
  fz->add_option("--kernel-size", o->kernel_size, "Conv kernel size W (the window keeps W - 1 columns)")
      ->capture_default_str();
  fz->add_option("--state-dtype", o->state_dtype, "F32 or BF16 (default: the preset's activation dtype)");
  fz->add_option("--activation", o->activation, "silu or none")->capture_default_str();
  fz->add_flag("--bias", o->bias, "Give the convolution a bias");
  fz->add_option("--dump-dir", o->dump_dir, "Where a failing case is written");
  fz->callback([o] {
    require(o->design == "replay" || o->design == "full_state", "--design", "'", o->design,
            "' is not replay or full_state");
    const ref::Fault fault = ref::parse_fault(o->fault);
    require(fault == ref::Fault::None || ref::conv_fault(fault), "--fault", "'", o->fault,
            "' is not a conv fault (", conv_fault_names(), "); other faults: replayssm fuzz --fault");
    fuzz::FuzzOptions f;
    f.target = o->design;
    f.cfg = preset(o->preset);
    require(o->layers >= 0, "--layers", "must be >= 0");
    if (o->layers > 0) f.cfg.num_layers = std::min(o->layers, f.cfg.num_layers);
    f.seed = o->seed;
    f.cases = o->cases;
    f.max_commands = o->commands;
    f.num_slots = o->slots;
    f.max_T = o->max_T;
    f.fault = fault;
    f.conv = fuzz::ConvMix::On;
    f.conv_shape.kernel_size = o->kernel_size;
    f.conv_shape.activation = ref::parse_conv_activation(o->activation, "--activation");
    f.conv_shape.bias = o->bias;
    if (!o->state_dtype.empty()) f.conv_shape.state_dtype = parse_dtype(o->state_dtype, "--state-dtype");
    f.dump_dir = o->dump_dir;
    // The conv configuration every case carries (the weights are seeded per case).
    ref::ConvConfig cc = ref::conv_config_for(f.cfg);
    cc.kernel_size = f.conv_shape.kernel_size;
    cc.activation = f.conv_shape.activation;
    cc.bias = f.conv_shape.bias;
    cc.state_dtype = f.conv_shape.state_dtype.value_or(f.cfg.act_dtype);
    cc.validate("conv");
    const auto r = fuzz::run_fuzz(f, progress_stream());
    const bool ok = !r.failed && r.covered;
    std::cout << (ok ? "ok  " : "FAIL") << " conv " << o->design << " fault " << o->fault << ": " << r.cases_passed
              << " of " << f.cases << " cases passed (" << f.cfg.num_layers << " layer(s) of " << o->preset
              << "), config " << ref::to_json(cc).dump() << "\n";
    if (!ok) {
      std::cout << "     " << (r.covered ? r.reason : "not covered: " + r.not_covered) << "\n";
      if (!r.dump_path.empty())
        std::cout << "     dump: " << r.dump_path << " (replayssm fuzz --replay " << shell_quote(r.dump_path) << ")\n";
      std::cout << "     reproduce: replayssm conv fuzz --preset " << o->preset << " --layers " << o->layers
                << " --design " << o->design << " --fault " << o->fault << " --seed " << o->seed << " --cases "
                << f.cases << " --commands " << f.max_commands << " --slots " << f.num_slots << " --max-T " << f.max_T
                << " --kernel-size " << cc.kernel_size << " --state-dtype " << dtype_name(cc.state_dtype)
                << " --activation " << o->activation << (o->bias ? " --bias" : "") << "\n";
      exit_code = 1;
    }
  });
}

}  // namespace replayssm::cli
