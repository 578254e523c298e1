// --dump-dir: what tests/parity/gpt2_parity.py and lora_parity.py compare a run against.
// init.safetensors (the parameters the run starts from), batches.safetensors (every step's
// inputs and targets, i64) and grads.safetensors (the first step's gradients before clipping,
// with its loss and step number), parameters in f32. The hook runs every step eagerly, between
// backward and the optimizer step.
#pragma once
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "layers/module.h"
#include "train/io/safetensors.h"
#include "train/loop/trainer.h"

namespace ft::gpt2 {

class ParityDump {
 public:
  /// Writes init.safetensors now and hooks the step into `options`.
  ParityDump(std::string dir, Module& model, Trainer::Options& options) : dir_(std::move(dir)), model_(model) {
    std::filesystem::create_directories(dir_);
    save_safetensors(dir_ + "/init.safetensors", named_f32(false));
    options.after_backward = [this](int64_t step, const std::vector<Batch>& micro_batches, const Tensor& loss) {
      keep_batches(step, micro_batches);
      if (!gradients_dumped_) dump_gradients(step, loss);
    };
  }
  /// Writes batches.safetensors, after the run.
  void finish() const { save_safetensors(dir_ + "/batches.safetensors", batches_); }

 private:
  std::map<std::string, Tensor> named_f32(bool grads) const {
    std::map<std::string, Tensor> out;
    for (const auto& [name, p] : model_.named_parameters())
      if (!grads || p.requires_grad()) out[name] = (grads ? p.grad() : p).to(kCPU).to(DType::F32);
    return out;
  }
  void keep_batches(int64_t step, const std::vector<Batch>& micro_batches) {
    for (size_t micro = 0; micro < micro_batches.size(); ++micro) {
      const std::string key = std::to_string(step) + "." + std::to_string(micro);
      for (const char* name : {"inputs", "targets"}) {
        const Tensor& t = micro_batches[micro].at(name);
        Tensor copy = Tensor::empty(t.shape(), DType::I64, kCPU);  // the batch's memory is reused
        copy.copy_(t);
        batches_[std::string(name) + "." + key] = copy;
      }
    }
  }
  void dump_gradients(int64_t step, const Tensor& loss) {
    char loss_text[32];
    std::snprintf(loss_text, sizeof loss_text, "%.9g", loss.item());
    save_safetensors(dir_ + "/grads.safetensors", named_f32(true),
                     {{"loss", loss_text}, {"step", std::to_string(step + 1)}});
    gradients_dumped_ = true;
  }

  std::string dir_;
  Module& model_;
  std::map<std::string, Tensor> batches_;
  bool gradients_dumped_ = false;
};

}  // namespace ft::gpt2
