// Host-side checks of the CUDA entry points that need no GPU: descriptor validation names the offending
// field, the launch decomposition is the documented one, and device detection never throws.
#include <gtest/gtest.h>

#include <string>

#include "replayssm/cuda/kernels.hpp"
#include "replayssm/error.hpp"
#include "replayssm/testing/field_of.hpp"

using namespace replayssm;
using replayssm::testing::field_of;

namespace {


ModelConfig cfg128() {
  ModelConfig c = preset("qwen3.5");
  c.H = 2;
  c.HV = 4;
  return c;
}

}  // namespace

TEST(CudaHost, DeviceCountNeverThrows) {
  const int n = cuda::device_count();
  EXPECT_GE(n, 0);
  if (n == 0) {
    EXPECT_EQ(cuda::device_name(), "");
  }
}

TEST(CudaHost, SupportedShapes) {
  ModelConfig c = cfg128();
  EXPECT_NO_THROW(cuda::check_supported(c));
  c.K = 32;
  EXPECT_EQ(field_of([&] { cuda::check_supported(c); }), "cfg.K");
  c.K = 256;
  c.V = 2048;
  EXPECT_EQ(field_of([&] { cuda::check_supported(c); }), "V");  // ModelConfig::validate names it first
}

TEST(CudaHost, LaunchShapeIsTheDocumentedDecomposition) {
  struct Want {
    int K, V, lanes, rows_per_warp, warps, tiles;
  };
  const Want want[] = {
      {128, 128, 8, 32, 4, 1},  // qwen3.5 / qwen3-next / kimi-linear: one CTA of 4 warps per head
      {64, 64, 4, 64, 1, 1},   {64, 128, 4, 64, 2, 1}, {64, 256, 4, 64, 4, 1},
      {128, 64, 8, 32, 2, 1},  {128, 256, 8, 32, 4, 2}, {256, 256, 16, 16, 4, 4},
      {256, 64, 16, 16, 4, 1}, {128, 100, 8, 32, 4, 1},
  };
  for (const auto& w : want) {
    ModelConfig c = cfg128();
    c.K = w.K;
    c.V = w.V;
    const auto s = cuda::launch_shape(c);
    EXPECT_EQ(s.lanes_per_row, w.lanes) << w.K << "x" << w.V;
    EXPECT_EQ(s.rows_per_warp, w.rows_per_warp) << w.K << "x" << w.V;
    EXPECT_EQ(s.warps, w.warps) << w.K << "x" << w.V;
    EXPECT_EQ(s.tiles, w.tiles) << w.K << "x" << w.V;
  }
}

TEST(CudaHost, ValidateRowsNamesTheField) {
  const ModelConfig c = cfg128();
  const PoolGeometry pool{2, 6, 0};
  auto v = [&](std::vector<BatchRow> rows, std::int64_t total = 16, PoolGeometry p = {2, 6, 0}) {
    return field_of([&] { cuda::validate_rows(c, p, 4, total, rows, true); });
  };
  EXPECT_EQ(v({{0, 0, 4, 0, 4}, {1, 3, 2, 4, 0}}), "<no error>");
  EXPECT_EQ(v({{0, 0, 4, 0, 5}}), "rows[0].accepted");
  EXPECT_EQ(v({{0, 0, 5, 0, 0}}), "rows[0].T");
  EXPECT_EQ(v({{6, 0, 1, 0, 0}}), "rows[0].slot");
  EXPECT_EQ(v({{0, 0, 2, 0, 0}, {0, 1, 2, 2, 0}}), "rows[1].slot");
  // A PAD window must be in range and may not overlap another window (its outputs are zero-filled).
  EXPECT_EQ(v({{0, 0, 2, 0, 0}, {kPadSlot, kPadSlot, 2, 1, 0}}), "rows[1].token_offset");
  EXPECT_EQ(v({{kPadSlot, kPadSlot, 2, 15, 0}}), "rows[0].token_offset");
  EXPECT_EQ(v({{kPadSlot, kPadSlot, 0, 99, 0}}), "<no error>");  // T = 0: no window
  // One all-layer commit reads and writes every row: a write slot may not be another row's read slot.
  EXPECT_EQ(v({{0, 1, 2, 0, 0}, {1, 2, 2, 2, 0}}), "rows[0].write_slot");
  EXPECT_EQ(v({{0, 0, 1, 0, 0}}, 16, PoolGeometry{2, 6, c.state_elems() + 2}), "pool.slot_stride");
  EXPECT_EQ(v({{0, 0, 1, 0, 0}}, 16, PoolGeometry{2, 6, 8}), "pool.slot_stride");
  (void)pool;
}

TEST(CudaHost, ValidateLayersNamesTheField) {
  const PoolGeometry pool{2, 4, 0};
  float dummy = 0;
  cuda::LayerPointers ok{&dummy, &dummy, &dummy, &dummy, &dummy};
  cuda::LayerPointers no_payload = ok;
  no_payload.payload = nullptr;
  const cuda::LayerNeeds all{true, true, true, true};
  EXPECT_EQ(field_of([&] { cuda::validate_layers({ok, ok}, pool, all); }), "<no error>");
  EXPECT_EQ(field_of([&] { cuda::validate_layers({ok}, pool, all); }), "layers");
  EXPECT_EQ(field_of([&] { cuda::validate_layers({ok, no_payload}, pool, all); }), "layers[1].payload");
  EXPECT_EQ(field_of([&] { cuda::validate_layers({ok, no_payload}, pool, cuda::LayerNeeds{}); }), "<no error>");
}

TEST(CudaHost, ScratchFormulas) {
  ModelConfig c = preset("qwen3.5");  // fp32 state, bf16 activations, K = V = 128, HV = 32, H = 16
  EXPECT_EQ(cuda::full_state_scratch_bytes(c, 128, 4), 128LL * 4 * 32 * 128 * 128 * 4);
  const PayloadGeometry g{4, 128, 1};
  // Row: k [16*128] + v [32*128] + a [32] + b [32] = 6208 elements of 2 bytes.
  EXPECT_EQ(cuda::payload_bytes(c, g), 128LL * 4 * 6208 * 2);
}

// The fused step's row rules (verify_fused, before anything is launched): row r's pending commit is prev row
// r and lands in row r's slot; rows without a pending commit (n = 0, PAD, write_slot PAD) are free.
TEST(CudaHost, ValidateFusedNamesTheField) {
  const std::vector<BatchRow> prev{{0, 2, 4, 0, 2}, {1, 1, 3, 4, 0}, {3, kPadSlot, 2, 7, 2}, {kPadSlot, 5, 2, 9, 2}};
  EXPECT_EQ(field_of([&] { cuda::validate_fused({{2, 2, 4, 0, 0}, {4, 4, 1, 4, 0}, {3, 3, 1, 5, 0}, {5, 5, 1, 6, 0}}, prev); }),
            "<no error>");
  EXPECT_EQ(field_of([&] { cuda::validate_fused({{2, 2, 4, 0, 0}}, prev); }), "prev.rows");
  EXPECT_EQ(field_of([&] { cuda::validate_fused({{0, 0, 4, 0, 0}, {1, 1, 1, 4, 0}, {3, 3, 1, 5, 0}, {5, 5, 1, 6, 0}}, prev); }),
            "rows[0].slot");  // reads the checkpoint its own pending commit replaces
  EXPECT_EQ(field_of([&] { cuda::validate_fused({{kPadSlot, kPadSlot, 4, 0, 0}, {1, 1, 1, 4, 0}, {3, 3, 1, 5, 0},
                                                  {5, 5, 1, 6, 0}}, prev); }),
            "rows[0].slot");  // left the batch with its commit pending: resolve it first
}

// The benchmark helpers refuse bad arguments before any launch (so this runs without a GPU).
TEST(CudaHost, BenchHelpersNameTheField) {
  float dummy = 0.f;
  EXPECT_EQ(field_of([&] { cuda::fma_chains(nullptr, 1, 1); }), "out");
  EXPECT_EQ(field_of([&] { cuda::fma_chains(&dummy, 0, 1); }), "grid");
  EXPECT_EQ(field_of([&] { cuda::fma_chains(&dummy, 1, 0); }), "iters");
  EXPECT_EQ(field_of([&] { cuda::fill_random(nullptr, 4, DType::F32, 1, 1.f); }), "dst");
  EXPECT_EQ(field_of([&] { cuda::fill_random(&dummy, 1, DType::F16, 1, 1.f); }), "dtype");
}
