// ft-llama-parity MODEL BATCHES OUT [STEPS LR [DTYPE]]: what tests/parity/llama_parity.py compares
// with transformers. Loads the Hugging Face folder MODEL into a Llama on the GPU in DTYPE (bf16,
// the default, or f32; the CPU in f32 without a GPU) and runs STEPS AdamW steps (betas 0.9 0.95, eps 1e-8, no weight decay, no
// clipping) on the batches of BATCHES (a safetensors file: "inputs" and "targets" i64
// [steps, B, T]) in the kernel mode FT_KERNELS names. Writes to OUT: grads.safetensors (step 1's
// gradients, f32, by HF name), logits0.safetensors (its logits before that step), losses.json
// (every step's loss), and export/ (the trained model
// through save_hf_llama, f32) with logits.safetensors: the logits of batch 0 from the exported
// folder loaded again into an f32 Llama, which transformers must reproduce.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "lib/autograd.h"
#include "lib/error.h"
#include "lib/runtime.h"
#include "models/llama/hf_llama.h"
#include "optim/adamw.h"
#include "train/io/safetensors.h"

int main(int argc, char** argv) {
  try {
    FT_CHECK(argc == 4 || argc == 6 || argc == 7, "usage: ft-llama-parity MODEL BATCHES OUT [STEPS LR [DTYPE]]");
    const std::string model_dir = argv[1], out = argv[3];
    const int64_t steps = argc >= 6 ? std::stoll(argv[4]) : 20;
    const double lr = argc >= 6 ? std::stod(argv[5]) : 1e-3;
    const ft::Device device = ft::cuda_available() ? ft::kCUDA : ft::kCPU;
    const std::string dtype_name = argc == 7 ? argv[6] : "bf16";
    FT_CHECK(dtype_name == "bf16" || dtype_name == "f32", "ft-llama-parity: DTYPE must be bf16 or f32");
    const ft::DType dtype = device.is_cuda() && dtype_name == "bf16" ? ft::DType::BF16 : ft::DType::F32;
    std::filesystem::create_directories(out);

    const ft::LlamaConfig config = ft::read_hf_llama_config(model_dir);
    ft::Llama model(config, 0);
    ft::load_hf_llama(model, model_dir);
    model.to(device, dtype);
    const std::map<std::string, ft::Tensor> batches = ft::load_safetensors(argv[2]).tensors;
    const ft::Tensor inputs = batches.at("inputs"), targets = batches.at("targets");
    FT_CHECK(inputs.size(0) >= steps, "ft-llama-parity: ", inputs.size(0), " batches for ", steps, " steps");

    ft::AdamW optimizer(model.parameters(), {.lr = lr, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.0});
    std::string losses = "[";
    for (int64_t step = 0; step < steps; ++step) {
      const auto pick = [&](const ft::Tensor& all) {
        return all.narrow(0, step, 1).reshape({all.size(1), all.size(2)}).to(device);
      };
      optimizer.zero_grad();
      if (step == 0) {  // the starting logits, to tell a gradient gap from a forward one
        ft::NoGradGuard no_grad;
        ft::save_safetensors(out + "/logits0.safetensors",
                             {{"logits", model.logits(pick(inputs)).to(ft::kCPU).to(ft::DType::F32)}});
      }
      const ft::Tensor loss = model.loss(pick(inputs), pick(targets));
      loss.backward();
      if (step == 0) {
        std::map<std::string, ft::Tensor> grads;
        for (const auto& [name, p] : model.named_parameters()) grads[name] = p.grad().to(ft::kCPU).to(ft::DType::F32);
        ft::save_safetensors(out + "/grads.safetensors", grads);
      }
      optimizer.step();
      char value[32];
      std::snprintf(value, sizeof value, "%.9g", loss.item());
      losses += std::string(step ? ", " : "") + value;
    }
    std::ofstream(out + "/losses.json") << losses << "]\n";

    // The trained weights out as an HF folder, and back into an f32 Llama on the CPU.
    ft::save_hf_llama(model, out + "/export", ft::DType::F32);
    ft::Llama reloaded(ft::read_hf_llama_config(out + "/export"), 1);
    ft::load_hf_llama(reloaded, out + "/export");
    reloaded.to(ft::kCPU, ft::DType::F32);
    ft::NoGradGuard no_grad;
    const ft::Tensor first = inputs.narrow(0, 0, 1).reshape({inputs.size(1), inputs.size(2)});
    ft::save_safetensors(out + "/logits.safetensors", {{"logits", reloaded.logits(first)}});
    std::printf("ft-llama-parity: %lld steps on %s (%s), loss %s\n", static_cast<long long>(steps),
                device.str().c_str(), ft::dtype_name(dtype), losses.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
