# The fuzz targets: tests/fuzz/<name>_fuzz.cpp, each with its seed and regression corpus in
# tests/fuzz/<name>/. Read by tests/fuzz/CMakeLists.txt (the libFuzzer build) and by
# tests/CMakeLists.txt (the suite replays every corpus).
set(FT_FUZZ_TARGETS json cli idx token_shards safetensors checkpoint criteo tokenizer)

# The sources the targets need, relative to the repository's root: the parsers of bytes, never the
# tensor library, so that the sanitized build stays small.
set(FT_FUZZ_PARSER_SOURCES
  lib/error.cpp lib/parse.cpp lib/dtype.cpp
  train/io/json.cpp train/data/idx.cpp train/data/token_shard_format.cpp train/io/safetensors_header.cpp
  train/io/checkpoint_records.cpp train/data/criteo_tsv.cpp train/data/unicode_classes.cpp train/data/split_pattern.cpp
  train/data/bpe_tokenizer.cpp train/io/text_file.cpp)
