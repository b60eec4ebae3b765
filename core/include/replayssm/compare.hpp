// replayssm/compare.hpp — the one comparison helper of the project.
//
// A Tolerance says *how* two tensors must agree:
//   exact      — bit-for-bit on the values (+0 vs -0 fails, a NaN matches only the same NaN bit
//                pattern): an exact claim is a claim of identical computation;
//   allclose   — every element: |got - ref| <= atol + rtol * |ref|; a non-finite value is close only to
//                the identical bit pattern, or NaN to NaN (a NaN where ref is finite always fails);
//   rel_rms    — RMS(got - ref) / RMS(ref) <= ratio, AND every element finite where ref is finite;
//   budget     — both of a statistical and a worst-case bound: RMS(got - ref) <= ratio * max(1, RMS(ref)) AND
//                every element |got - ref| <= atol (the precision tiers' form, tier.hpp).
// A tolerance may carry a term scale per element (Tolerance::scale, the magnitude of the terms that produce the
// element: tier.hpp, docs/numerics.md "Term scales"): allclose and budget bounds are then relative to it —
// element i within atol * scale[i] + rtol * |ref[i]|, and a budget's RMS within ratio * RMS(scale) — with no
// floor of 1, so a small tensor is judged at its own size. A zero scale (the element's terms are all zero, its
// exact value 0) leaves a bound of the smallest normal binary32 number, 2^-126, so a flushed subnormal passes.
// Every report names the worst element (flat index, ref, got), so a failure is never "most elements close".
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace replayssm {

struct Tolerance {
  enum class Kind { Exact, AllClose, RelRms, Budget };
  Kind kind = Kind::Exact;
  double atol = 0.0;
  double rtol = 0.0;
  double ratio = 0.0;
  std::shared_ptr<const std::vector<double>> scale;  // per-element term scale; null: atol is absolute

  // The same tolerance with atol relative to a per-element term scale (its length must be the compared size).
  Tolerance scaled(std::vector<double> term_scale) const;

  static Tolerance exact() { return {}; }
  static Tolerance allclose(double atol, double rtol) { return {Kind::AllClose, atol, rtol, 0.0, nullptr}; }
  static Tolerance rel_rms(double ratio) { return {Kind::RelRms, 0.0, 0.0, ratio, nullptr}; }
  static Tolerance budget(double ratio, double atol) { return {Kind::Budget, atol, 0.0, ratio, nullptr}; }

  // "exact", "allclose(atol=1e-05,rtol=1e-05)", "rel_rms(0.002)", "budget(rel_rms=0.005,atol=0.02)", with
  // " per term scale" appended when scaled; parse() accepts the unscaled spellings and throws Error(field) on
  // anything else.
  std::string str() const;
  static Tolerance parse(const std::string& text, const std::string& field = "tolerance");
};

struct CompareReport {
  bool ok = true;
  std::size_t count = 0;
  std::size_t mismatches = 0;   // elements outside the elementwise bound (exact/allclose) or non-finite
  std::size_t worst_index = 0;  // flat row-major index of the worst element
  double worst_ref = 0.0, worst_got = 0.0;
  double max_abs = 0.0;         // max |got - ref|
  double worst_excess = 0.0;    // max |got-ref| / (atol + rtol|ref|) for allclose and budget; 0 for others
  double rel_rms = 0.0;         // RMS(got-ref)/RMS(ref) (0 when both are zero)
  std::string message;          // one line: verdict, worst element, metrics

  std::string str() const { return message; }
};

// Compares got against ref (same length; a length mismatch is a failed report, not an exception).
CompareReport compare(const std::vector<double>& ref, const std::vector<double>& got, const Tolerance& tol);
CompareReport compare(const std::vector<float>& ref, const std::vector<float>& got, const Tolerance& tol);

// True when both vectors have identical bit patterns element by element.
bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace replayssm
