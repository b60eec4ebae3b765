// `replayssm mrope ...`: MRoPE position questions answered by the reference library.
//   replayssm mrope positions --model qwen3.5 --request FILE.json   (request format: docs/mrope.md)
//   replayssm mrope presets                                         (the rotary and vision settings per model)
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>
#include <string>

#include "commands.hpp"
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
  for (const auto& name : preset_names()) {
    const Preset p = get_preset(name);
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
}

}  // namespace replayssm::cli
