// Where batches come from. A source yields host batches one after another (an epoch's shuffled
// rows, a token stream, the same batch again for a benchmark) and says where it is in its
// stream, so that a checkpoint resumes the stream exactly.
#pragma once
#include <map>
#include <string>

#include "train/data/batch.h"

namespace ft {

/// A source's place in its stream, as the strings a checkpoint stores beside the step (token
/// shards: "epoch", "shard" and "offset").
using DataPosition = std::map<std::string, std::string>;

/// Host memory a source writes a batch into: one buffer per named tensor, kept by the caller from
/// batch to batch (the prefetcher's are page-locked when batches go to a GPU).
class BatchWriter {
 public:
  virtual ~BatchWriter() = default;
  /// Contiguous row-major memory for the tensor `name` of this shape and dtype, for the source to
  /// fill; nothing is allocated when the previous batch's buffer is large enough. Its contents are
  /// undefined until written.
  virtual void* buffer(const std::string& name, const Shape& shape, DType dtype) = 0;
};

/// A BatchWriter that allocates fresh host tensors for every batch: batch() holds them.
class HostBatchWriter : public BatchWriter {
 public:
  void* buffer(const std::string& name, const Shape& shape, DType dtype) override;
  /// The tensors written so far; take() hands them over and starts an empty batch.
  const Batch& batch() const { return batch_; }
  Batch take();

 private:
  Batch batch_;
};

/// A stream of batches. The prefetcher calls next_into() and position() from its loader thread,
/// one call at a time; set_position() is called before that thread starts.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  /// The next batch, as host tensors the caller may keep. The stream does not end (an epoch's
  /// end starts the next one); a source that cannot go on throws.
  virtual Batch next() = 0;
  /// The next batch, written through `out`: what the prefetcher calls. A source that assembles
  /// its batches (a gather of rows) overrides it to write straight into the prefetcher's
  /// page-locked buffers, sparing a copy of every batch; the default copies next()'s tensors.
  virtual void next_into(BatchWriter& out);
  /// Where the next batch comes from; empty for a source that cannot resume.
  virtual DataPosition position() const { return {}; }
  /// Moves to a position that position() returned (here or in another run with the same data),
  /// so that the batches which followed it there follow now. The default accepts only the empty
  /// position; anything else is an ft::Error.
  virtual void set_position(const DataPosition& position);
};

/// A source that assembles each batch itself (a gather of rows) straight into the writer it is
/// given; next() collects one into host tensors.
class WritingBatchSource : public BatchSource {
 public:
  Batch next() final;
  void next_into(BatchWriter& out) override = 0;
};

/// The same batch every time: benchmarks time whole steps on fixed random tokens.
class FixedBatchSource : public BatchSource {
 public:
  explicit FixedBatchSource(Batch batch);
  Batch next() override { return batch_; }

 private:
  Batch batch_;
};

}  // namespace ft
