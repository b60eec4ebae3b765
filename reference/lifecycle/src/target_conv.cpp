// The conv component's default on a Target that does not keep conv windows (Target::conv_state() false):
// every conv call is an Error naming "conv", so a setup with `conv` never runs on it silently.
#include "replayssm/error.hpp"
#include "replayssm/lifecycle/target.hpp"

namespace replayssm::ref {

namespace {
[[noreturn]] void no_conv(const Target& t) {
  fail("conv", "target '", t.name(), "' keeps no conv state (its conv_state() capability is false)");
}
}  // namespace

std::vector<std::vector<float>> Target::conv_step(const std::vector<TargetRow>&, const std::vector<SequenceInputs>&) {
  no_conv(*this);
}
void Target::conv_commit(const std::vector<TargetRow>&) { no_conv(*this); }
std::vector<float> Target::conv_committed_state(std::int32_t, std::int32_t) const { no_conv(*this); }
std::vector<float> Target::conv_pool(std::int32_t) const { no_conv(*this); }

}  // namespace replayssm::ref
