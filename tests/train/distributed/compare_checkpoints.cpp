// ft-compare-checkpoints A B [--rtol R]: the model weights of two checkpoints (folders holding
// model.safetensors, or checkpoint roots holding `latest`; a sharded run's tables joined from its
// shard files) must have the same names and shapes,
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
#include "tests/train/distributed/relative_difference.h"
#include "train/io/checkpoint.h"
#include "train/io/safetensors.h"
#include "train/io/table_shards.h"

namespace {

/// The model's tensors of a checkpoint: model.safetensors, with the tables of a sharded run
/// joined from its shard files into the "tables.weight" (and "tables.accumulator") one process
/// writes.
std::map<std::string, ft::Tensor> model_tensors(const std::string& given) {
  const std::string folder = ft::resolve_checkpoint_folder(given);
  std::map<std::string, ft::Tensor> tensors =
      ft::load_safetensors((std::filesystem::path(folder) / "model.safetensors").string()).tensors;
  const auto shape = ft::StoredTables::sharded_shape(folder);
  if (!shape) return tensors;
  const auto& [rows, dim] = *shape;
  const ft::StoredTables stored(folder, "tables.", rows, dim);
  int64_t total = 0;
  for (int64_t r : rows) total += r;
  ft::Tensor weight = ft::Tensor::empty({total, dim});
  ft::Tensor accumulator;
  if (stored.has_accumulators())
    accumulator = stored.elementwise_accumulators() ? ft::Tensor::empty({total, dim}) : ft::Tensor::empty({total});
  int64_t at = 0;
  for (size_t t = 0; t < rows.size(); ++t) {
    stored.read(t, 0, rows[t], weight.narrow(0, at, rows[t]),
                accumulator.defined() ? accumulator.narrow(0, at, rows[t]) : ft::Tensor());
    at += rows[t];
  }
  tensors["tables.weight"] = weight;
  if (accumulator.defined()) tensors["tables.accumulator"] = accumulator;
  return tensors;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s CHECKPOINT_A CHECKPOINT_B [--rtol R]\n", argv[0]);
    return 2;
  }
  const double rtol = argc >= 5 && !std::strcmp(argv[3], "--rtol") ? std::atof(argv[4]) : 1e-6;
  try {
    const std::map<std::string, ft::Tensor> a = model_tensors(argv[1]), b = model_tensors(argv[2]);
    FT_CHECK(a.size() == b.size(), "the checkpoints hold ", a.size(), " and ", b.size(), " tensors");
    double worst = 0;
    for (const auto& [name, ta] : a) {
      auto it = b.find(name);
      FT_CHECK(it != b.end(), "'", name, "' is only in the first checkpoint");
      FT_CHECK(ta.shape() == it->second.shape(), "'", name, "' has shapes ", ft::shape_str(ta.shape()), " and ",
               ft::shape_str(it->second.shape()));
      const double rel = ft::test::relative_difference(ta.to_vector(), it->second.to_vector());
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
