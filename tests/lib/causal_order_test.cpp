// The causal forward's block order (lib/causal_order.h): every (query tile, head) once, longest
// first within a group, and the scheduler model against cases worked out by hand.
#include "lib/causal_order.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <utility>

#include "tests/lib/test_util.h"

namespace ft {
namespace {

TEST(CausalOrderTest, EveryTaskOnceLongestFirstInItsGroup) {
  std::mt19937 rng(static_cast<uint32_t>(test::test_seed()));
  for (int trial = 0; trial < 60; ++trial) {
    const int query_tiles = std::uniform_int_distribution<int>(1, 17)(rng);
    const int heads = std::uniform_int_distribution<int>(1, 70)(rng);
    const int group = std::uniform_int_distribution<int>(1, heads)(rng);
    SCOPED_TRACE(std::to_string(query_tiles) + " tiles, " + std::to_string(heads) + " heads, group " +
                 std::to_string(group));
    std::set<std::pair<int, int>> seen;
    CausalTask previous{};
    for (int index = 0; index < query_tiles * heads; ++index) {
      const CausalTask task = causal_task(index, query_tiles, heads, group);
      ASSERT_GE(task.query_tile, 0);
      ASSERT_LT(task.query_tile, query_tiles);
      ASSERT_GE(task.head, 0);
      ASSERT_LT(task.head, heads);
      ASSERT_TRUE(seen.insert({task.query_tile, task.head}).second) << "task repeated at block " << index;
      EXPECT_EQ(task.head / group, index / (group * query_tiles)) << "block " << index << " left its group";
      if (index > 0 && task.head / group == previous.head / group) {
        EXPECT_LE(task.query_tile, previous.query_tile) << "a shorter block started before a longer one";
      }
      previous = task;
    }
  }
}

TEST(CausalOrderTest, ScheduleLengthMatchesHandWorkedCases) {
  // Enough slots for every block: the longest block, query tile 7, lasts 7 + 2.
  EXPECT_DOUBLE_EQ(causal_schedule_length(8, 3, 1, 100), 9.0);
  // One slot runs the blocks one after another: 3 heads × (2 + 3 + ... + 9).
  EXPECT_DOUBLE_EQ(causal_schedule_length(8, 3, 2, 1), 3.0 * 44);
  // Two slots, 2 heads of 2 query tiles (lengths 3 and 2). Per head: slot A takes head 0's 3, slot
  // B head 0's 2 then head 1's 3 (2 + 3 = 5), A head 1's 2 (3 + 2 = 5). Grouped: both 3s, then
  // both 2s, also 5.
  EXPECT_DOUBLE_EQ(causal_schedule_length(2, 2, 1, 2), 5.0);
  EXPECT_DOUBLE_EQ(causal_schedule_length(2, 2, 2, 2), 5.0);
  // Four slots, 3 heads of 2 query tiles. Per head: 3, 2, 3, 2 start at 0, then head 2's 3 at 2
  // ends at 5. Grouped: the three 3s and a 2 start at 0, the other 2s at 2 and 3, the last ending
  // at 5.
  EXPECT_DOUBLE_EQ(causal_schedule_length(2, 3, 1, 4), 5.0);
  EXPECT_DOUBLE_EQ(causal_schedule_length(2, 3, 3, 4), 5.0);
  // Three slots, 3 heads of 3 query tiles (4, 3, 2). Per head: head 0's blocks on A, B, C free them
  // at 4, 3, 2; head 1's take C, B, A and all end at 6; head 2's 4 then ends at 10. Grouped: the
  // 4s, then the 3s (→ 7), then the 2s (→ 9).
  EXPECT_DOUBLE_EQ(causal_schedule_length(3, 3, 1, 3), 10.0);
  EXPECT_DOUBLE_EQ(causal_schedule_length(3, 3, 3, 3), 9.0);
  // Where the order matters: 2 slots, 2 heads of 3 query tiles (4, 3, 2). Per head: A 4, B 3,
  // then head 0's 2 on B (3 → 5), head 1's 4 on A (4 → 8), its 3 on B (5 → 8), its 2 on B or A
  // (8 → 10). Grouped: the 4s on A and B, the 3s at 4 (→ 7), the 2s at 7 (→ 9).
  EXPECT_DOUBLE_EQ(causal_schedule_length(3, 2, 1, 2), 10.0);
  EXPECT_DOUBLE_EQ(causal_schedule_length(3, 2, 2, 2), 9.0);
  EXPECT_THROW(causal_schedule_length(0, 3, 1, 4), Error);
}

TEST(CausalOrderTest, ChosenGroupShortensTheGpt2Schedule) {
  // GPT-2's causal forward on an H100: T 1024 in 8 query tiles of 128, 2 blocks on each of 132
  // multiprocessors; B 16 × NH 12 heads at HS 64, and the benchmark's 96 heads at HS 128.
  for (const int heads : {192, 96}) {
    const int max_group = heads == 192 ? 48 : 24;
    const int group = causal_group(8, heads, 264, max_group);
    SCOPED_TRACE(std::to_string(heads) + " heads, group " + std::to_string(group));
    EXPECT_GE(group, 1);
    EXPECT_LE(group, max_group);
    EXPECT_LT(causal_schedule_length(8, heads, group, 264), causal_schedule_length(8, heads, 1, 264));
    for (int other = 1; other <= max_group; ++other)
      EXPECT_LE(causal_schedule_length(8, heads, group, 264), causal_schedule_length(8, heads, other, 264));
    EXPECT_EQ(causal_group(8, heads, 264, max_group), group) << "remembered";
  }
  EXPECT_EQ(causal_group(8, 192, 264, 1), 1);
  EXPECT_LE(causal_group(8, 5, 264, 48), 5);
}

}  // namespace
}  // namespace ft
