// bfloat16 and float16: conversions against PyTorch's (test/fixtures/half_fixtures.hpp, from
// test/fixtures/gen_half_fixtures.py), exact round trips of all 65,536 bit patterns, and the
// types in graphs: casts, elementwise ops computed in float32 and rounded once per op, layout
// ops, variables and checkpoints (BF16/F16 safetensors, checked by an independent reader).
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "fixtures/half_fixtures.hpp"
#include "typeflow/typeflow.hpp"

namespace ty = typeflow;
using i64 = std::int64_t;

TEST_CASE("float32 to bfloat16 and float16 round as PyTorch does (nearest, ties to even)") {
  std::size_t compared = 0;
  for (const auto& c : half_cases) {
    const float f = std::bit_cast<float>(c.f32);
    const ty::bfloat16 b(f);
    const ty::float16 h(f);
    INFO("float32 bits 0x" << std::hex << c.f32);
    if (std::isnan(f)) { // payloads may differ; a NaN of the same sign must come out
      CHECK(std::isnan(static_cast<float>(b)));
      CHECK(std::isnan(static_cast<float>(h)));
      CHECK(std::signbit(static_cast<float>(b)) == std::signbit(f));
      CHECK(std::signbit(static_cast<float>(h)) == std::signbit(f));
      continue;
    }
    CHECK(b.bits == c.bf16);
    CHECK(h.bits == c.f16);
    ++compared;
  }
  CHECK(compared > 4000);
}

TEST_CASE("every 16-bit pattern widens exactly and narrows back to itself") {
  for (std::uint32_t u = 0; u < 65536; ++u) {
    const auto bits = static_cast<std::uint16_t>(u);
    const float h = ty::float16::from_bits(bits), b = ty::bfloat16::from_bits(bits);
    if (!std::isnan(h))
      REQUIRE(ty::float16(h).bits == bits);
    if (!std::isnan(b))
      REQUIRE(ty::bfloat16(b).bits == bits);
  }
  // float16 by its definition: (-1)^s 2^(e-15) (1 + m/1024), subnormals m 2^-24
  CHECK(static_cast<float>(ty::float16::from_bits(0x0001)) == std::ldexp(1.0f, -24));
  CHECK(static_cast<float>(ty::float16::from_bits(0x03ff)) == std::ldexp(1023.0f, -24));
  CHECK(static_cast<float>(ty::float16::from_bits(0x7bff)) == 65504.0f);
  CHECK(static_cast<float>(ty::float16::from_bits(0xc000)) == -2.0f);
  CHECK(static_cast<float>(ty::bfloat16::from_bits(0x4049)) == 3.140625f);
  static_assert(ty::float16(1.0f).bits == 0x3c00 && ty::bfloat16(1.0f).bits == 0x3f80);
  // numeric_limits by the formats' definitions
  using LH = std::numeric_limits<ty::float16>;
  using LB = std::numeric_limits<ty::bfloat16>;
  CHECK(static_cast<float>(LH::max()) == 65504.0f);
  CHECK(static_cast<float>(LH::lowest()) == -65504.0f);
  CHECK(static_cast<float>(LH::min()) == std::ldexp(1.0f, -14));
  CHECK(static_cast<float>(LH::denorm_min()) == std::ldexp(1.0f, -24));
  CHECK(static_cast<float>(LH::epsilon()) == std::ldexp(1.0f, -10));
  CHECK(static_cast<float>(LB::epsilon()) == std::ldexp(1.0f, -7));
  CHECK(static_cast<float>(LB::min()) == std::numeric_limits<float>::min());
  CHECK(static_cast<float>(LB::max()) == std::ldexp(255.0f, 120));
  CHECK(std::isinf(static_cast<float>(LH::infinity())));
  CHECK(std::isnan(static_cast<float>(LB::quiet_NaN())));
  CHECK(std::isnan(static_cast<float>(LH::signaling_NaN())));
  CHECK((LH::digits == 11 && LB::digits == 8 && !LB::is_integer && LH::is_iec559));
  static_assert(ty::dtype_name<ty::bfloat16> == "bfloat16" &&
                ty::dtype_name<ty::float16> == "float16");
}

namespace {
template <class H>
void graph_ops() {
  static constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 4>>;
  static constexpr auto hx = ty::cast<H>(x);
  static constexpr auto y = ty::cast<float>(ty::relu(hx * hx + ty::constant<0.5>) -
                                            ty::transpose<1, 0>(ty::transpose<1, 0>(hx)));
  ty::session<> s;
  ty::tensor<float> xv({3, 4});
  for (i64 i = 0; i < xv.size(); ++i)
    xv[i] = static_cast<float>(std::sin(1.7 * static_cast<double>(i)) * 3.0);
  auto [hv, yv] = s.run(ty::fetch(hx, y), ty::feed(x, xv));
  for (i64 i = 0; i < xv.size(); ++i) {
    // each op rounds its float32 result to H once: x -> H, x*x -> H, + 0.5 -> H, relu, - -> H
    const float a = static_cast<float>(H(xv[i]));
    CHECK(hv[i].bits == H(xv[i]).bits);
    const float sq = static_cast<float>(H(a * a));
    const float sum = static_cast<float>(H(sq + 0.5f));
    const float r = sum < 0 ? 0.0f : sum;
    CHECK(yv[i] == static_cast<float>(H(r - a)));
  }
}
} // namespace

TEST_CASE("bfloat16 and float16 in graphs: casts, elementwise ops, layout") {
  graph_ops<ty::bfloat16>();
  graph_ops<ty::float16>();
}

TEST_CASE("bfloat16 and float16 variables: initialized, written, checkpointed as BF16/F16") {
  static constexpr auto wb = ty::variable<"wb", ty::bfloat16, ty::shape<2, 3>, ty::uniform<-1, 1>>;
  static constexpr auto wh = ty::variable<"wh", ty::float16, ty::shape<5>, ty::fill<0.1>>;
  const auto dir =
      std::filesystem::temp_directory_path() / ("typeflow_test_half_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto file = dir / "half.safetensors";
  ty::session<> a(ty::session_options{.seed = 3});
  a.initialize(wb, wh);
  const auto b0 = a.read(wb);
  for (i64 i = 0; i < b0.size(); ++i)
    CHECK(std::abs(static_cast<float>(b0[i])) <= 1.0f);
  CHECK(a.read(wh)[4].bits == ty::float16(0.1f).bits);
  ty::save_checkpoint(a, file);
  ty::session<> b(ty::session_options{.seed = 4});
  b.initialize(wb, wh);
  ty::tensor<ty::float16> other({5});
  b.write(wh, other);
  ty::restore_checkpoint(b, file);
  const auto b1 = b.read(wb);
  for (i64 i = 0; i < b1.size(); ++i)
    CHECK(b1[i].bits == b0[i].bits);
  CHECK(b.read(wh)[2].bits == ty::float16(0.1f).bits);
#if defined(TYPEFLOW_SOURCE_DIR)
  // the safetensors header names BF16 and F16, as an independent reader sees it
  const std::string cmd = "python3 " + std::string(TYPEFLOW_SOURCE_DIR) +
                          "/test/fixtures/check_safetensors.py " + file.string() + " > " +
                          (dir / "out.txt").string() + " 2>&1";
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::ifstream in(dir / "out.txt");
  std::stringstream text;
  text << in.rdbuf();
  INFO(text.str());
  // check_safetensors.py prints "<name> <dtype> <shape> <values>"
  CHECK(text.str().find("wb BF16 [2, 3]") != std::string::npos);
  CHECK(text.str().find("wh F16 [5] [0.0999755859375") != std::string::npos);
#endif
  std::filesystem::remove_all(dir);
}
