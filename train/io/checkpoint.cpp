#include "train/io/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <utility>
#include <vector>

#include "lib/error.h"
#include "lib/ops/random/random.h"
#include "train/io/checkpoint_records.h"
#include "train/io/safetensors.h"

namespace ft {

namespace fs = std::filesystem;

namespace {

void fsync_path(const fs::path& path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

std::string step_folder_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step_%08lld", static_cast<long long>(step));
  return name;
}

constexpr const char* kManifest = "manifest.json";
constexpr const char* kFiles[] = {"model.safetensors", "optimizer.safetensors"};
int crash_after_stage = 0;  // simulate_checkpoint_crash_after

// A crash in the save sequence, for its tests: leaves the files as they are at that point.
void stage_done(int stage) {
  if (crash_after_stage != stage) return;
  crash_after_stage = 0;
  FT_FAIL("save_checkpoint: simulated crash after stage ", stage);
}

uint32_t file_crc32(const fs::path& path, int64_t& bytes) {
  std::ifstream in(path, std::ios::binary);
  FT_CHECK(in.good(), "checkpoint: cannot read '", path.string(), "'");
  std::vector<char> buffer(size_t{4} << 20);
  uLong crc = crc32(0L, Z_NULL, 0);
  bytes = 0;
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const std::streamsize n = in.gcount();
    if (n <= 0) break;
    crc = crc32_z(crc, reinterpret_cast<const Bytef*>(buffer.data()), static_cast<z_size_t>(n));
    bytes += n;
  }
  return static_cast<uint32_t>(crc);
}

// The manifest, written last into a checkpoint folder: each file's size and CRC-32. Its presence
// marks the folder complete; load_checkpoint checks every file against it.
void write_manifest(const fs::path& dir, const std::vector<std::string>& rank_files) {
  std::map<std::string, ManifestEntry> files;
  std::vector<std::string> names(std::begin(kFiles), std::end(kFiles));
  names.insert(names.end(), rank_files.begin(), rank_files.end());
  for (const std::string& name : names) {
    ManifestEntry& entry = files[name];
    entry.crc32 = file_crc32(dir / name, entry.bytes);
  }
  const std::string text = format_checkpoint_manifest(files);
  const fs::path path = dir / kManifest;
  {
    std::ofstream out(path, std::ios::trunc);
    out << text;
    out.flush();
    FT_CHECK(out.good(), "save_checkpoint: cannot write '", path.string(), "'");
  }
  fsync_path(path, false);
}

bool complete(const fs::path& dir) { return fs::exists(dir / kManifest); }

// Every file the manifest lists (the model, the optimizer, and the ranks' files) against it.
void verify(const fs::path& dir) {
  const fs::path path = dir / kManifest;
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // The model and optimizer files always; the ranks' files (sharded tables) as the manifest lists
  // them. Files added after the folder was complete (a LoRA run's adapter export) are not checked.
  std::vector<std::string> names(std::begin(kFiles), std::end(kFiles));
  for (const std::string& name : checkpoint_manifest_names(text, path.string()))
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  const std::map<std::string, ManifestEntry> manifest = parse_checkpoint_manifest(text, names, path.string());
  for (const auto& [name, expected] : manifest) {
    int64_t actual_bytes = 0;
    const uint32_t actual = file_crc32(dir / name, actual_bytes);
    FT_CHECK(actual_bytes == expected.bytes, "load_checkpoint: '", (dir / name).string(), "' holds ", actual_bytes,
             " bytes, its manifest says ", expected.bytes, ": the file is truncated or was changed");
    FT_CHECK(actual == expected.crc32, "load_checkpoint: '", (dir / name).string(), "' fails its checksum (crc32 ",
             actual, ", the manifest says ", expected.crc32, "): the file is corrupt");
  }
}

// The step of a folder named step_<N> or step_<N>.tmp, or -1.
int64_t folder_step(const std::string& name) {
  if (name.rfind("step_", 0) != 0) return -1;
  std::string digits = name.substr(5);
  if (digits.size() > 4 && digits.compare(digits.size() - 4, 4, ".tmp") == 0) digits.resize(digits.size() - 4);
  int64_t step = -1;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  return ec == std::errc() && end == digits.data() + digits.size() ? step : -1;
}

// The newest complete checkpoint folder under root (a crash may have left it as step_<N>.tmp).
fs::path newest_complete(const fs::path& root) {
  fs::path best;
  int64_t best_step = -1;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const int64_t step = folder_step(entry.path().filename().string());
    if (step > best_step && complete(entry.path())) {
      best_step = step;
      best = entry.path();
    }
  }
  return best;
}

// Where the model's parameters live (the CPU for a model without any).
Device model_device(const Module& model) {
  const std::vector<Tensor> params = model.parameters();
  return params.empty() ? kCPU : params.front().device();
}

}  // namespace

std::string save_checkpoint(const std::string& root, int64_t step, const Module& model, const Optimizer& optimizer,
                            const std::map<std::string, std::string>& run_state) {
  return save_checkpoint(root, step, model, optimizer.state(), run_state);
}

std::string save_checkpoint(const std::string& root, int64_t step, const Module& model,
                            const std::map<std::string, Tensor>& optimizer_state,
                            const std::map<std::string, std::string>& run_state) {
  checkpoint_staging_folder(root, step, /*create=*/true);
  return save_checkpoint(root, step, model, optimizer_state, run_state, CheckpointShards{});
}

std::string checkpoint_staging_folder(const std::string& root, int64_t step, bool create) {
  const fs::path temp_dir = fs::path(root) / (step_folder_name(step) + ".tmp");
  if (create) {
    std::error_code ec;
    fs::create_directories(root, ec);
    FT_CHECK(!ec, "save_checkpoint: cannot create '", root, "': ", ec.message());
    fs::remove_all(temp_dir, ec);
    fs::create_directories(temp_dir, ec);
    FT_CHECK(!ec, "save_checkpoint: cannot create '", temp_dir.string(), "': ", ec.message());
  }
  return temp_dir.string();
}

std::string save_checkpoint(const std::string& root, int64_t step, const Module& model,
                            const std::map<std::string, Tensor>& optimizer_state,
                            const std::map<std::string, std::string>& run_state, const CheckpointShards& shards) {
  std::error_code ec;
  const fs::path final_dir = fs::path(root) / step_folder_name(step);
  const fs::path temp_dir = checkpoint_staging_folder(root, step, /*create=*/false);
  FT_CHECK(fs::is_directory(temp_dir), "save_checkpoint: the staging folder '", temp_dir.string(), "' is missing");
  for (const std::string& name : shards.rank_files)
    FT_CHECK(fs::exists(temp_dir / name), "save_checkpoint: a rank's file '", (temp_dir / name).string(),
             "' is missing");

  std::map<std::string, std::string> meta = run_state;
  meta["step"] = std::to_string(step);
  // The dropout masks' counter (LoRA's adapter dropout, the MLP's): a resumed run draws the masks
  // the uninterrupted one would have.
  meta["philox"] = std::to_string(PhiloxCounter::on(model_device(model)).value());
  std::map<std::string, Tensor> weights = model.state_dict();
  if (!shards.prefix.empty())
    std::erase_if(weights, [&](const auto& named) { return named.first.starts_with(shards.prefix); });
  save_safetensors((temp_dir / "model.safetensors").string(), weights, {{"format", "pt"}});
  save_safetensors((temp_dir / "optimizer.safetensors").string(), optimizer_state, meta);
  stage_done(1);
  write_manifest(temp_dir, shards.rank_files);  // last: the folder is complete from here on
  fsync_path(temp_dir, true);
  stage_done(2);

  // A checkpoint of the same step (an earlier run's, resumed into this folder) is replaced. Between
  // its removal and the rename, `latest` names a missing folder; load_checkpoint then takes the
  // newest complete one, this step's .tmp: no moment leaves the run without a loadable checkpoint.
  fs::remove_all(final_dir, ec);
  stage_done(3);
  fs::rename(temp_dir, final_dir, ec);
  FT_CHECK(!ec, "save_checkpoint: cannot rename '", temp_dir.string(), "' to '", final_dir.string(), "': ",
           ec.message());
  fsync_path(root, true);
  stage_done(4);

  // `latest` names the newest complete checkpoint; it is replaced by rename too.
  const fs::path latest = fs::path(root) / "latest", latest_temp = fs::path(root) / "latest.tmp";
  {
    std::ofstream out(latest_temp, std::ios::trunc);
    out << step_folder_name(step) << "\n";
    out.flush();
    FT_CHECK(out.good(), "save_checkpoint: cannot write '", latest_temp.string(), "'");
  }
  fsync_path(latest_temp, false);
  fs::rename(latest_temp, latest, ec);
  FT_CHECK(!ec, "save_checkpoint: cannot update '", latest.string(), "': ", ec.message());
  fsync_path(root, true);
  stage_done(5);
  return final_dir.string();
}

namespace {

// The checkpoint folder `folder` names: itself, or under a root the one `latest` names (the
// newest complete one when that is missing or incomplete).
fs::path checkpoint_folder(const std::string& folder) {
  fs::path dir(folder);
  if (fs::exists(dir / "latest")) {
    std::ifstream in(dir / "latest");
    std::string name;
    in >> name;
    const fs::path named = dir / name;
    if (!name.empty() && complete(named)) {
      dir = named;
    } else {
      // A crash while replacing a checkpoint of the same step: take the newest complete one.
      const fs::path newest = newest_complete(dir);
      FT_CHECK(!newest.empty(), "load_checkpoint: '", (dir / "latest").string(), "' names '", name,
               "', which is missing or incomplete, and '", dir.string(), "' holds no other complete checkpoint");
      std::fprintf(stderr, "note: '%s' names '%s', which is missing or incomplete; loading '%s'\n",
                   (dir / "latest").c_str(), name.c_str(), newest.c_str());
      dir = newest;
    }
  }
  return dir;
}

// "model=tiny, vocab=256, step=40": a checkpoint's run state, for an error about what it holds.
std::string run_state_summary(const std::map<std::string, std::string>& state) {
  std::string out;
  for (const auto& [key, value] : state)
    if (value.size() <= 40 && key.find("__") == std::string::npos) out += (out.empty() ? "" : ", ") + key + "=" + value;
  return out;
}

}  // namespace

std::map<std::string, std::string> checkpoint_run_state(const std::string& folder) {
  const fs::path dir = checkpoint_folder(folder);
  FT_CHECK(fs::exists(dir / "optimizer.safetensors"), "checkpoint_run_state: '", dir.string(),
           "' holds no complete checkpoint (optimizer.safetensors)");
  return load_safetensors_metadata((dir / "optimizer.safetensors").string());
}

std::string resolve_checkpoint_folder(const std::string& folder) { return checkpoint_folder(folder).string(); }

namespace {

/// Loads `weights` into the model: strictly, or with shards_prefix, strictly for every name
/// outside it (the ones under it come from the rank files).
void load_model_weights(Module& model, const std::map<std::string, Tensor>& weights, const std::string& shards_prefix) {
  if (shards_prefix.empty()) {
    model.load_state_dict(weights, /*strict=*/true);
    return;
  }
  std::map<std::string, Tensor> outside = weights;
  std::erase_if(outside, [&](const auto& named) { return named.first.starts_with(shards_prefix); });
  const LoadReport report = model.load_state_dict(outside, /*strict=*/false);
  LoadReport left = report;
  std::erase_if(left.missing, [&](const std::string& name) { return name.starts_with(shards_prefix); });
  FT_CHECK(left.ok(), left.str());
}

}  // namespace

std::map<std::string, std::string> load_checkpoint(const std::string& folder, Module& model, Optimizer& optimizer,
                                                   const std::string& shards_prefix) {
  const fs::path dir = checkpoint_folder(folder);
  FT_CHECK(fs::exists(dir / "model.safetensors") && fs::exists(dir / "optimizer.safetensors"), "load_checkpoint: '",
           dir.string(), "' holds no complete checkpoint (model.safetensors and optimizer.safetensors)");
  if (complete(dir)) verify(dir);  // checkpoints written before manifests load unverified
  const SafetensorsFile weights = load_safetensors((dir / "model.safetensors").string());
  const SafetensorsFile state = load_safetensors((dir / "optimizer.safetensors").string());
  // Strict: a resumed run must continue from every saved weight, so any mismatch is an error,
  // which says what run wrote the checkpoint.
  try {
    load_model_weights(model, weights.tensors, shards_prefix);
  } catch (const Error& e) {
    FT_FAIL("load_checkpoint: '", dir.string(), "' holds another model than this run builds (written by a run with ",
            run_state_summary(state.metadata), "): ", e.what());
  }
  const CheckpointCounters counters = parse_checkpoint_counters(state.metadata, dir.string());
  // The step count first: it resets the device counters, which the saved state then restores.
  optimizer.set_step_count(counters.step);
  optimizer.load_state(state.tensors);
  if (counters.philox) PhiloxCounter::on(model_device(model)).set(*counters.philox);
  return state.metadata;
}

void prune_checkpoints(const std::string& root, int64_t keep_last) {
  FT_CHECK(keep_last >= 1, "prune_checkpoints: keep_last must be at least 1, got ", keep_last);
  std::string latest_name;
  std::ifstream(fs::path(root) / "latest") >> latest_name;
  std::vector<std::pair<int64_t, fs::path>> folders;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    const int64_t step = folder_step(name);
    if (step >= 0 && name.find(".tmp") == std::string::npos && complete(entry.path())) folders.emplace_back(step, entry.path());
  }
  std::sort(folders.begin(), folders.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t i = static_cast<size_t>(keep_last); i < folders.size(); ++i)
    if (folders[i].second.filename().string() != latest_name) fs::remove_all(folders[i].second, ec);
}

void simulate_checkpoint_crash_after(int stage) { crash_after_stage = stage; }

}  // namespace ft
