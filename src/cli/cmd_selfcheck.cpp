// `rlparity selfcheck`: hand-worked values through the shared numerics, so a user can see on their
// own machine that the build computes what the engines compute.
#include <fmt/core.h>

#include <cmath>

#include "cli/commands.hpp"
#include "rlparity/numerics/formats.hpp"

namespace rlp::cli {
namespace {

struct Case {
  const char* what;
  double got;
  double want;
};

int run_selfcheck() {
  using namespace rlp::num;
  const Case cases[] = {
      {"bf16(1 + 2^-8) ties to even -> 1", round_bf16(1.0f + 0x1p-8f), 1.0},
      {"bf16(1 + 3*2^-8) ties to even -> 1 + 2^-6", round_bf16(1.0f + 3 * 0x1p-8f), 1.0 + 0x1p-6},
      {"e4m3 satfinite(500) -> 448", round_e4m3_sat(500.0f), 448.0},
      {"e4m3(464) ties to even -> 448",
       fp8_to_float(float_to_fp8(464.0f, Fp8Kind::e4m3, Saturation::none), Fp8Kind::e4m3), 448.0},
      {"e4m3 smallest subnormal 2^-9", fp8_to_float(0x01, Fp8Kind::e4m3), 0x1p-9},
      {"e5m2 max 57344", fp8_to_float(0x7B, Fp8Kind::e5m2), 57344.0},
      {"fp16(65520) overflows -> inf", round_fp16(65520.0f), INFINITY},
      {"ue8m0 up(448/3) -> 256",
       ue8m0_to_float(float_to_ue8m0(448.0f / 3.0f, Pow2Rounding::up, Saturation::satfinite)), 256.0},
  };
  int failed = 0;
  for (const auto& c : cases) {
    const bool ok = c.got == c.want;
    failed += ok ? 0 : 1;
    fmt::print("{:4}  {:<48} got {:g}\n", ok ? "ok" : "FAIL", c.what, c.got);
  }
  fmt::print("{} passed, {} failed\n", std::size(cases) - static_cast<size_t>(failed), failed);
  return failed == 0 ? kExitOk : kExitError;
}

}  // namespace

void setup_selfcheck(CLI::App& app, CommandRegistry& registry) {
  auto* sub = app.add_subcommand("selfcheck", "Check the numerics of this build against hand-worked values");
  registry.add(sub, run_selfcheck);
}

}  // namespace rlp::cli
