// samples/c/generate.c, the C API's whole example program, run as a user runs it: it generates from the
// built-in sample, and a bad flag or a missing model is refused with status 2 and a message naming it.
#include <gtest/gtest.h>

#include <string>

#include "tests/common/cli_runner.h"

namespace tilefire::testing {
namespace {

TEST(CSample, GeneratesAndRefusesBadFlags) {
  RunResult ok = run_program(TILEFIRE_C_SAMPLE_PATH, {"--prompt", "Hi", "--max-new-tokens", "4", "--threads", "1"});
  ASSERT_EQ(ok.status, 0) << describe(ok);
  EXPECT_NE(ok.out.find("4 tokens (length)"), std::string::npos) << ok.out;
  RunResult bad = run_program(TILEFIRE_C_SAMPLE_PATH, {"--max-new-tokens", "-1"});
  EXPECT_EQ(bad.status, 2) << describe(bad);
  EXPECT_NE(bad.err.find("--max-new-tokens expects a count"), std::string::npos) << bad.err;
  RunResult missing = run_program(TILEFIRE_C_SAMPLE_PATH, {"--model", "/nonexistent/folder"});
  EXPECT_EQ(missing.status, 2) << describe(missing);
  EXPECT_NE(missing.err.find("input error"), std::string::npos) << missing.err;
  EXPECT_NE(missing.err.find("/nonexistent/folder"), std::string::npos) << missing.err;
}

}  // namespace
}  // namespace tilefire::testing
