#include "train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "lib/error.h"
#include "lib/ops/random.h"
#include "lib/parse.h"
#include "train/safetensors.h"

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
  std::error_code ec;
  fs::create_directories(root, ec);
  FT_CHECK(!ec, "save_checkpoint: cannot create '", root, "': ", ec.message());
  const fs::path final_dir = fs::path(root) / step_folder_name(step);
  const fs::path temp_dir = fs::path(root) / (step_folder_name(step) + ".tmp");
  fs::remove_all(temp_dir, ec);
  fs::create_directories(temp_dir, ec);
  FT_CHECK(!ec, "save_checkpoint: cannot create '", temp_dir.string(), "': ", ec.message());

  std::map<std::string, std::string> meta = run_state;
  meta["step"] = std::to_string(step);
  // The dropout masks' counter (LoRA's adapter dropout, the MLP's): a resumed run draws the masks
  // the uninterrupted one would have.
  meta["philox"] = std::to_string(PhiloxCounter::on(model_device(model)).value());
  save_safetensors((temp_dir / "model.safetensors").string(), model.state_dict(), {{"format", "pt"}});
  save_safetensors((temp_dir / "optimizer.safetensors").string(), optimizer_state, meta);
  fsync_path(temp_dir, true);

  fs::remove_all(final_dir, ec);  // a checkpoint of the same step from an earlier, interrupted run
  fs::rename(temp_dir, final_dir, ec);
  FT_CHECK(!ec, "save_checkpoint: cannot rename '", temp_dir.string(), "' to '", final_dir.string(), "': ",
           ec.message());
  fsync_path(root, true);

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
  return final_dir.string();
}

std::map<std::string, std::string> load_checkpoint(const std::string& folder, Module& model, Optimizer& optimizer) {
  fs::path dir(folder);
  if (fs::exists(dir / "latest")) {
    std::ifstream in(dir / "latest");
    std::string name;
    in >> name;
    FT_CHECK(!name.empty(), "load_checkpoint: '", (dir / "latest").string(), "' is empty");
    dir /= name;
  }
  FT_CHECK(fs::exists(dir / "model.safetensors") && fs::exists(dir / "optimizer.safetensors"), "load_checkpoint: '",
           dir.string(), "' holds no complete checkpoint (model.safetensors and optimizer.safetensors)");
  const SafetensorsFile weights = load_safetensors((dir / "model.safetensors").string());
  // Strict: a resumed run must continue from every saved weight, so any mismatch is an error.
  model.load_state_dict(weights.tensors, /*strict=*/true);
  const SafetensorsFile state = load_safetensors((dir / "optimizer.safetensors").string());
  auto it = state.metadata.find("step");
  FT_CHECK(it != state.metadata.end(), "load_checkpoint: '", dir.string(), "' has no step in its metadata");
  // The step count first: it resets the device counters, which the saved state then restores.
  const int64_t step = parse_int64(it->second, "load_checkpoint: '" + dir.string() + "': the metadata's step");
  FT_CHECK(step >= 0, "load_checkpoint: '", dir.string(), "': negative step ", step, " in its metadata");
  optimizer.set_step_count(step);
  optimizer.load_state(state.tensors);
  if (auto philox = state.metadata.find("philox"); philox != state.metadata.end()) {  // absent in older checkpoints
    uint64_t value = 0;
    const std::string& text = philox->second;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    FT_CHECK(error == std::errc() && end == text.data() + text.size(), "load_checkpoint: '", dir.string(),
             "' has a bad philox counter '", text, "' in its metadata");
    PhiloxCounter::on(model_device(model)).set(value);
  }
  return state.metadata;
}

}  // namespace ft
