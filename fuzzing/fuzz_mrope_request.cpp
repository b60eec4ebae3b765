// libFuzzer harness: the request parser of `replayssm mrope positions` (reference/mrope/src/mrope_json.cpp),
// for every MRoPE preset. A request may legitimately ask for up to 2^24 prompt tokens (kMaxTokens): the
// harness parses and plans any request, and runs the full report (positions, schedule, text form) for those
// whose prompt plus generated tokens stay below 2^16, so that one input costs milliseconds, not gigabytes.
#include "harness.hpp"
#include "replayssm/error.hpp"
#include "replayssm/mrope/mrope.hpp"
#include "replayssm/mrope/mrope_json.hpp"

using namespace replayssm;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  nlohmann::json doc;
  try {
    doc = mrope::parse_request_text(fuzzing::text_of(data, size));
  } catch (const Error&) {
    return 0;
  }
  for (const auto& name : mrope::preset_names()) {
    const mrope::Preset preset = mrope::get_preset(name);
    try {
      if (!doc.is_object() || !doc.contains("segments")) {
        (void)mrope::positions_report(preset, doc);  // refused: no segments
        continue;
      }
      const mrope::Request request{mrope::segments_from_json(doc.at("segments"), "segments")};
      const mrope::PromptPlan plan(preset, request);
      const auto gen = doc.find("generated");
      const bool small = plan.prompt_len() < (1 << 16) &&
                         (gen == doc.end() || !gen->is_number_integer() || gen->get<std::int64_t>() < (1 << 16));
      if (small) (void)mrope::format_report(mrope::positions_report(preset, doc));
    } catch (const Error&) {
    }
  }
  return 0;
}
