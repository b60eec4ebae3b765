// Host side of the CUDA kernels: descriptor validation, device buffers, the validated device batch and the
// checked launchers. Compiled by the host compiler; the kernels live in the .cu files behind launch.hpp.
#include <cuda_runtime.h>

#include <climits>
#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "launch.hpp"
#include "replayssm/cuda/kernels.hpp"
#include "replayssm/error.hpp"

namespace replayssm::cuda {

using detail::DevCfg;
using detail::DevLayer;
using detail::DevRow;
using detail::LaunchArgs;
using detail::L2Mode;

static_assert(sizeof(DevRow) == sizeof(BatchRow) && offsetof(DevRow, slot) == offsetof(BatchRow, slot) &&
                  offsetof(DevRow, write_slot) == offsetof(BatchRow, write_slot) &&
                  offsetof(DevRow, T) == offsetof(BatchRow, T) &&
                  offsetof(DevRow, token_offset) == offsetof(BatchRow, token_offset) &&
                  offsetof(DevRow, accepted) == offsetof(BatchRow, accepted),
              "DevRow must mirror BatchRow");
static_assert(sizeof(DevLayer) == sizeof(LayerPointers) && offsetof(DevLayer, pool) == offsetof(LayerPointers, pool) &&
                  offsetof(DevLayer, payload) == offsetof(LayerPointers, payload) &&
                  offsetof(DevLayer, scratch) == offsetof(LayerPointers, scratch) &&
                  offsetof(DevLayer, A_log) == offsetof(LayerPointers, A_log) &&
                  offsetof(DevLayer, dt_bias) == offsetof(LayerPointers, dt_bias),
              "DevLayer must mirror LayerPointers");
static_assert(std::is_same_v<Stream, cudaStream_t>, "Stream must be cudaStream_t");

namespace {

void check(cudaError_t e, const char* call) {
  if (e != cudaSuccess) fail(std::string("cuda.") + call, cudaGetErrorName(e), ": ", cudaGetErrorString(e));
}
void check_launch(int rc, const char* kernel) {
  if (rc != 0) {
    const auto e = static_cast<cudaError_t>(rc);
    fail(std::string("cuda.launch.") + kernel, cudaGetErrorName(e), ": ", cudaGetErrorString(e));
  }
}

std::size_t state_size(const ModelConfig& cfg) { return cfg.state_dtype == DType::BF16 ? 2 : 4; }
std::size_t act_size(const ModelConfig& cfg) { return cfg.act_dtype == DType::BF16 ? 2 : 4; }

DevCfg dev_cfg(const ModelConfig& cfg, const PoolGeometry& pool) {
  const LaunchShape sh = launch_shape(cfg);
  DevCfg c{};
  c.H = cfg.H;
  c.HV = cfg.HV;
  c.K = cfg.K;
  c.V = cfg.V;
  c.G = cfg.G();
  c.aw = cfg.a_width();
  c.l2norm = cfg.l2norm == L2Norm::RsqrtMul ? L2Mode::RsqrtMul
             : cfg.l2norm == L2Norm::DivSqrt ? L2Mode::DivSqrt
                                              : L2Mode::None;
  c.l2_eps = cfg.l2_eps;
  c.q_scale = static_cast<float>(cfg.scale());
  c.round_beta_act = cfg.round_beta_to_act && cfg.act_dtype == DType::BF16;
  c.kda = cfg.op == Op::KDA;
  c.kda_lower_bound = cfg.kda_gate == KdaGate::LowerBoundSigmoid;
  c.lower_bound = cfg.lower_bound;
  c.act_bf16 = cfg.act_dtype == DType::BF16;
  c.state_bf16 = cfg.state_dtype == DType::BF16;
  c.layout_vk = cfg.layout == StateLayout::VK;
  c.slot_stride = pool.stride(cfg);
  c.LK = sh.lanes_per_row;
  c.warps = sh.warps;
  c.tiles = sh.tiles;
  return c;
}

void require_ptr(const void* p, const std::string& field) { require(p != nullptr, field, "is null"); }

void check_grid(long long blocks, const char* what) {
  require(blocks <= INT_MAX, what, "launch needs ", blocks, " blocks, more than ", INT_MAX);
}

}  // namespace

// -------------------------------------------------------------------------------------------------------
int device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no driver" state
    return 0;
  }
  return n;
}

std::string device_name() {
  if (device_count() == 0) return "";
  cudaDeviceProp p{};
  check(cudaGetDeviceProperties(&p, 0), "cudaGetDeviceProperties");
  return p.name;
}

void synchronize(Stream s) { check(cudaStreamSynchronize(s), "cudaStreamSynchronize"); }

void check_supported(const ModelConfig& cfg) {
  cfg.validate();
  require(cfg.K == 64 || cfg.K == 128 || cfg.K == 256, "cfg.K", "the CUDA kernels support K in {64, 128, 256}, got ",
          cfg.K);
  require(cfg.V >= 1 && cfg.V <= 1024, "cfg.V", "must be in [1, 1024], got ", cfg.V);
  require(cfg.act_dtype == DType::F32 || cfg.act_dtype == DType::BF16, "cfg.act_dtype", "must be F32 or BF16");
  require(cfg.state_dtype == DType::F32 || cfg.state_dtype == DType::BF16, "cfg.state_dtype", "must be F32 or BF16");
  require(cfg.l2norm == L2Norm::RsqrtMul || cfg.l2norm == L2Norm::DivSqrt || cfg.l2norm == L2Norm::None, "cfg.l2norm",
          "the CUDA kernels compute rsqrt_mul, div_sqrt or none, not ", to_string(cfg.l2norm));
}

LaunchShape launch_shape(const ModelConfig& cfg) {
  check_supported(cfg);
  LaunchShape s{};
  s.lanes_per_row = cfg.K / 16;
  s.rows_per_warp = detail::v_tile_rows(1, s.lanes_per_row);  // kNR rows per lane x 32 / LK
  const int need = (cfg.V + s.rows_per_warp - 1) / s.rows_per_warp;
  s.warps = need < detail::kMaxWarps ? need : detail::kMaxWarps;
  const int tile_rows = detail::v_tile_rows(s.warps, s.lanes_per_row);
  s.tiles = (cfg.V + tile_rows - 1) / tile_rows;
  return s;
}

std::int64_t full_state_scratch_bytes(const ModelConfig& cfg, std::int32_t max_rows, std::int32_t max_T) {
  return static_cast<std::int64_t>(max_rows) * max_T * cfg.state_elems() * static_cast<std::int64_t>(state_size(cfg));
}

std::int64_t payload_bytes(const ModelConfig& cfg, const PayloadGeometry& g) {
  return g.elems(cfg) * static_cast<std::int64_t>(act_size(cfg));
}

// -------------------------------------------------------------------------------------------------------
DeviceBuffer::DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
  if (bytes) check(cudaMalloc(&ptr_, bytes), "cudaMalloc");
}
DeviceBuffer::~DeviceBuffer() {
  if (ptr_) (void)cudaFree(ptr_);
}
DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) (void)cudaFree(ptr_);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}
void DeviceBuffer::upload(const void* host, std::size_t bytes, std::size_t offset) {
  require(offset + bytes <= bytes_, "DeviceBuffer.upload", "writes ", offset + bytes, " bytes into ", bytes_);
  if (bytes) check(cudaMemcpy(static_cast<char*>(ptr_) + offset, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
}
void DeviceBuffer::download(void* host, std::size_t bytes, std::size_t offset) const {
  require(offset + bytes <= bytes_, "DeviceBuffer.download", "reads ", offset + bytes, " bytes from ", bytes_);
  if (bytes) check(cudaMemcpy(host, static_cast<const char*>(ptr_) + offset, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
}
void DeviceBuffer::fill_bytes(int value) {
  if (bytes_) check(cudaMemset(ptr_, value, bytes_), "cudaMemset");
}

void fill_random(void* dst, std::int64_t n, DType dtype, std::uint64_t seed, float scale, Stream s) {
  require(dtype == DType::F32 || dtype == DType::BF16, "dtype", "fill_random supports F32 and BF16");
  require(n == 0 || dst != nullptr, "dst", "is null");
  check_launch(detail::launch_fill_random(dst, n, dtype == DType::BF16, seed, scale, s), "fill_random");
}

void fma_chains(float* out, unsigned grid, int iters, Stream s) {
  require(out != nullptr, "out", "is null");
  require(grid >= 1, "grid", "must be >= 1");
  require(iters >= 1, "iters", "must be >= 1, got ", iters);
  check_launch(detail::launch_fma_chains(out, grid, iters, s), "fma_chains");
}

// -------------------------------------------------------------------------------------------------------
void validate_rows(const ModelConfig& cfg, const PoolGeometry& pool, std::int32_t max_T, std::int64_t total_tokens,
                   const std::vector<BatchRow>& rows, bool check_accepted) {
  check_supported(cfg);
  validate_batch(rows, pool, cfg, max_T, total_tokens, check_accepted);
  require(pool.stride(cfg) % 4 == 0, "pool.slot_stride", "must be a multiple of 4 elements (16-byte state chunks), got ",
          pool.stride(cfg));
}

void validate_layers(const std::vector<LayerPointers>& layers, const PoolGeometry& pool, LayerNeeds needs) {
  require(static_cast<std::int64_t>(layers.size()) == pool.num_layers, "layers", "has ", layers.size(),
          " entries, pool.num_layers is ", pool.num_layers);
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const std::string f = "layers[" + std::to_string(l) + "].";
    if (needs.pool) require_ptr(layers[l].pool, f + "pool");
    if (needs.payload) require_ptr(layers[l].payload, f + "payload");
    if (needs.scratch) require_ptr(layers[l].scratch, f + "scratch");
    if (needs.params) {
      require_ptr(layers[l].A_log, f + "A_log");
      require_ptr(layers[l].dt_bias, f + "dt_bias");
    }
  }
}

// -------------------------------------------------------------------------------------------------------
DeviceBatch::DeviceBatch(const ModelConfig& cfg, const PoolGeometry& pool, const PayloadGeometry& payload,
                         std::int32_t max_T, std::int32_t max_rows)
    : cfg_(cfg), pool_(pool), payload_(payload), max_T_(max_T), max_rows_(max_rows) {
  check_supported(cfg);
  require(max_T >= 1, "max_T", "must be >= 1, got ", max_T);
  require(max_rows >= 1, "max_rows", "must be >= 1, got ", max_rows);
  require(pool.num_layers >= 1, "pool.num_layers", "must be >= 1, got ", pool.num_layers);
  require(payload.page_tokens >= 1, "payload.page_tokens", "must be >= 1, got ", payload.page_tokens);
  require(payload.pages_per_row >= 1, "payload.pages_per_row", "must be >= 1, got ", payload.pages_per_row);
  d_rows_ = DeviceBuffer(sizeof(BatchRow) * static_cast<std::size_t>(max_rows));
  d_pages_ = DeviceBuffer(sizeof(std::int32_t) * static_cast<std::size_t>(max_rows) * payload.pages_per_row);
  d_write_pos_ = DeviceBuffer(sizeof(std::int32_t) * static_cast<std::size_t>(max_rows));
  d_layers_ = DeviceBuffer(sizeof(LayerPointers) * static_cast<std::size_t>(pool.num_layers));
}

DeviceBatch::~DeviceBatch() = default;

void DeviceBatch::set_rows(const std::vector<BatchRow>& rows, const std::vector<std::int32_t>& page_table,
                           std::int64_t total_tokens, Stream s) {
  require(static_cast<std::int64_t>(rows.size()) <= max_rows_, "rows", "has ", rows.size(), " rows, max_rows is ",
          max_rows_);
  validate_rows(cfg_, pool_, max_T_, total_tokens, rows, true);
  if (!page_table.empty()) {
    require(static_cast<std::int64_t>(payload_.pages_per_row) * payload_.page_tokens >= max_T_,
            "payload.pages_per_row", "pages_per_row * page_tokens = ",
            static_cast<std::int64_t>(payload_.pages_per_row) * payload_.page_tokens, " < max_T = ", max_T_);
    payload_.validate_page_table(page_table, static_cast<std::int32_t>(rows.size()));
  }
  rows_ = rows;
  pages_ = page_table;
  total_tokens_ = total_tokens;
  has_pages_ = !page_table.empty() || rows.empty();
  write_pos_.clear();
  if (!rows_.empty())
    check(cudaMemcpyAsync(d_rows_.get(), rows_.data(), rows_.size() * sizeof(BatchRow), cudaMemcpyHostToDevice, s),
          "cudaMemcpyAsync");
  if (!pages_.empty())
    check(cudaMemcpyAsync(d_pages_.get(), pages_.data(), pages_.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice,
                          s),
          "cudaMemcpyAsync");
}

void DeviceBatch::set_accepted(const std::vector<std::int32_t>& accepted, Stream s) {
  require(accepted.size() == rows_.size(), "accepted", "has ", accepted.size(), " entries, the batch has ",
          rows_.size(), " rows");
  for (std::size_t i = 0; i < accepted.size(); ++i)
    require(accepted[i] >= 0 && accepted[i] <= rows_[i].T, "accepted[" + std::to_string(i) + "]", "is ", accepted[i],
            ", outside [0, T=", rows_[i].T, "]");
  for (std::size_t i = 0; i < accepted.size(); ++i) rows_[i].accepted = accepted[i];
  if (!rows_.empty())
    check(cudaMemcpyAsync(d_rows_.get(), rows_.data(), rows_.size() * sizeof(BatchRow), cudaMemcpyHostToDevice, s),
          "cudaMemcpyAsync");
}

void DeviceBatch::set_decode_ring(const std::vector<std::int32_t>& write_pos, std::int32_t ring_len, Stream s) {
  require(ring_len >= 1, "ring_len", "must be >= 1, got ", ring_len);
  require(write_pos.size() == rows_.size(), "write_pos", "has ", write_pos.size(), " entries, the batch has ",
          rows_.size(), " rows");
  for (std::size_t i = 0; i < write_pos.size(); ++i)
    require(write_pos[i] >= 0 && write_pos[i] <= ring_len - 1, "write_pos[" + std::to_string(i) + "]", "is ",
            write_pos[i], ", outside [0, ring_len-1=", ring_len - 1, "]");
  write_pos_ = write_pos;
  ring_len_ = ring_len;
  if (!write_pos_.empty())
    check(cudaMemcpyAsync(d_write_pos_.get(), write_pos_.data(), write_pos_.size() * sizeof(std::int32_t),
                          cudaMemcpyHostToDevice, s),
          "cudaMemcpyAsync");
}

void DeviceBatch::set_layers(const std::vector<LayerPointers>& layers, Stream s) {
  validate_layers(layers, pool_, LayerNeeds{true, false, false, false});
  layers_ = layers;
  check(cudaMemcpyAsync(d_layers_.get(), layers_.data(), layers_.size() * sizeof(LayerPointers), cudaMemcpyHostToDevice,
                        s),
        "cudaMemcpyAsync");
}

std::string to_string(Schedule s) {
  switch (s) {
    case Schedule::Auto: return "auto";
    case Schedule::PerTile: return "per-tile";
    case Schedule::Persistent: return "persistent";
  }
  return "auto";
}

void DeviceBatch::set_schedule(Schedule sched) {
  require(!(sched == Schedule::Persistent && cfg_.layout != StateLayout::VK), "schedule",
          "the persistent schedule needs the [V,K] state layout");
  sched_ = sched;
}

bool DeviceBatch::persistent() const {
  return sched_ == Schedule::Persistent;  // Auto: per-tile (measured faster, docs/cuda.md)
}

// -------------------------------------------------------------------------------------------------------
namespace {

LaunchArgs base_args(const DeviceBatch& b) {
  LaunchArgs args;
  args.c = dev_cfg(b.cfg(), b.pool());
  args.rows = reinterpret_cast<const DevRow*>(b.d_rows());
  args.num_rows = static_cast<int>(b.rows().size());
  args.max_T = b.max_T();
  args.pages = b.d_page_table();
  args.page_tokens = b.payload().page_tokens;
  args.pages_per_row = b.payload().pages_per_row;
  args.row_width = PayloadGeometry::row_width(b.cfg());
  args.layers = reinterpret_cast<const DevLayer*>(b.d_layers());
  args.num_layers = b.pool().num_layers;
  args.persistent = b.persistent() ? 1 : 0;
  return args;
}

void layer_args(LaunchArgs& args, const LayerPointers& layer, const TokenInputs& in, void* o) {
  require_ptr(layer.pool, "layer.pool");
  require_ptr(layer.A_log, "layer.A_log");
  require_ptr(layer.dt_bias, "layer.dt_bias");
  require_ptr(in.q, "in.q");
  require_ptr(in.k, "in.k");
  require_ptr(in.v, "in.v");
  require_ptr(in.a, "in.a");
  require_ptr(in.b, "in.b");
  require_ptr(o, "o");
  args.q = in.q, args.k = in.k, args.v = in.v, args.a = in.a, args.b = in.b;
  args.A_log = layer.A_log;
  args.dt_bias = layer.dt_bias;
  args.pool = layer.pool;
  args.o = o;
}

void require_layers(const DeviceBatch& b, LayerNeeds needs) {
  require(!b.layers().empty(), "layers", "set_layers() was not called");
  validate_layers(b.layers(), b.pool(), needs);
}

}  // namespace

void verify_full_state(const DeviceBatch& b, const LayerPointers& layer, const TokenInputs& in, void* o, Stream s) {
  LaunchArgs args = base_args(b);
  layer_args(args, layer, in, o);
  require_ptr(layer.scratch, "layer.scratch");
  args.scratch = layer.scratch;
  check_grid(static_cast<long long>(args.num_rows) * args.c.HV * args.c.tiles, "rows");
  check_launch(detail::launch_verify(args, s), "verify_full_state");
}

void verify_replay(const DeviceBatch& b, const LayerPointers& layer, const TokenInputs& in, void* o, Stream s) {
  LaunchArgs args = base_args(b);
  layer_args(args, layer, in, o);
  require(b.has_pages(), "page_table", "verify_replay needs a page table (set_rows)");
  require_ptr(layer.payload, "layer.payload");
  args.payload = layer.payload;
  check_grid(static_cast<long long>(args.num_rows) * args.c.HV * args.c.tiles, "rows");
  check_launch(detail::launch_verify(args, s), "verify_replay");
}

void commit_copy(const DeviceBatch& b, Stream s) {
  require_layers(b, LayerNeeds{true, false, true, false});
  LaunchArgs args = base_args(b);
  check_grid(static_cast<long long>(args.num_layers) * args.num_rows * args.c.HV, "rows");
  check_launch(detail::launch_commit_copy(args, s), "commit_copy");
}

void commit_replay(const DeviceBatch& b, Stream s) {
  require_layers(b, LayerNeeds{true, true, false, true});
  require(b.has_pages(), "page_table", "commit_replay needs a page table (set_rows)");
  LaunchArgs args = base_args(b);
  check_grid(static_cast<long long>(args.num_layers) * args.num_rows * args.c.HV * args.c.tiles, "rows");
  check_launch(detail::launch_commit_replay(args, s), "commit_replay");
}

void validate_fused(const std::vector<BatchRow>& rows, const std::vector<BatchRow>& prev_rows) {
  require(rows.size() == prev_rows.size(), "prev.rows", "has ", prev_rows.size(), " rows, the batch has ",
          rows.size(), " (row r's pending commit is prev row r)");
  auto pending = [](const BatchRow& p) { return p.slot != kPadSlot && p.write_slot != kPadSlot && p.accepted > 0; };
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (!pending(prev_rows[i])) continue;
    require(rows[i].slot == prev_rows[i].write_slot, "rows[" + std::to_string(i) + "].slot", "is ", rows[i].slot,
            ", but the row's pending commit lands in slot ", prev_rows[i].write_slot,
            ": resolve it with commit_replay before the row leaves the batch");
  }
  // No other row reads a slot a pending commit writes in this launch: rows[i].slot is that slot and
  // validate_batch lets no two real rows share a slot; a pending commit's write slot is no other pending
  // row's checkpoint (the previous step's validate_batch).
}

void verify_fused(const DeviceBatch& b, const DeviceBatch& prev, const void* prev_payload, const LayerPointers& layer,
                  const TokenInputs& in, void* o, Stream s) {
  const ModelConfig &c = b.cfg(), &pc = prev.cfg();
  require(pc.op == c.op && pc.H == c.H && pc.HV == c.HV && pc.K == c.K && pc.V == c.V &&
              pc.state_dtype == c.state_dtype && pc.act_dtype == c.act_dtype && pc.layout == c.layout,
          "prev.cfg", "the previous step's batch is of another model configuration");
  require(prev.pool().num_slots == b.pool().num_slots && prev.pool().stride(pc) == b.pool().stride(c) &&
              prev.pool().num_layers == b.pool().num_layers,
          "prev.pool", "the previous step's batch has another pool geometry");
  require(prev.payload().page_tokens == b.payload().page_tokens &&
              prev.payload().pages_per_row == b.payload().pages_per_row &&
              prev.payload().num_pages == b.payload().num_pages,
          "prev.payload", "the previous step's batch has another payload geometry");
  require(prev.has_pages(), "prev.page_table", "the previous step's batch has no page table");
  require(b.has_pages(), "page_table", "verify_fused needs a page table (set_rows)");
  validate_fused(b.rows(), prev.rows());
  LaunchArgs args = base_args(b);
  layer_args(args, layer, in, o);
  require_ptr(layer.payload, "layer.payload");
  require_ptr(prev_payload, "prev_payload");
  require(prev_payload != layer.payload, "prev_payload",
          "is layer.payload: this step's capture would overwrite the records the commit replays (use the other "
          "buffer of the pair)");
  args.payload = layer.payload;
  args.prev_rows = reinterpret_cast<const DevRow*>(prev.d_rows());
  args.prev_pages = prev.d_page_table();
  args.prev_payload = prev_payload;
  args.max_T = prev.max_T() + b.max_T();  // stage capacity: the previous records, then the window
  check_grid(static_cast<long long>(args.num_rows) * args.c.HV * args.c.tiles, "rows");
  check_launch(detail::launch_verify_fused(args, s), "verify_fused");
}

void ring_decode(const DeviceBatch& b, const LayerPointers& layer, const DecodeRingRecords& ring,
                 const TokenInputs& in, void* o, Stream s) {
  require(b.decode_ring_len() >= 1 && b.write_pos().size() == b.rows().size(), "write_pos",
          "set_decode_ring() was not called after set_rows()");
  for (std::size_t i = 0; i < b.rows().size(); ++i)
    require(b.rows()[i].slot == kPadSlot || b.rows()[i].T == 1, "rows[" + std::to_string(i) + "].T",
            "ring decode takes one token per row, got ", b.rows()[i].T);
  LaunchArgs args = base_args(b);
  layer_args(args, layer, in, o);
  require_ptr(ring.u, "ring.u");
  require_ptr(ring.k, "ring.k");
  require_ptr(ring.g, "ring.g");
  args.ring_u = ring.u;
  args.ring_k = ring.k;
  args.ring_g = ring.g;
  args.write_pos = b.d_write_pos();
  args.ring_len = b.decode_ring_len();
  check_grid(static_cast<long long>(args.num_rows) * args.c.HV * args.c.tiles, "rows");
  check_launch(detail::launch_ring_decode(args, s), "ring_decode");
}

}  // namespace replayssm::cuda
