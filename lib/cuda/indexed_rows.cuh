// Whole-row moves by index, shared by gather_rows (packed[i] = table[ids[i]]) and
// index_put_rows (table[ids[i]] = packed[i]): one kernel moving rows in the widest word that
// divides the row size. An id outside the table flags kIndexOutOfRange; a gather then writes a
// zero row, a put skips it.
#pragma once
#include <cstdint>

#include "lib/cuda/dependent_launch.cuh"
#include "lib/cuda/math.cuh"
#include "lib/cuda/runtime.h"

namespace ft::cuda {

enum class RowMove { Gather, Put };

template <class Word, RowMove kMove>
__global__ void indexed_rows_kernel(Word* table, const void* ids, bool ids64, Word* packed, int64_t n,
                                    int64_t table_rows, int64_t words_per_row, unsigned* error_word) {
  begin_dependent_kernel();
  const int64_t total = n * words_per_row;
  for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < total; j += (int64_t)gridDim.x * blockDim.x) {
    const int64_t i = j / words_per_row, w = j % words_per_row;
    const int64_t id = load_id(ids, ids64, i);
    if (id < 0 || id >= table_rows) {
      if (w == 0) atomicOr(error_word, kIndexOutOfRange);
      if constexpr (kMove == RowMove::Gather) packed[j] = Word{};
    } else if constexpr (kMove == RowMove::Gather) {
      packed[j] = table[id * words_per_row + w];
    } else {
      table[id * words_per_row + w] = packed[j];
    }
  }
}

/// Moves n rows of row_bytes between `table` (table_rows rows) and `packed` (a row per id); the
/// ids are i64 when ids64, else i32.
template <RowMove kMove>
void move_indexed_rows(void* table, int64_t table_rows, const void* ids, int64_t n, bool ids64, void* packed,
                       size_t row_bytes) {
  auto launch = [&](auto word) {
    using Word = decltype(word);
    const int64_t words = static_cast<int64_t>(row_bytes / sizeof(Word));
    launch_dependent(indexed_rows_kernel<Word, kMove>, elementwise_blocks(n * words, kThreads), kThreads, 0,
                     static_cast<Word*>(table), ids, ids64, static_cast<Word*>(packed), n, table_rows, words,
                     device_error_word());
  };
  if (row_bytes % 16 == 0) launch(uint4{});
  else if (row_bytes % 4 == 0) launch(uint32_t{});
  else launch(uint16_t{});
  FT_CUDA_CHECK_LAUNCH("indexed_rows_kernel");
}

}  // namespace ft::cuda
