// ft-compare-checkpoints A B [--rtol R]: the model weights of two checkpoints (folders holding
// model.safetensors, or checkpoint roots holding `latest`) must have the same names and shapes,
// and every tensor must agree within R relative to its largest magnitude:
// max|a - b| <= R · max|b|. Prints each tensor's figure; exit status 1 when one is over.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "lib/error.h"
#include "train/io/safetensors.h"

namespace {

std::string model_file(std::string folder) {
  namespace fs = std::filesystem;
  if (fs::exists(fs::path(folder) / "latest")) {
    std::string name;
    std::ifstream(fs::path(folder) / "latest") >> name;
    folder = (fs::path(folder) / name).string();
  }
  return (std::filesystem::path(folder) / "model.safetensors").string();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s CHECKPOINT_A CHECKPOINT_B [--rtol R]\n", argv[0]);
    return 2;
  }
  const double rtol = argc >= 5 && !std::strcmp(argv[3], "--rtol") ? std::atof(argv[4]) : 1e-6;
  try {
    const ft::SafetensorsFile a = ft::load_safetensors(model_file(argv[1]));
    const ft::SafetensorsFile b = ft::load_safetensors(model_file(argv[2]));
    FT_CHECK(a.tensors.size() == b.tensors.size(), "the checkpoints hold ", a.tensors.size(), " and ",
             b.tensors.size(), " tensors");
    double worst = 0;
    for (const auto& [name, ta] : a.tensors) {
      auto it = b.tensors.find(name);
      FT_CHECK(it != b.tensors.end(), "'", name, "' is only in the first checkpoint");
      FT_CHECK(ta.shape() == it->second.shape(), "'", name, "' has shapes ", ft::shape_str(ta.shape()), " and ",
               ft::shape_str(it->second.shape()));
      const std::vector<double> va = ta.to_vector(), vb = it->second.to_vector();
      double diff = 0, scale = 0;
      for (size_t i = 0; i < va.size(); ++i) {
        diff = std::max(diff, std::fabs(va[i] - vb[i]));
        scale = std::max(scale, std::fabs(vb[i]));
      }
      const double rel = scale > 0 ? diff / scale : diff;
      worst = std::max(worst, rel);
      std::printf("%-40s max|a-b| / max|b| = %.3g\n", name.c_str(), rel);
    }
    std::printf("%s: worst %.3g, tolerance %.3g\n", worst <= rtol ? "MATCH" : "DIFFER", worst, rtol);
    return worst <= rtol ? 0 : 1;
  } catch (const ft::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
