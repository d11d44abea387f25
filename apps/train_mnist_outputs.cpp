// train_mnist's outputs: history JSON, output-path checks, the final save and its rescue.
#include "apps/train_mnist_outputs.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "apps/paths.h"

namespace ember::apps {

void write_history(const std::string& path, const Args& a, const History& h, const EvalResult& test,
                   double total_seconds, const Device& device) {
  nlohmann::json j;
  j["dataset"] = a.dataset;
  j["model"] = a.model;
  j["lr_schedule"] = a.lr_schedule;
  if (a.early_stopping >= 0)
    j["early_stopping"] = {{"patience", a.early_stopping},
                           {"stopped_early", h.stopped_early},
                           {"best_epoch", h.best_epoch},
                           {"best_val_loss", h.best_val_loss}};
  j["device"] = device.str();
  j["epochs"] = a.epochs;
  j["batch_size"] = a.batch_size;
  j["learning_rate"] = a.lr;
  j["seed"] = a.seed;
  j["threads"] = num_threads();
  j["ember_version"] = version();
  for (const auto& e : h.epochs) {
    nlohmann::json row{{"epoch", e.epoch},
                       {"loss", e.loss},
                       {"accuracy", e.accuracy},
                       {"seconds", e.seconds},
                       {"steps", e.steps},
                       {"images_per_second", e.images_per_second},
                       {"learning_rate", e.learning_rate}};
    if (e.val_loss) row["val_loss"] = *e.val_loss;
    if (e.val_accuracy) row["val_accuracy"] = *e.val_accuracy;
    j["history"].push_back(row);
  }
  j["test"] = {{"loss", test.loss}, {"accuracy", test.accuracy}, {"samples", test.samples}};
  j["total_seconds"] = total_seconds;
  // Atomic (temporary file, renamed): a crash never leaves half a file under `path`.
  const std::string text = j.dump(2) + "\n";
  write_file_atomically(path, "--history", [&](int fd) { write_all(fd, text.data(), text.size(), path); });
}

namespace {

// No output over a file the run reads or another output writes. --save may name the model file
// it continues (--resume, --load): the file is then replaced by its continuation, as Keras'
// model.save over the path load_model read; it may not name the data or a checkpoint of
// --checkpoint-dir (the final save would replace the best one). --history replaces nothing.
void check_outputs_apart(const Args& a) {
  namespace fs = std::filesystem;
  const std::string data_dir = a.data_dir.empty() ? "data/" + a.dataset : a.data_dir;
  std::vector<NamedPath> data;
  for (const char* name :
       {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"})
    for (const char* ext : {"", ".gz"}) data.push_back({"the data set", data_dir + "/" + name + ext});
  std::vector<NamedPath> checkpoints;
  if (!a.checkpoint_dir.empty()) {
    for (const char* name : {"best.safetensors", "interrupted.safetensors"})
      checkpoints.push_back({"--checkpoint-dir", a.checkpoint_dir + "/" + name});
    for (const NamedPath& out : {NamedPath{"--save", a.save}, NamedPath{"--history", a.history}}) {
      const std::string name = fs::path(out.path).filename().string();
      if (!out.path.empty() && name.starts_with("epoch-") && name.ends_with(".safetensors"))
        checkpoints.push_back({"--checkpoint-dir", (fs::path(a.checkpoint_dir) / name).string()});
    }
  }
  std::vector<NamedPath> save_others = data;
  save_others.insert(save_others.end(), checkpoints.begin(), checkpoints.end());
  check_not_same({"--save", a.save}, save_others);
  std::vector<NamedPath> history_others = save_others;
  for (const NamedPath& p : {NamedPath{"--save", a.save}, NamedPath{"--resume", a.resume}, NamedPath{"--load", a.load}})
    history_others.push_back(p);
  check_not_same({"--history", a.history}, history_others);
}

}  // namespace

void check_outputs(const Args& a) {
  namespace fs = std::filesystem;
  if (!a.save.empty()) check_output_path(a.save, "--save");
  if (!a.history.empty()) check_output_path(a.history, "--history");
  check_outputs_apart(a);
  if (a.checkpoint_dir.empty()) return;
  const fs::path dir(a.checkpoint_dir);
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(dir, ec))) {
    fs::create_directories(dir, ec);
    if (ec) throw IoError("--checkpoint-dir " + a.checkpoint_dir + ": cannot create it: " + ec.message());
  }
  if (!fs::is_directory(dir, ec)) throw IoError("--checkpoint-dir " + a.checkpoint_dir + " is not a folder");
  std::vector<std::string> found;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name == "best.safetensors" || name == "interrupted.safetensors" ||
        (name.starts_with("epoch-") && name.ends_with(".safetensors")))
      found.push_back(name);
  }
  if (!found.empty() && a.overwrite && a.resume.empty()) {
    // Replaced as a whole: a later epoch file of the old run must not be taken for this run's.
    for (const std::string& name : found) fs::remove(dir / name, ec);
    found.clear();
  }
  if (!found.empty() && a.resume.empty())
    throw IoError("--checkpoint-dir " + a.checkpoint_dir + " holds another run's checkpoints (" + found.front() +
                  (found.size() > 1 ? " and " + std::to_string(found.size() - 1) + " more" : "") +
                  "): continue that run with --resume, replace them with --overwrite, or choose another folder");
  check_output_path((dir / "best.safetensors").string(), "--checkpoint-dir");
  check_output_path((dir / "epoch-001.safetensors").string(), "--checkpoint-dir");
}

void check_data(const MnistData& data, const std::string& dir) {
  if (data.train.size() == 0) throw IoError("the training set in " + dir + " is empty");
  if (data.test.size() == 0) throw IoError("the test set in " + dir + " is empty");
  if (!(data.test.sample_shape() == data.train.sample_shape()))
    throw IoError("the test images in " + dir + " are " + data.test.sample_shape().str() + " but the training images " +
                  data.train.sample_shape().str());
}

void save_final(const Model& model, const std::string& path, const TrainingState& state) {
  try {
    model.save(path, state);
    return;
  } catch (const IoError& first) {
    namespace fs = std::filesystem;
    const std::string rescue_name = fs::path(path).filename().string() + ".rescued-" + std::to_string(::getpid());
    std::error_code ec;
    const fs::path tmp = fs::temp_directory_path(ec);
    for (const fs::path& dir : {fs::path(path).parent_path(), ec ? fs::path("/tmp") : tmp}) {
      const std::string rescue = (dir.empty() ? fs::path(rescue_name) : dir / rescue_name).string();
      try {
        model.save(rescue, state);
      } catch (const IoError&) {
        continue;
      }
      throw IoError(std::string(first.what()) + "; the trained model was saved to " + rescue + " instead");
    }
    throw;
  }
}

double parse_best(const TrainingState& state, const std::string& path) {
  const auto it = state.extra.find("best_val_accuracy");
  if (it == state.extra.end()) return -1;
  char* end = nullptr;
  const double v = std::strtod(it->second.c_str(), &end);
  if (it->second.empty() || end != it->second.c_str() + it->second.size() || !std::isfinite(v))
    throw CheckpointError("checkpoint " + path + ": metadata 'best_val_accuracy' is not a number: '" + it->second +
                          "'");
  return v;
}

}  // namespace ember::apps
