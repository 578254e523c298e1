// Trains a tiny regression MLP for a few steps through the installed public API and fails
// unless the loss went down.
#include <cstdio>

#include <fusedtrain/lib/error.h>
#include <fusedtrain/layers/activation.h>
#include <fusedtrain/layers/linear.h>
#include <fusedtrain/layers/sequential.h>
#include <fusedtrain/lib/ops/elementwise/elementwise.h>
#include <fusedtrain/lib/ops/reduce/reduce.h>
#include <fusedtrain/lib/runtime.h>
#include <fusedtrain/optim/adamw.h>

int main() {
  try {
    const ft::Device device = ft::cuda_available() ? ft::kCUDA : ft::kCPU;
    ft::Generator gen(7);
    ft::Sequential model;
    model.push_back(std::make_shared<ft::Linear>(ft::Linear::Options{.in = 16, .out = 32}, gen));
    model.push_back(std::make_shared<ft::ReLU>());
    model.push_back(std::make_shared<ft::Linear>(ft::Linear::Options{.in = 32, .out = 1}, gen));
    model.to(device, ft::DType::F32);
    ft::AdamW optimizer(model.parameters(), ft::AdamW::Options{.lr = 1e-2});
    const ft::Tensor x = ft::Tensor::randn({64, 16}, gen, ft::DType::F32, device);
    const ft::Tensor y = ft::sum(x, true) * 0.25;  // a target the model can fit
    double first = 0, last = 0;
    for (int step = 0; step < 30; ++step) {
      optimizer.zero_grad();
      ft::Tensor diff = model.forward(x) - y;
      ft::Tensor loss = ft::mean((diff * diff).reshape({-1}));
      loss.backward();
      optimizer.step();
      (step == 0 ? first : last) = loss.item();
    }
    std::printf("consumer: %s, loss %.4f -> %.4f\n", device.str().c_str(), first, last);
    if (!(last < 0.5 * first)) {
      std::printf("consumer: FAILED, the loss did not fall by half\n");
      return 1;
    }
    std::printf("consumer: OK\n");
    return 0;
  } catch (const ft::Error& e) {
    std::fprintf(stderr, "consumer: error: %s\n", e.what());
    return 1;
  }
}
