// ckpt/dtype.hpp without torch: every fp16 and bf16 value survives the trip through fp32; rounding ties go
// to even; overflow, subnormals, inf and NaN as IEEE says. (test_ckpt_cli.py checks the casts against
// torch bit for bit on real weights and on these special values.)
#include <gtest/gtest.h>

#include <bit>
#include <cmath>

#include "ckpt/dtype.hpp"
#include "ckpt/output.hpp"
#include "core/error.hpp"
#include "core/log.hpp"

namespace ulysses::ckpt {
namespace {

float f(std::uint32_t bits) { return std::bit_cast<float>(bits); }

TEST(Dtype, EveryHalfAndBfloatRoundTripsThroughFloat) {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const auto v = static_cast<std::uint16_t>(h);
    const bool f16_nan = (v & 0x7c00) == 0x7c00 && (v & 0x3ff);
    const bool bf16_nan = (v & 0x7f80) == 0x7f80 && (v & 0x7f);
    if (!f16_nan) EXPECT_EQ(f32_to_f16(f16_to_f32(v)), v) << std::hex << h;
    else EXPECT_TRUE(std::isnan(f16_to_f32(v)));
    if (!bf16_nan) EXPECT_EQ(f32_to_bf16(bf16_to_f32(v)), v) << std::hex << h;
    else EXPECT_TRUE(std::isnan(bf16_to_f32(v)));
  }
}

TEST(Dtype, RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(f(0x3f808000)), 0x3f80);   // tie, even below
  EXPECT_EQ(f32_to_bf16(f(0x3f818000)), 0x3f82);   // tie, even above
  EXPECT_EQ(f32_to_bf16(f(0x3f808001)), 0x3f81);   // above the tie
  EXPECT_EQ(f32_to_f16(1.0f + 0x1p-11f), 0x3c00);  // tie → even (1.0)
  EXPECT_EQ(f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);         // largest half
  EXPECT_EQ(f32_to_f16(65519.99f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);         // rounds to inf
  EXPECT_EQ(f32_to_f16(-INFINITY), 0xfc00);
  EXPECT_EQ(f32_to_f16(0x1p-24f), 0x0001);         // smallest subnormal
  EXPECT_EQ(f32_to_f16(0x1p-25f), 0x0000);         // tie → even (0)
  EXPECT_EQ(f32_to_f16(0x1.8p-24f), 0x0002);       // tie → even (2)
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_bf16(f(0x7f7fffff)), 0x7f80);   // FLT_MAX → inf, as torch
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(NAN))));
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(f(0x7f800001)))));   // signalling NaN stays NaN
}

TEST(Dtype, SizesParseLikeHuggingFace) {
  EXPECT_EQ(parse_size("5GB", "--x"), 5'000'000'000u);
  EXPECT_EQ(parse_size("500MB", "--x"), 500'000'000u);
  EXPECT_EQ(parse_size("2GiB", "--x"), std::uint64_t{2} << 30);
  EXPECT_EQ(parse_size("1.5kb", "--x"), 1500u);
  EXPECT_EQ(parse_size("4096", "--x"), 4096u);
  for (const char* bad : {"", "GB", "5XB", "-1GB", "1.2.3MB", "0"}) EXPECT_THROW(parse_size(bad, "--x"), BadInput) << bad;
}

}  // namespace
}  // namespace ulysses::ckpt
