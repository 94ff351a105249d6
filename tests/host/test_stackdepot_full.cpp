// SPDX-License-Identifier: Apache-2.0
// The stack depot before it is set up and when its pool fills (its own
// process: one depot per process, and this one ends full).
#include <gtest/gtest.h>
#include <mm/page.h>
#include <mm/stackdepot.h>
#include <string>
#include <vector>

namespace {

using mm::StackHandle;

std::vector<uintptr_t> trace(uintptr_t tag, unsigned n) {
  std::vector<uintptr_t> v(n);
  for (unsigned i = 0; i < n; i++) v[i] = 0x400000 + (tag << 12) + i * 0x24;
  return v;
}

size_t record_bytes(unsigned n) { return (16 + n * sizeof(uintptr_t) + 7) & ~size_t{7}; }

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) n++;
  return n;
}

// One test: the steps depend on each other (the depot is per process).
TEST(stackdepot_full, BeforeInitThenFilledKeepsWorking) {
  // Not set up: nothing is stored, nothing is found, and nothing breaks.
  std::vector<uintptr_t> t = trace(1, 4);
  EXPECT_EQ(mm::stackdepot_save(t.data(), 4), 0u);
  EXPECT_EQ(mm::stackdepot_capture(0), 0u);
  const uintptr_t* pcs = t.data();
  EXPECT_EQ(mm::stackdepot_fetch(1u << 13, &pcs), 0u);
  EXPECT_EQ(pcs, nullptr);
  mm::StackDepotStats s;
  mm::stackdepot_stats(s);
  EXPECT_EQ(s.bytes_total, 0u);
  EXPECT_EQ(s.traces, 0u);

  // 16 KiB: a page of buckets, then chunks of 8 and 4 KiB.
  ASSERT_TRUE(mm::stackdepot_init(16 << 10));
  mm::stackdepot_stats(s);
  EXPECT_EQ(s.bytes_total, 16u << 10);
  EXPECT_EQ(s.bytes_used, 4096u);  // the bucket table

  // Fill it with 16-frame traces until a save returns 0.
  constexpr unsigned kN = mm::kStackDepotMaxFrames;
  std::vector<std::pair<StackHandle, std::vector<uintptr_t>>> kept;
  testing::internal::CaptureStderr();
  StackHandle h;
  uintptr_t tag = 100;
  while ((h = mm::stackdepot_save(trace(tag, kN).data(), kN)) != 0) kept.emplace_back(h, trace(tag++, kN));
  // Full: more new traces are dropped, and said so once.
  for (unsigned i = 1; i <= 50; i++) EXPECT_EQ(mm::stackdepot_save(trace(tag + i, kN).data(), kN), 0u);
  std::string said = testing::internal::GetCapturedStderr();
  EXPECT_EQ(count(said, "stackdepot: pool of 16384 bytes full"), 1u) << said;
  size_t records = (8192 / record_bytes(kN)) + (4096 / record_bytes(kN));
  EXPECT_EQ(kept.size(), records);

  mm::stackdepot_stats(s);
  EXPECT_EQ(s.traces, kept.size());
  EXPECT_EQ(s.dropped, 51u);
  EXPECT_LE(s.bytes_used, s.bytes_total);

  // Everything stored is still found and fetched.
  for (auto& [handle, frames] : kept) {
    EXPECT_EQ(mm::stackdepot_save(frames.data(), kN), handle);
    unsigned n = mm::stackdepot_fetch(handle, &pcs);
    ASSERT_EQ(n, kN);
    EXPECT_EQ(std::vector<uintptr_t>(pcs, pcs + n), frames);
  }

  // The first chunk's unused tail (zeroed when the next chunk was started)
  // holds no record: a handle there is invalid.
  size_t per_chunk0 = 8192 / record_bytes(kN);
  StackHandle last0 = kept[per_chunk0 - 1].first;
  StackHandle tail = last0 + static_cast<StackHandle>(record_bytes(kN) / 8);
  EXPECT_EQ(tail, (1u << 13) | static_cast<StackHandle>(per_chunk0 * record_bytes(kN) / 8));
  EXPECT_EQ(mm::stackdepot_fetch(tail, &pcs), 0u);
  EXPECT_EQ(kept[per_chunk0].first, 2u << 13);  // the next record starts chunk 1

  // A shorter trace still fits in the last chunk's tail, when there is room.
  size_t room = 4096 - (4096 / record_bytes(kN)) * record_bytes(kN);
  ASSERT_GE(room, record_bytes(1));
  StackHandle short_one = mm::stackdepot_save(trace(7777, 1).data(), 1);
  EXPECT_NE(short_one, 0u);
  EXPECT_EQ(mm::stackdepot_fetch(short_one, &pcs), 1u);
}

}  // namespace
