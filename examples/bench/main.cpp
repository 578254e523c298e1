// ft-bench: measurements on the GPU, printed as tables. Subcommands:
//   ft-bench ops    the memory-bound fused ops (fwd+bwd) in both kernel modes
#include <cstdio>
#include <cstring>
#include <iostream>

#include "examples/bench/ops.h"
#include "examples/common/cli.h"
#include "lib/runtime.h"

namespace {

int run(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::printf("usage: ft-bench SUBCOMMAND [flags]\n\nsubcommands:\n"
                "  ops    memory-bound fused ops, forward+backward, fused vs unfused (ft-bench ops --help)\n");
    return argc < 2 ? 1 : 0;
  }
  const std::string sub = argv[1];
  FT_CHECK(sub == "ops", "ft-bench: unknown subcommand '", sub, "' (see --help)");
  ft::cli::Args args("ft-bench ops", "Times each memory-bound fused op (forward + backward) on GPT-2 shapes in both\n"
                                     "kernel modes, and prints bandwidth against the 3.0 TB/s ceiling.");
  args.flag("rows", "16384", "rows N (B·T)");
  args.flag("channels", "768", "channels C");
  args.flag("vocab", "50304", "vocabulary V for cross-entropy");
  args.flag("iterations", "20", "timed iterations (median reported)");
  args.flag("warmup", "3", "untimed iterations first");
  if (!args.parse(argc - 1, argv + 1)) return 0;
  FT_CHECK(ft::cuda_available(), "ft-bench: needs a CUDA GPU");
  ft::bench::OpsBenchOptions o;
  o.rows = args.integer("rows");
  o.channels = args.integer("channels");
  o.vocab = args.integer("vocab");
  o.iterations = static_cast<int>(args.integer("iterations"));
  o.warmup = static_cast<int>(args.integer("warmup"));
  return ft::bench::run_ops_bench(o);
}

}  // namespace

int main(int argc, char** argv) {
  return ft::cli::guarded_main([&] { return run(argc, argv); });
}
