// replayssm — command-line front end of the oracle suite. Each subcommand is a thin wrapper over library
// functions; no logic lives only here.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "commands.hpp"
#include "exec_target.hpp"
#include "rc_quiet.hpp"
#if defined(REPLAYSSM_HAS_CUDA)
#include "cuda_target.hpp"
#endif
#include "replayssm/error.hpp"
#include "replayssm/version.hpp"

namespace replayssm::cli {
int exit_code = 0;
}

int main(int argc, char** argv) {
  CLI::App app{"replayssm: reference and conformance oracle for ReplaySSM (GDN / KDA) in hybrid models"};
  app.require_subcommand(1);
  // The one project version (the VERSION file); `python -m replayssm_kit --version` prints the same.
  app.set_version_flag("--version", "replayssm " + replayssm::project_version());
#if defined(REPLAYSSM_HAS_CUDA)
  replayssm::conformance::register_cuda_targets();  // `--target cuda` / `cuda_full_state` (need a GPU to run)
#endif
  replayssm::exec::register_exec_targets();  // `--target exec:'COMMAND'`
  replayssm::cli::register_conform(app);
  replayssm::cli::register_fuzz(app);
  replayssm::cli::register_fixtures(app);
  replayssm::cli::register_check(app);
  replayssm::cli::register_bench(app);
  replayssm::cli::register_mrope(app);
  replayssm::cli::register_report(app);
  replayssm::cli::register_conv(app);
  try {
    // Campaigns run from their own --seed: RapidCheck's "Using configuration: seed=..." line would only mislead.
    replayssm::fuzz::load_rapidcheck_configuration_quietly();
    replayssm::fuzz::drop_rapidcheck_reproduce_lines();
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "replayssm: error: %s\n", e.what());
    return 2;
  }
  return replayssm::cli::exit_code;
}
