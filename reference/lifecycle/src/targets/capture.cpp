// Capturing a CUDA-graph bucket while requests are live (Target::capture): the default refusal, and the
// reference targets' warm-up, which runs the bucket's shape as PAD rows over the target's own scratch.
#include "pooled.hpp"
#include "replayssm/error.hpp"
#include "replayssm/lifecycle/engine.hpp"

namespace replayssm::ref {

namespace {
// Seed of the dummy tokens a captured step is warmed up on (any inputs do: no state may change).
constexpr std::uint64_t kCaptureSeed = 0xca97ull;
}  // namespace

void Target::capture(std::int32_t rows, std::int32_t T) {
  fail("capture", name(), " does not capture CUDA-graph buckets (rows ", rows, ", T ", T, ")");
}

void PooledTarget::check_capture(std::int32_t rows, std::int32_t T) const {
  require(rows >= 1 && rows <= s_.max_rows(), "capture.rows", "is ", rows, ", outside [1, max_rows = ", s_.max_rows(),
          "]");
  require(T >= 1 && T <= s_.max_T, "capture.T", "is ", T, ", outside [1, max_T = ", s_.max_T, "]");
}

std::vector<SequenceInputs> PooledTarget::capture_inputs(std::int32_t tokens) const {
  std::vector<SequenceInputs> in;
  for (std::int32_t l = 0; l < s_.cfg.num_layers; ++l) in.push_back(token_inputs(s_.cfg, l, tokens, kCaptureSeed, s_.gates));
  return in;
}

void PooledTarget::capture(std::int32_t rows, std::int32_t T) {
  check_capture(rows, T);
  // The bucket as the capture records it: every row a PAD row with a window of T dummy tokens, verified into
  // a payload of its own and committed (PAD rows commit nothing), so the pools are never addressed.
  batch::Batch b;
  b.cfg = s_.cfg;
  b.pool = s_.pool_geometry();
  b.max_T = s_.max_T;
  b.total_tokens = static_cast<std::int64_t>(rows) * T;
  for (std::int32_t i = 0; i < rows; ++i) b.rows.push_back(BatchRow{kPadSlot, kPadSlot, T, i * T, 0});
  b.payload = s_.payload_geometry();
  for (std::int32_t p = 0; p < rows * b.payload.pages_per_row; ++p) b.page_table.push_back(p);
  b.validate();
  const auto inputs = capture_inputs(rows * T);
  std::vector<std::vector<float>> payload(pools_.size(), std::vector<float>(static_cast<std::size_t>(b.payload.elems(s_.cfg))));
  const auto ls = layers(nullptr, &payload);
  for (std::size_t l = 0; l < ls.size(); ++l) {
    std::vector<float> discarded(static_cast<std::size_t>(b.total_tokens) * s_.cfg.HV * s_.cfg.V);
    batch::verify_replay(b, ls[l], inputs[l], discarded);
  }
  batch::commit_replay(b, ls);
}

}  // namespace replayssm::ref
