#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "replayssm/compare.hpp"
#include "replayssm/error.hpp"

using namespace replayssm;

TEST(Compare, ExactNamesWorstElement) {
  const std::vector<double> ref{1, 2, 3, 4};
  auto r = compare(ref, std::vector<double>{1, 2, 3.5, 4}, Tolerance::exact());
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.worst_index, 2u);
  EXPECT_EQ(r.mismatches, 1u);
  EXPECT_NE(r.message.find("worst@2"), std::string::npos) << r.message;
  EXPECT_TRUE(compare(ref, ref, Tolerance::exact()).ok);
  EXPECT_FALSE(compare(std::vector<double>{0.0}, std::vector<double>{-0.0}, Tolerance::exact()).ok);
}

TEST(Compare, AllCloseIsElementwiseNotMajority) {
  std::vector<double> ref(1000, 1.0), got(1000, 1.0);
  got[777] = 1.1;  // one bad element among 1000 must fail
  auto r = compare(ref, got, Tolerance::allclose(1e-5, 1e-5));
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.worst_index, 777u);
  got[777] = 1.0 + 1e-6;
  EXPECT_TRUE(compare(ref, got, Tolerance::allclose(1e-5, 1e-5)).ok);
}

TEST(Compare, NaNIsNeverClose) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(compare(std::vector<double>{1.0}, std::vector<double>{nan}, Tolerance::allclose(1, 1)).ok);
  EXPECT_FALSE(compare(std::vector<double>{1.0}, std::vector<double>{nan}, Tolerance::rel_rms(1)).ok);
  EXPECT_FALSE(compare(std::vector<double>{1.0, 2.0}, std::vector<double>{1.0}, Tolerance::rel_rms(1)).ok);
}

TEST(Compare, RelRms) {
  const std::vector<double> ref{3, 4};  // RMS numerator base: sqrt(25)
  const std::vector<double> got{3, 4.05};
  EXPECT_NEAR(compare(ref, got, Tolerance::rel_rms(0.02)).rel_rms, 0.01, 1e-12);
  EXPECT_TRUE(compare(ref, got, Tolerance::rel_rms(0.02)).ok);
  EXPECT_FALSE(compare(ref, got, Tolerance::rel_rms(0.005)).ok);
}

TEST(Compare, ToleranceParsesItsOwnSpelling) {
  for (const auto& t : {Tolerance::exact(), Tolerance::allclose(1e-5, 2e-3), Tolerance::rel_rms(0.002)}) {
    const Tolerance p = Tolerance::parse(t.str());
    EXPECT_EQ(p.kind, t.kind);
    EXPECT_DOUBLE_EQ(p.atol, t.atol);
    EXPECT_DOUBLE_EQ(p.rtol, t.rtol);
    EXPECT_DOUBLE_EQ(p.ratio, t.ratio);
  }
  EXPECT_THROW(Tolerance::parse("close-enough"), Error);
  EXPECT_THROW(Tolerance::parse("allclose(atol=1e-5e3,rtol=0)"), Error);
  EXPECT_EQ(Tolerance::parse(Tolerance::allclose(1.2345678901234e-5, 0.1).str()).atol, 1.2345678901234e-5);
}

// Found with the fixture harness (docs/fuzzing.md): std::regex recursed once per character and a tolerance of
// ~30 KB in a fixture's metadata overflowed the stack (SIGSEGV) instead of being refused.
TEST(Compare, LongToleranceTextIsRefusedNotACrash) {
  for (const std::size_t n : {30000u, 1000000u}) {
    EXPECT_THROW(Tolerance::parse("allclose(atol=" + std::string(n, '1') + ",rtol=0)"), Error);
    EXPECT_THROW(Tolerance::parse("rel_rms(" + std::string(n, '+') + ")"), Error);
    EXPECT_THROW(Tolerance::parse("budget(rel_rms=" + std::string(n, '.') + ",atol=1)"), Error);
  }
  EXPECT_EQ(Tolerance::parse("budget(rel_rms=0.25,atol=1e-3)").kind, Tolerance::Kind::Budget);
  EXPECT_DOUBLE_EQ(Tolerance::parse("budget(rel_rms=0.25,atol=1e-3)").atol, 1e-3);
  EXPECT_THROW(Tolerance::parse("allclose(atol=1,rtol=1))"), Error);
  EXPECT_THROW(Tolerance::parse("allclose(atol=1,rtol=1) "), Error);
  EXPECT_THROW(Tolerance::parse("allclose(atol=,rtol=1)"), Error);
  EXPECT_THROW(Tolerance::parse("allclose(atol=-1,rtol=1)"), Error);
}
