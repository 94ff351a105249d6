// SPDX-License-Identifier: Apache-2.0
// Replays the fuzzer's committed corpus (tests/host/fuzz/corpus/) through
// the fuzz target under ASan/UBSan: every input the fuzzer found
// interesting stays a regression test without needing clang.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

TEST(TraceCorpus, EveryInputReadsWithoutError) {
  size_t files = 0;
  for (auto& entry : std::filesystem::directory_iterator(MAGPIE_FUZZ_CORPUS)) {
    std::ifstream f(entry.path(), std::ios::binary);
    std::vector<uint8_t> data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    EXPECT_EQ(LLVMFuzzerTestOneInput(data.data(), data.size()), 0) << entry.path();
    files++;
  }
  EXPECT_GT(files, 5u);
}
