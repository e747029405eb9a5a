#include <gtest/gtest.h>

#include "nvfp4moe/status.hpp"

namespace nvfp4moe {
namespace {

TEST(Status, OkAndErrorsCarryCodeAndMessage) {
  EXPECT_TRUE(ok_status().ok());
  Status s = invalid_argument("K = ", 100, " is not a multiple of 64");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.to_string(), "InvalidArgument: K = 100 is not a multiple of 64");
}

}  // namespace
}  // namespace nvfp4moe
