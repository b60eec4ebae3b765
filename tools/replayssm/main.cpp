// replayssm — command-line front end of the oracle suite. Each subcommand is a thin wrapper over library
// functions; no logic lives only here.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "replayssm/error.hpp"

void register_mrope(CLI::App& app);

int main(int argc, char** argv) {
  CLI::App app{"replayssm: reference and conformance oracle for ReplaySSM (GDN / KDA) in hybrid models"};
  app.require_subcommand(1);
  register_mrope(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const replayssm::Error& e) {
    std::fprintf(stderr, "replayssm: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "replayssm: error: %s\n", e.what());
    return 2;
  }
  return 0;
}
