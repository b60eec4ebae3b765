#include "replayssm/recurrence/batch.hpp"

#include <algorithm>
#include <string>

#include "replayssm/error.hpp"

namespace replayssm::ref::batch {

namespace {

std::int64_t out_elems_per_token(const ModelConfig& cfg) { return static_cast<std::int64_t>(cfg.HV) * cfg.V; }

void check_size(const std::vector<float>* x, std::int64_t need, const std::string& field) {
  require(x != nullptr, field, "is null");
  require(static_cast<std::int64_t>(x->size()) >= need, field, "has ", x->size(), " values, needs at least ", need);
}

void check_common(const Batch& b, const Layer& layer, const SequenceInputs& tokens, const std::vector<float>& o) {
  require(layer.params != nullptr, "layer.params", "is null");
  check_size(layer.pool, static_cast<std::int64_t>(b.pool.num_slots) * b.pool.stride(b.cfg), "layer.pool");
  require(tokens.T == b.total_tokens, "tokens.T", "is ", tokens.T, ", the batch has total_tokens = ", b.total_tokens);
  require(static_cast<std::int64_t>(o.size()) == b.total_tokens * out_elems_per_token(b.cfg), "o", "has ", o.size(),
          " values, expected total_tokens * HV * V = ", b.total_tokens * out_elems_per_token(b.cfg));
}

// A slot's state in the pool, bounds checked here too (validate() checks every descriptor first; this keeps a
// slip past it a named error, never an access outside the pool).
void check_slot(const Batch& b, const std::vector<float>& pool, std::int32_t slot, std::size_t n, const char* what) {
  const std::int64_t stride = b.pool.stride(b.cfg);
  require(slot >= 0 && slot < b.pool.num_slots && static_cast<std::int64_t>(slot) * stride + static_cast<std::int64_t>(n) <=
                                                       static_cast<std::int64_t>(pool.size()),
          what, "slot ", slot, " is outside [0, num_slots = ", b.pool.num_slots, ") or its pool of ", pool.size(),
          " values");
}
std::vector<float> get_slot(const Batch& b, const std::vector<float>& pool, std::int32_t slot) {
  check_slot(b, pool, slot, static_cast<std::size_t>(b.cfg.state_elems()), "slot");
  const auto at = pool.begin() + static_cast<std::ptrdiff_t>(slot * b.pool.stride(b.cfg));
  return std::vector<float>(at, at + static_cast<std::ptrdiff_t>(b.cfg.state_elems()));
}
void put_slot(const Batch& b, std::vector<float>& pool, std::int32_t slot, const std::vector<float>& S) {
  check_slot(b, pool, slot, S.size(), "write_slot");
  std::copy(S.begin(), S.end(), pool.begin() + static_cast<std::ptrdiff_t>(slot * b.pool.stride(b.cfg)));
}

void write_window(const Batch& b, std::vector<float>& o, const BatchRow& r, const std::vector<float>& values) {
  std::copy(values.begin(), values.end(),
            o.begin() + static_cast<std::ptrdiff_t>(r.token_offset * out_elems_per_token(b.cfg)));
}
// A PAD row reads nothing, writes nothing, and its window's outputs are zero.
void zero_window(const Batch& b, std::vector<float>& o, const BatchRow& r) {
  const auto n = static_cast<std::size_t>(r.T) * static_cast<std::size_t>(out_elems_per_token(b.cfg));
  write_window(b, o, r, std::vector<float>(n, 0.0f));
}

bool commits(const BatchRow& r) { return r.slot != kPadSlot && r.write_slot != kPadSlot && r.accepted > 0; }

}  // namespace

void Batch::validate() const {
  validate_batch(rows, pool, cfg, max_T, total_tokens, true);
  if (page_table.empty()) return;
  require(static_cast<std::int64_t>(payload.pages_per_row) * payload.page_tokens >= max_T, "payload.pages_per_row",
          "pages_per_row * page_tokens = ", static_cast<std::int64_t>(payload.pages_per_row) * payload.page_tokens,
          " < max_T = ", max_T);
  payload.validate_page_table(page_table, static_cast<std::int32_t>(rows.size()));
}

namespace {
// One real row's verify: outputs and the state after every window token, stored as `store` says.
FullStateVerify verify_row(const Batch& b, const Layer& layer, const SequenceInputs& in, const BatchRow& r,
                           Store store) {
  const auto S0 = get_slot(b, *layer.pool, r.slot);
  if (store == Store::Rounded) return full_state_verify(b.cfg, *layer.params, in, S0, StateRounding::AtCommit);
  FullStateVerify v;
  std::vector<float> S = S0;
  run_recurrent<float>(b.cfg, *layer.params, in, S, v.o, &v.states);
  return v;
}
}  // namespace

void verify_full_state(const Batch& b, const Layer& layer, const SequenceInputs& tokens, std::vector<float>& o,
                       Store store) {
  check_common(b, layer, tokens, o);
  const std::int64_t E = b.cfg.state_elems();
  check_size(layer.scratch, static_cast<std::int64_t>(b.rows.size()) * b.max_T * E, "layer.scratch");
  for (std::size_t i = 0; i < b.rows.size(); ++i) {
    const BatchRow& r = b.rows[i];
    if (r.slot == kPadSlot) {
      zero_window(b, o, r);
      continue;
    }
    const auto v = verify_row(b, layer, tokens.slice(b.cfg, r.token_offset, r.T), r, store);
    write_window(b, o, r, v.o);
    for (int t = 0; t < r.T; ++t)
      std::copy(v.states[static_cast<std::size_t>(t)].begin(), v.states[static_cast<std::size_t>(t)].end(),
                layer.scratch->begin() + static_cast<std::ptrdiff_t>((static_cast<std::int64_t>(i) * b.max_T + t) * E));
  }
}

void commit_copy(const Batch& b, const std::vector<Layer>& layers) {
  require(static_cast<std::int32_t>(layers.size()) == b.pool.num_layers, "layers", "has ", layers.size(),
          " entries, pool.num_layers is ", b.pool.num_layers);
  const std::int64_t E = b.cfg.state_elems();
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const std::string f = "layers[" + std::to_string(l) + "].";
    check_size(layers[l].pool, static_cast<std::int64_t>(b.pool.num_slots) * b.pool.stride(b.cfg), f + "pool");
    check_size(layers[l].scratch, static_cast<std::int64_t>(b.rows.size()) * b.max_T * E, f + "scratch");
    for (std::size_t i = 0; i < b.rows.size(); ++i) {
      const BatchRow& r = b.rows[i];
      if (!commits(r)) continue;
      const auto src = layers[l].scratch->begin() +
                       static_cast<std::ptrdiff_t>((static_cast<std::int64_t>(i) * b.max_T + r.accepted - 1) * E);
      std::copy(src, src + static_cast<std::ptrdiff_t>(E),
                layers[l].pool->begin() + static_cast<std::ptrdiff_t>(r.write_slot * b.pool.stride(b.cfg)));
    }
  }
}

namespace {

void capture(const Batch& b, std::vector<float>& payload, std::size_t row, const SequenceInputs& in) {
  const auto& cfg = b.cfg;
  const PayloadRowLayout lay = PayloadGeometry::row_layout(cfg);
  const std::int64_t nk = lay.v - lay.k, nv = lay.a - lay.v, na = lay.b - lay.a, nb = lay.width - lay.b;
  for (int t = 0; t < in.T; ++t) {
    const auto dst = payload.begin() +
                     static_cast<std::ptrdiff_t>(b.payload.physical_row(b.page_table, static_cast<std::int32_t>(row), t) *
                                                 lay.width);
    std::copy_n(in.k.begin() + t * nk, nk, dst + lay.k);
    std::copy_n(in.v.begin() + t * nv, nv, dst + lay.v);
    std::copy_n(in.a.begin() + t * na, na, dst + lay.a);
    std::copy_n(in.b.begin() + t * nb, nb, dst + lay.b);
  }
}

RawPayload read_payload(const Batch& b, const std::vector<float>& payload, std::size_t row, int T) {
  const PayloadRowLayout lay = PayloadGeometry::row_layout(b.cfg);
  RawPayload pl;
  pl.T = T;
  for (int t = 0; t < T; ++t) {
    const auto src = payload.begin() +
                     static_cast<std::ptrdiff_t>(b.payload.physical_row(b.page_table, static_cast<std::int32_t>(row), t) *
                                                 lay.width);
    pl.k.insert(pl.k.end(), src + lay.k, src + lay.v);
    pl.v.insert(pl.v.end(), src + lay.v, src + lay.a);
    pl.a.insert(pl.a.end(), src + lay.a, src + lay.b);
    pl.b.insert(pl.b.end(), src + lay.b, src + lay.width);
  }
  return pl;
}

void check_pages(const Batch& b) {
  require(static_cast<std::int64_t>(b.page_table.size()) ==
              static_cast<std::int64_t>(b.rows.size()) * b.payload.pages_per_row,
          "page_table", "has ", b.page_table.size(), " entries, expected rows * pages_per_row = ",
          static_cast<std::int64_t>(b.rows.size()) * b.payload.pages_per_row);
}

}  // namespace

void verify_replay(const Batch& b, const Layer& layer, const SequenceInputs& tokens, std::vector<float>& o,
                   Store store, const TokenHook* hook) {
  check_common(b, layer, tokens, o);
  check_pages(b);
  check_size(layer.payload, b.payload.elems(b.cfg), "layer.payload");
  for (std::size_t i = 0; i < b.rows.size(); ++i) {
    const BatchRow& r = b.rows[i];
    if (r.slot == kPadSlot) {
      zero_window(b, o, r);
      continue;
    }
    const auto in = tokens.slice(b.cfg, r.token_offset, r.T);
    if (store == Store::Rounded) {
      write_window(b, o, r, replay_verify(b.cfg, *layer.params, in, get_slot(b, *layer.pool, r.slot), hook).o);
    } else {
      write_window(b, o, r, verify_row(b, layer, in, r, store).o);
    }
    capture(b, *layer.payload, i, in);
  }
}

void commit_replay(const Batch& b, const std::vector<Layer>& layers, const TokenHook* hook) {
  require(static_cast<std::int32_t>(layers.size()) == b.pool.num_layers, "layers", "has ", layers.size(),
          " entries, pool.num_layers is ", b.pool.num_layers);
  check_pages(b);
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const std::string f = "layers[" + std::to_string(l) + "].";
    require(layers[l].params != nullptr, f + "params", "is null");
    check_size(layers[l].pool, static_cast<std::int64_t>(b.pool.num_slots) * b.pool.stride(b.cfg), f + "pool");
    check_size(layers[l].payload, b.payload.elems(b.cfg), f + "payload");
    for (std::size_t i = 0; i < b.rows.size(); ++i) {
      const BatchRow& r = b.rows[i];
      if (!commits(r)) continue;
      const RawPayload pl = read_payload(b, *layers[l].payload, i, r.T);
      put_slot(b, *layers[l].pool, r.write_slot,
               replay_commit(b.cfg, *layers[l].params, pl, get_slot(b, *layers[l].pool, r.slot), r.accepted, hook));
    }
  }
}

// --- decode ring -----------------------------------------------------------------------------------------
DecodeRingRecords DecodeRingRecords::zeros(const ModelConfig& cfg, std::int32_t num_slots, std::int32_t ring_len) {
  require(num_slots >= 1, "num_slots", "must be >= 1, got ", num_slots);
  require(ring_len >= 1, "ring_len", "must be >= 1, got ", ring_len);
  DecodeRingRecords r;
  r.num_slots = num_slots;
  r.ring_len = ring_len;
  const auto n = static_cast<std::size_t>(num_slots) * static_cast<std::size_t>(ring_len);
  r.u.assign(n * static_cast<std::size_t>(cfg.HV) * cfg.V, 0.0f);
  r.k.assign(n * static_cast<std::size_t>(cfg.H) * cfg.K, 0.0f);
  r.g.assign(n * static_cast<std::size_t>(cfg.HV) * cfg.a_width(), 0.0f);
  return r;
}

Record DecodeRingRecords::get(const ModelConfig& cfg, std::int32_t slot, std::int32_t j) const {
  Record rec;
  const int aw = cfg.a_width();
  for (int hv = 0; hv < cfg.HV; ++hv) {
    const std::size_t at = (static_cast<std::size_t>(slot) * cfg.HV + hv) * ring_len + j;
    rec.u.insert(rec.u.end(), u.begin() + static_cast<std::ptrdiff_t>(at * cfg.V),
                 u.begin() + static_cast<std::ptrdiff_t>((at + 1) * cfg.V));
    rec.g.insert(rec.g.end(), g.begin() + static_cast<std::ptrdiff_t>(at * aw),
                 g.begin() + static_cast<std::ptrdiff_t>((at + 1) * aw));
  }
  for (int h = 0; h < cfg.H; ++h) {
    const std::size_t at = (static_cast<std::size_t>(slot) * cfg.H + h) * ring_len + j;
    rec.k.insert(rec.k.end(), k.begin() + static_cast<std::ptrdiff_t>(at * cfg.K),
                 k.begin() + static_cast<std::ptrdiff_t>((at + 1) * cfg.K));
  }
  return rec;
}

void DecodeRingRecords::put(const ModelConfig& cfg, std::int32_t slot, std::int32_t j, const Record& rec) {
  const int aw = cfg.a_width();
  for (int hv = 0; hv < cfg.HV; ++hv) {
    const std::size_t at = (static_cast<std::size_t>(slot) * cfg.HV + hv) * ring_len + j;
    std::copy_n(rec.u.begin() + static_cast<std::ptrdiff_t>(hv) * cfg.V, cfg.V,
                u.begin() + static_cast<std::ptrdiff_t>(at * cfg.V));
    std::copy_n(rec.g.begin() + static_cast<std::ptrdiff_t>(hv) * aw, aw, g.begin() + static_cast<std::ptrdiff_t>(at * aw));
  }
  for (int h = 0; h < cfg.H; ++h) {
    const std::size_t at = (static_cast<std::size_t>(slot) * cfg.H + h) * ring_len + j;
    std::copy_n(rec.k.begin() + static_cast<std::ptrdiff_t>(h) * cfg.K, cfg.K,
                k.begin() + static_cast<std::ptrdiff_t>(at * cfg.K));
  }
}

void ring_decode(const Batch& b, const Layer& layer, const std::vector<std::int32_t>& write_pos,
                 DecodeRingRecords& records, const SequenceInputs& tokens, std::vector<float>& o) {
  check_common(b, layer, tokens, o);
  const auto& cfg = b.cfg;
  const std::int32_t L = records.ring_len;
  require(write_pos.size() == b.rows.size(), "write_pos", "has ", write_pos.size(), " entries, the batch has ",
          b.rows.size(), " rows");
  require(records.num_slots == b.pool.num_slots, "records.num_slots", "is ", records.num_slots,
          ", the pool has ", b.pool.num_slots, " slots");
  for (std::size_t i = 0; i < b.rows.size(); ++i) {
    const BatchRow& r = b.rows[i];
    if (r.slot == kPadSlot) {
      zero_window(b, o, r);
      continue;
    }
    const std::string f = std::to_string(i);
    require(r.T == 1, "rows[" + f + "].T", "ring decode takes one token per row, got ", r.T);
    const std::int32_t m = write_pos[i];
    require(m >= 0 && m <= L - 1, "write_pos[" + f + "]", "is ", m, ", outside [0, ring_len-1=", L - 1, "]");
    std::vector<Record> live;
    for (std::int32_t j = 0; j < m; ++j) live.push_back(records.get(cfg, r.slot, j));
    std::vector<const Record*> ptrs;
    for (const auto& rec : live) ptrs.push_back(&rec);
    std::vector<float> S = reconstruct(cfg, get_slot(b, *layer.pool, r.slot), ptrs, Reconstruction::SuffixSum);
    Record rec;
    std::vector<float> out = ring_token(cfg, *layer.params, tokens, r.token_offset, S, rec, Reconstruction::SuffixSum);
    round_to_act_dtype(cfg, out);
    write_window(b, o, r, out);
    if (m == L - 1) {  // flush: the state replaces the checkpoint in place; nothing is appended
      round_to_state_dtype(cfg, S);
      put_slot(b, *layer.pool, r.slot, S);
    } else {
      round_record(rec, cfg.act_dtype);
      records.put(cfg, r.slot, m, rec);
    }
  }
}

}  // namespace replayssm::ref::batch
