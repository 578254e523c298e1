#include "train/data/batch_source.h"

#include <cstring>
#include <utility>

#include "lib/error.h"

namespace ft {

void* HostBatchWriter::buffer(const std::string& name, const Shape& shape, DType dtype) {
  batch_.set(name, Tensor::empty(shape, dtype, kCPU));
  return batch_.at(name).data_ptr();
}

Batch HostBatchWriter::take() { return std::exchange(batch_, Batch()); }

void BatchSource::next_into(BatchWriter& out) {
  const Batch batch = next();
  for (const auto& [name, tensor] : batch) {
    FT_CHECK(tensor.device().is_cpu(), "batch source: tensor '", name, "' is on ", tensor.device().str(),
             "; sources yield host tensors");
    std::memcpy(out.buffer(name, tensor.shape(), tensor.dtype()), tensor.data_ptr(), tensor.nbytes());
  }
}

void BatchSource::set_position(const DataPosition& position) {
  FT_CHECK(position.empty(), "batch source: this source cannot resume from a saved position");
}

FixedBatchSource::FixedBatchSource(Batch batch) : batch_(std::move(batch)) {
  FT_CHECK(!batch_.empty(), "FixedBatchSource: the batch is empty");
  for (const auto& [name, tensor] : batch_)
    FT_CHECK(tensor.device().is_cpu(), "FixedBatchSource: tensor '", name, "' is on ", tensor.device().str(),
             "; sources yield host tensors");
}

Batch WritingBatchSource::next() {
  HostBatchWriter writer;
  next_into(writer);
  return writer.take();
}

}  // namespace ft
