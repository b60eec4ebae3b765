// `replayssm conv fuzz`: the conv state's lifecycle campaign (reference/conv_lifecycle.hpp) on a preset's conv
// component, optionally with a catalogued conv fault; exit 1 when a check fails.
#include <iostream>
#include <memory>

#include "commands.hpp"
#include "replayssm/config.hpp"
#include "replayssm/error.hpp"
#include "replayssm/lifecycle/conv_lifecycle.hpp"

namespace replayssm::cli {

void register_conv(CLI::App& app) {
  auto* conv = app.add_subcommand("conv", "The short convolution's state (docs/lifecycle.md, \"The conv state\")");
  conv->require_subcommand(1);
  auto* fz = conv->add_subcommand(
      "fuzz", "Seeded lifecycle campaigns of a conv-state slot pool against the full-state oracle and the request "
              "histories");
  struct Opts {
    std::string preset = "tiny-gdn", design = "replay", fault = "none", state_dtype, activation = "silu";
    std::uint64_t seed = 1;
    int cases = ref::ConvCampaignOptions{}.cases, commands = ref::ConvCampaignOptions{}.commands,
        slots = ref::ConvCampaignOptions{}.num_slots, max_T = ref::ConvCampaignOptions{}.max_T, kernel_size = 4;
    bool bias = false;
  };
  auto o = std::make_shared<Opts>();
  fz->add_option("--preset", o->preset, "Model preset whose heads and dims give the channels")->capture_default_str();
  fz->add_option("--design", o->design, "Pool under test: replay or full_state")->capture_default_str();
  fz->add_option("--fault", o->fault, "Inject a conv fault (conv_rollback_to_window, conv_column_off_by_one, "
                                      "conv_pad_row_writes_slot0, conv_stale_state_on_fresh_prefill)")
      ->capture_default_str();
  fz->add_option("--seed", o->seed, "Campaign seed")->capture_default_str();
  fz->add_option("--cases", o->cases, "Command sequences")->capture_default_str();
  fz->add_option("--commands", o->commands, "Commands per sequence")->capture_default_str();
  fz->add_option("--slots", o->slots, "Slots of the pool")->capture_default_str();
  fz->add_option("--max-T", o->max_T, "Largest verify window and prefill chunk")->capture_default_str();
  fz->add_option("--kernel-size", o->kernel_size, "Conv kernel size W (the state keeps W - 1 columns)")
      ->capture_default_str();
  fz->add_option("--state-dtype", o->state_dtype, "F32 or BF16 (default: the preset's activation dtype)");
  fz->add_option("--activation", o->activation, "silu or none")->capture_default_str();
  fz->add_flag("--bias", o->bias, "Give the convolution a bias");
  fz->callback([o] {
    ref::ConvCampaignOptions c;
    c.cfg = ref::conv_config_for(preset(o->preset));
    c.cfg.kernel_size = o->kernel_size;
    c.cfg.bias = o->bias;
    c.cfg.activation = ref::parse_conv_activation(o->activation, "--activation");
    if (!o->state_dtype.empty()) c.cfg.state_dtype = parse_dtype(o->state_dtype, "--state-dtype");
    c.cfg.validate("conv");
    c.seed = o->seed;
    c.cases = o->cases;
    c.commands = o->commands;
    c.num_slots = o->slots;
    c.max_T = o->max_T;
    if (o->design != "replay" && o->design != "full_state")
      throw replayssm::Error("--design", "'" + o->design + "' is not replay or full_state");
    const auto design = o->design == "replay" ? ref::ConvDesign::Replay : ref::ConvDesign::FullState;
    const auto r = ref::run_conv_campaign(c, design, ref::parse_conv_fault(o->fault));
    std::cout << (r.ok ? "ok  " : "FAIL") << " conv " << o->design << " fault " << o->fault << ": " << r.cases_run
              << " of " << c.cases << " cases run, config " << ref::to_json(c.cfg).dump() << "\n";
    if (!r.ok) {
      std::cout << "     " << r.failure << "\n     reproduce: replayssm conv fuzz --preset " << o->preset
                << " --design " << o->design << " --fault " << o->fault << " --seed " << o->seed << " --cases "
                << c.cases << " --commands " << c.commands << " --slots " << c.num_slots << " --max-T " << c.max_T
                << " --kernel-size " << c.cfg.kernel_size << " --state-dtype " << dtype_name(c.cfg.state_dtype)
                << " --activation " << o->activation << (o->bias ? " --bias" : "") << "\n";
      exit_code = 1;
    }
  });
}

}  // namespace replayssm::cli
