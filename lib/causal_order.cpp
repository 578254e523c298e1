#include "lib/causal_order.h"

#include <algorithm>
#include <functional>
#include <map>
#include <mutex>
#include <queue>
#include <tuple>
#include <vector>

#include "lib/error.h"

namespace ft {

double causal_schedule_length(int query_tiles, int head_count, int group, int resident) {
  FT_CHECK(query_tiles > 0 && head_count > 0 && group > 0 && resident > 0, "causal_schedule_length: query tiles ",
           query_tiles, ", heads ", head_count, ", group ", group, " and slots ", resident, " must be positive");
  // Slots by the time they free up; the grid ends when the last block does.
  std::priority_queue<double, std::vector<double>, std::greater<>> free_at;
  for (int s = 0; s < resident; ++s) free_at.push(0.0);
  double end = 0.0;
  for (int index = 0; index < query_tiles * head_count; ++index) {
    const double start = free_at.top(), finish = start + causal_task(index, query_tiles, head_count, group).query_tile + 2;
    free_at.pop();
    free_at.push(finish);
    end = std::max(end, finish);
  }
  return end;
}

int causal_group(int query_tiles, int head_count, int resident, int max_group) {
  static std::mutex mutex;
  static std::map<std::tuple<int, int, int, int>, int> chosen;
  const auto key = std::make_tuple(query_tiles, head_count, resident, max_group);
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = chosen.find(key); it != chosen.end()) return it->second;
  int best = 1;
  double best_length = causal_schedule_length(query_tiles, head_count, 1, resident);
  for (int group = 2; group <= std::min(max_group, head_count); ++group)
    if (const double length = causal_schedule_length(query_tiles, head_count, group, resident); length < best_length) {
      best = group;
      best_length = length;
    }
  return chosen[key] = best;
}

}  // namespace ft
