// The judge's NaN tripwire: a non-finite output is reported with the request's absolute token position, its
// slot and the command's index in the run (the coordinates a mid-decode NaN at a fixed position needs).
#include <gtest/gtest.h>

#include <limits>

#include "replayssm/lifecycle/judge.hpp"

using namespace replayssm;
using ref::Cmd;

namespace {
// The replay design, with one output element of the third step turned into NaN: row 0, window token 1.
class NanOnThirdStep : public ref::Target {
 public:
  NanOnThirdStep() : inner_(ref::make_target("replay")) {}
  std::string name() const override { return "nan_on_third_step"; }
  bool bit_exact() const override { return true; }
  void setup(const ref::EngineSetup& s) override {
    inner_->setup(s);
    hv_v_ = static_cast<std::size_t>(s.cfg.HV * s.cfg.V);
  }
  void allocate(std::int32_t slot) override { inner_->allocate(slot); }
  std::vector<std::vector<float>> step(const std::vector<ref::TargetRow>& rows,
                                       const std::vector<ref::SequenceInputs>& inputs) override {
    auto o = inner_->step(rows, inputs);
    if (++steps_ == 3) o[0][static_cast<std::size_t>(rows[0].row.token_offset + 1) * hv_v_ + 3] =
                           std::numeric_limits<float>::quiet_NaN();
    return o;
  }
  void commit(const std::vector<ref::TargetRow>& rows) override { inner_->commit(rows); }
  void copy_slot(std::int32_t a, std::int32_t b) override { inner_->copy_slot(a, b); }
  std::vector<float> committed_state(std::int32_t l, std::int32_t s) const override { return inner_->committed_state(l, s); }
  std::vector<float> pool(std::int32_t l) const override { return inner_->pool(l); }

 private:
  std::unique_ptr<ref::Target> inner_;
  std::size_t hv_v_ = 0;
  int steps_ = 0;
};
const bool registered =
    ref::register_target("nan_on_third_step", [](ref::Fault) { return std::make_unique<NanOnThirdStep>(); });

Cmd admit(std::int32_t slot, std::int32_t prompt) {
  Cmd c;
  c.kind = Cmd::Kind::Admit;
  c.slot = slot;
  c.prompt = prompt;
  c.seed = 5;
  return c;
}
Cmd step(std::int32_t T, std::int32_t n) {
  Cmd c;
  c.kind = Cmd::Kind::Step;
  c.rows.push_back(ref::RowSpec{0, T, n, 0, 9});
  return c;
}
}  // namespace

TEST(NanTripwire, ReportsPositionSlotAndCommand) {
  ASSERT_TRUE(registered);
  ref::Judge j(ref::make_setup(preset("tiny-gdn"), 3, 4, 4), "nan_on_third_step");
  // Prefill 5 tokens in 2 chunks (4 + 1) into slot 2, then verify T = 3: window token 1 is position 6.
  for (const Cmd& c : {admit(2, 5), step(4, 0), step(4, 0)}) ASSERT_EQ(j.apply(c), "") << c.str();
  const std::string why = j.apply(step(3, 2));
  EXPECT_NE(why.find("NaN tripwire: implementation output nan"), std::string::npos) << why;
  EXPECT_NE(why.find("request 0, slot 2, token position 6 (window token 1), command 3"), std::string::npos) << why;
  EXPECT_NE(why.find("(hv, v) = (0, 3)"), std::string::npos) << why;
}
