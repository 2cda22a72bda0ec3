// The float64 oracle against central finite differences of L = sum(dO . O), on small causal/GQA problems,
// plus its handling of rows with no visible key. Part of cpu_tests (ctest).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "gproj/oracle.h"
#include "gproj/synthetic.h"

namespace gproj {
namespace {

Tensor<double> random_tensor(std::initializer_list<int64_t> shape, uint64_t seed) {
  Tensor<double> t(shape);
  for (size_t i = 0; i < t.values.size(); ++i) t.values[i] = gaussian(seed, i);
  return t;
}

double loss(const Tensor<double>& q, const Tensor<double>& k, const Tensor<double>& v, const Tensor<double>& dout,
            bool causal, double scale) {
  const OracleForward f = oracle_forward(q.view(), k.view(), v.view(), causal, scale);
  double l = 0;
  for (size_t i = 0; i < f.o.values.size(); ++i) l += f.o.values[i] * dout.values[i];
  return l;
}

// Central differences with h = 1e-5 have truncation error O(h^2) ~ 1e-10 relative and cancellation
// error ~ 1e-16 / 1e-5 = 1e-11: a 1e-7 relative bound leaves room for both and still catches any real bug
// (a missing term of the gradient is O(1) relative).
void check_gradient(Tensor<double>& x, const Tensor<double>& grad, const std::function<double()>& f,
                    const char* name) {
  double diff2 = 0, ref2 = 0;
  for (size_t i = 0; i < x.values.size(); ++i) {
    const double keep = x.values[i], h = 1e-5;
    x.values[i] = keep + h;
    const double up = f();
    x.values[i] = keep - h;
    const double down = f();
    x.values[i] = keep;
    const double fd = (up - down) / (2 * h);
    diff2 += (fd - grad.values[i]) * (fd - grad.values[i]);
    ref2 += fd * fd;
  }
  const double rel = std::sqrt(diff2 / ref2);
  std::printf("  d%s: finite-difference rel err %.2e (||grad|| %.3e)\n", name, rel, std::sqrt(ref2));
  EXPECT_LT(rel, 1e-7) << name;
}

struct FdCase {
  int64_t Nq, Nk, H, Hkv, D;
  bool causal;
};

class OracleFd : public ::testing::TestWithParam<FdCase> {};

TEST_P(OracleFd, GradientsMatchFiniteDifferences) {
  const FdCase c = GetParam();
  Tensor<double> q = random_tensor({1, c.Nq, c.H, c.D}, 1), k = random_tensor({1, c.Nk, c.Hkv, c.D}, 2),
                 v = random_tensor({1, c.Nk, c.Hkv, c.D}, 3), dout = random_tensor({1, c.Nq, c.H, c.D}, 4);
  const double scale = 0.7;
  const OracleBackward g = oracle_backward(q.view(), k.view(), v.view(), dout.view(), c.causal, scale);
  auto f = [&] { return loss(q, k, v, dout, c.causal, scale); };
  check_gradient(q, g.dq, f, "q");
  check_gradient(k, g.dk, f, "k");
  check_gradient(v, g.dv, f, "v");
  // delta_i = sum_j P_ij dP_ij equals dO_i . O_i in exact arithmetic.
  const OracleForward fw = oracle_forward(q.view(), k.view(), v.view(), c.causal, scale);
  for (int64_t h = 0; h < c.H; ++h)
    for (int64_t i = 0; i < c.Nq; ++i) {
      double dot = 0;
      for (int64_t e = 0; e < c.D; ++e) dot += dout.at(0, i, h, e) * fw.o.at(0, i, h, e);
      EXPECT_NEAR(g.delta.at(0, h, i), dot, 1e-12 * (1 + std::fabs(dot)));
    }
}

INSTANTIATE_TEST_SUITE_P(Shapes, OracleFd,
                         ::testing::Values(FdCase{5, 7, 2, 1, 8, false}, FdCase{5, 7, 2, 1, 8, true},
                                           FdCase{6, 4, 2, 2, 8, true}, FdCase{1, 3, 1, 1, 8, false}));

TEST(Oracle, RowsWithoutVisibleKeysGiveZeroOutputAndGradients) {
  // Causal with Nq = 6 > Nk = 4: rows 0 and 1 see no key (bottom-right alignment: j <= i - 2).
  Tensor<double> q = random_tensor({1, 6, 1, 8}, 5), k = random_tensor({1, 4, 1, 8}, 6),
                 v = random_tensor({1, 4, 1, 8}, 7), dout = random_tensor({1, 6, 1, 8}, 8);
  const OracleForward f = oracle_forward(q.view(), k.view(), v.view(), true, 0.5);
  const OracleBackward g = oracle_backward(q.view(), k.view(), v.view(), dout.view(), true, 0.5);
  for (int64_t i = 0; i < 2; ++i) {
    EXPECT_TRUE(std::isinf(f.lse.at(0, 0, i)) && f.lse.at(0, 0, i) < 0);
    for (int64_t e = 0; e < 8; ++e) {
      EXPECT_EQ(f.o.at(0, i, 0, e), 0.0);
      EXPECT_EQ(g.dq.at(0, i, 0, e), 0.0);
    }
  }
  // Row 2 sees exactly key 0: its output is v_0.
  for (int64_t e = 0; e < 8; ++e) EXPECT_NEAR(f.o.at(0, 2, 0, e), v.at(0, 0, 0, e), 1e-15);
}

}  // namespace
}  // namespace gproj
