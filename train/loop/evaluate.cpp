#include "train/loop/evaluate.h"

#include "lib/autograd.h"
#include "lib/ops/elementwise/elementwise.h"
#include "train/data/batches.h"

namespace ft {

double evaluate_accuracy(Module& model, const Tensor& inputs, const Tensor& labels, int64_t batch, Device device,
                         DType dtype) {
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  BatchSampler sampler(inputs.size(0), batch, 0, /*shuffle=*/false, /*drop_last=*/false);
  int64_t correct = 0;
  for (int64_t b = 0; b < sampler.batches_per_epoch(); ++b) {
    const Tensor ids = sampler.batch_ids(b);
    const Tensor logits = model.forward(cast(take_rows(inputs, ids, device), dtype));
    const std::vector<double> values = logits.to_vector();
    const std::vector<double> truth = take_rows(labels, ids, kCPU).to_vector();
    const int64_t classes = logits.size(-1);
    for (int64_t r = 0; r < ids.numel(); ++r) {
      int64_t best = 0;
      for (int64_t c = 1; c < classes; ++c)
        if (values[static_cast<size_t>(r * classes + c)] > values[static_cast<size_t>(r * classes + best)]) best = c;
      correct += best == static_cast<int64_t>(truth[static_cast<size_t>(r)]);
    }
  }
  model.train(was_training);
  return static_cast<double>(correct) / static_cast<double>(inputs.size(0));
}

BinaryMetrics evaluate_binary(Module& model, BatchSource& source, int64_t batches, Device device,
                              const std::function<Tensor(const Batch&)>& logits) {
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  std::vector<float> scores, labels;
  for (int64_t b = 0; b < batches; ++b) {
    const Batch host = source.next();
    Batch on_device;
    for (const auto& [name, t] : host) on_device.set(name, t.to(device));
    for (double z : logits(on_device).to_vector()) scores.push_back(static_cast<float>(z));
    for (double y : host.at("labels").to_vector()) labels.push_back(static_cast<float>(y));
  }
  model.train(was_training);
  return binary_metrics_from_logits(scores, labels);
}

}  // namespace ft
