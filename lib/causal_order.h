// The order in which the blocks of a causal attention forward start. A block takes one query
// tile of one head and its work grows with the tile (query tile q reads q + 1 tiles of keys).
// The GPU starts blocks in index order as slots free up, so the order decides the tail: ordered
// head by head, each head's longest block started only once the heads before it had all started,
// and the last heads' long blocks ran alone at the end (the H100 forward's multiprocessors were
// busy 79% of the time at HS 128). Here the heads go in groups, longest query tiles of the group
// first; the group size comes from a model of the block scheduler, because the tail depends on
// how the last blocks pack (a group size that leaves a partial last wave was measurably slower;
// docs/history/performance-log.md).
#pragma once
#include <cstdint>

#include "lib/hostdevice.h"

namespace ft {

struct CausalTask {
  int query_tile, head;  // head: the (batch, head) pair b·NH + h
};

/// The task of block `index`: heads in groups of `group` (the last one may be short), each
/// group's query tiles from the last down, the tile of every head of the group in turn.
FT_HOST_DEVICE CausalTask causal_task(int index, int query_tiles, int head_count, int group) {
  const int per_group = group * query_tiles, first_head = index / per_group * group;
  const int in_group = index % per_group;
  const int heads = head_count - first_head < group ? head_count - first_head : group;
  return {query_tiles - 1 - in_group / heads, first_head + in_group % heads};
}

/// How long the grid takes, in query tiles of work, when each block takes the first of
/// `resident` slots to free up and lasts its query tile's key tiles plus one for its start.
double causal_schedule_length(int query_tiles, int head_count, int group, int resident);

/// The group size, at most max_group (the heads whose keys and values should share L2), with the
/// shortest modeled schedule; the smallest such group on ties. Remembered per shape.
int causal_group(int query_tiles, int head_count, int resident, int max_group);

}  // namespace ft
