// RapidCheck prints "Using configuration: seed=..." to stderr the first time its global configuration is read
// (lazily, from RC_PARAMS: rc::detail::configuration()). For a property test that seed is the one that
// reproduces it; for a fuzz campaign it is not (campaigns run from their own --seed), so the CLI reads the
// configuration once up front with that line dropped. Property tests do not call this and keep printing it.
#pragma once

namespace replayssm::fuzz {

// Loads RapidCheck's configuration now; its "Using configuration:" line is dropped, anything else it prints
// (an RC_PARAMS parse error, before it exits) still reaches stderr.
void load_rapidcheck_configuration_quietly();

// From now on drops RapidCheck's exit message after a failing property ("Some of your RapidCheck properties had
// failures ... RC_PARAMS=\"reproduce=...\""): a campaign is reproduced by its --seed or its dump, never by
// RC_PARAMS, so that line would mislead. Other stderr output passes through, line by line.
void drop_rapidcheck_reproduce_lines();

}  // namespace replayssm::fuzz
