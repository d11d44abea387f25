// The model-level checkpoint (see checkpoint.h); the file format itself is core/safetensors.
#include "checkpoint.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include <nlohmann/json.hpp>

#include "../../core/runtime.h"
#include "../../core/safetensors.h"
#include "architecture.h"
#include "model.h"
#include "topology.h"

namespace ember {

using json = nlohmann::json;

namespace {
[[noreturn]] void bad(const std::string& path, const std::string& why) { detail::bad_checkpoint(path, why); }

// Metadata `key` as an integer in [lo, hi] (absent: 0). Anything else is the file's fault.
int64_t parse_int(const std::map<std::string, std::string>& m, const std::string& key, const std::string& path,
                  int64_t lo, int64_t hi) {
  const auto it = m.find(key);
  if (it == m.end()) return 0;
  const std::string& text = it->second;
  try {
    size_t used = 0;
    const long long v = std::stoll(text, &used);
    if (used != text.size() || text.empty() || std::isspace(static_cast<unsigned char>(text[0])))
      throw std::invalid_argument(key);
    if (v < lo || v > hi)
      bad(path,
          "metadata '" + key + "' is " + text + ", outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return v;
  } catch (const std::invalid_argument&) {
    bad(path, "metadata '" + key + "' is not an integer: '" + text + "'");
  } catch (const std::out_of_range&) {
    bad(path, "metadata '" + key + "' is out of range: '" + text + "'");
  }
}

// The seed: an unsigned 64-bit decimal (a "-1" would wrap).
uint64_t parse_seed(const std::map<std::string, std::string>& m, const std::string& path, const std::string& key) {
  const auto it = m.find(key);
  if (it == m.end()) return 0;
  const std::string& text = it->second;
  if (text.empty() || text.size() > 20 || text.find_first_not_of("0123456789") != std::string::npos)
    bad(path, "metadata '" + key + "' is not an unsigned integer: '" + text + "'");
  try {
    return std::stoull(text);
  } catch (const std::exception&) {
    bad(path, "metadata '" + key + "' is out of range: '" + text + "'");
  }
}
}  // namespace

namespace detail {
void check_optimizer_state(const Optimizer& opt, const SavedOptimizerState& saved) {
  const auto kept = opt.state();
  for (const auto& [name, t] : kept) {
    const bool present =
        std::any_of(saved.tensors.begin(), saved.tensors.end(), [&](const auto& s) { return s.first == name; });
    // Moments without their tensors would resume from zeros: a different run, silently.
    if (!present && saved.iterations > 0)
      bad(saved.path, "has " + std::to_string(saved.iterations) + " " + opt.name() +
                          " iterations but no optimizer state '" + name + "'");
  }
  for (const auto& [name, t] : saved.tensors)
    if (std::none_of(kept.begin(), kept.end(), [&](const auto& k) { return k.first == name; }))
      bad(saved.path, "holds 'optimizer/" + name + "', which " + opt.name() + " does not keep");
}

void keep_optimizer_state(Model& model, std::optional<SavedOptimizerState> saved) {
  model.saved_optimizer_ = std::move(saved);
}

namespace {
// `saved` into `opt`, checked already (check_optimizer_state).
void apply_optimizer_state(Optimizer& opt, const SavedOptimizerState& saved, Device device) {
  for (const auto& [name, t] : saved.tensors)  // the state lives where the parameters do
    opt.set_state(name, device.is_cpu() ? t : t.to(device));
  opt.set_iterations(saved.iterations);
}
}  // namespace

void restore_optimizer_state(Optimizer& opt, const SavedOptimizerState& saved, Device device) {
  check_optimizer_state(opt, saved);
  apply_optimizer_state(opt, saved, device);
}
}  // namespace detail

void save_checkpoint(const Model& model, const std::string& path, const TrainingState& state) {
  EMBER_CHECK(model.built(), Error, "save: build the model first");
  EMBER_CHECK(state.epochs_done >= 0 && state.batches_done >= 0 && state.batch_size >= 0, ArgumentError,
              "save " + path + ": TrainingState's epochs_done, batches_done and batch_size must be >= 0");
  EMBER_CHECK(state.batches_done == 0 || state.batch_size > 0, ArgumentError,
              "save " + path + ": TrainingState::batches_done is " + std::to_string(state.batches_done) +
                  " but batch_size is not set: a mid-epoch state resumes only in the batches it counted (set "
                  ".batch_size)");
  SafeTensors st;
  const auto host = [](const Tensor& t) { return t.device().is_cpu() ? t : t.to(Device::cpu()); };
  for (const auto& [name, t] : model.named_params()) st.tensors.emplace_back(name, host(t));
  for (const auto& [name, t] : model.named_state()) st.tensors.emplace_back(name, host(t));
  json opt = nullptr;
  if (const Optimizer* o = model.optimizer(); o && state.with_optimizer) {
    opt = {{"name", o->name()}, {"iterations", o->iterations()}};
    for (const auto& [k, v] : o->hyperparameters()) opt[k] = v;
    for (const auto& [name, t] : o->state())  // without the flat buffers' padding: one value per parameter
      if (t.defined()) st.tensors.emplace_back("optimizer/" + name, model.pack_params_layout(host(t)));
  }
  st.metadata = state.extra;
  for (const char* written_if_any : {"batches_done", "weight_decay_switches"})  // never a caller's extra
    st.metadata.erase(written_if_any);
  st.metadata["format"] = "ember";
  st.metadata["ember_version"] = ember::version();
  st.metadata["architecture"] = detail::architecture_text(model);
  st.metadata["optimizer"] = opt.dump();
  st.metadata["epochs_done"] = std::to_string(state.epochs_done);
  if (state.batches_done > 0) st.metadata["batches_done"] = std::to_string(state.batches_done);
  st.metadata["seed"] = std::to_string(state.seed);
  st.metadata["random_seed"] = std::to_string(model.random_seed());  // Dropout's masks
  st.metadata["batch_size"] = std::to_string(state.batch_size);
  if (!model.weight_decay_switches().empty()) {
    json switches = json::array();
    for (const auto& [name, on] : model.weight_decay_switches()) switches.push_back({name, on});
    st.metadata["weight_decay_switches"] = switches.dump();
  }
  write_safetensors(path, st);
}

namespace {
// The model's parameters and state (moving statistics, counters) as named views, each checked
// against the file's tensor of that name; a tensor of the file the model lacks is refused too.
std::vector<std::pair<std::string, Tensor>> checked_tensors(const Model& model,
                                                            const std::map<std::string, Tensor>& by_name,
                                                            const std::string& path) {
  auto params = model.named_params();
  for (auto& named : model.named_state()) params.push_back(std::move(named));
  for (const auto& [name, p] : params) {
    const auto it = by_name.find(name);
    if (it == by_name.end()) bad(path, "has no tensor '" + name + "' (was it saved from a different model?)");
    if (it->second.dtype() != DType::F32 || !(it->second.shape() == p.shape()))
      bad(path, "tensor '" + name + "' is " + it->second.str() + " but the model needs " + p.shape().str());
  }
  for (const auto& [name, t] : by_name)
    if (name.rfind("optimizer/", 0) != 0 &&
        std::none_of(params.begin(), params.end(), [&](const auto& p) { return p.first == name; }))
      bad(path, "holds tensor '" + name + "' that the model does not have (different architecture?)");
  return params;
}

// The saved optimizer state, checked as far as it can be without an optimizer, its tensors in
// params()' layout; `named`: the file names an optimizer.
struct FileOptimizer {
  SavedOptimizerState saved;
  bool named = false;
};
FileOptimizer read_optimizer_state(const std::map<std::string, std::string>& metadata,
                                   const std::map<std::string, Tensor>& by_name, const Model& model,
                                   const std::string& path) {
  json saved_opt = nullptr;
  if (const auto it = metadata.find("optimizer"); it != metadata.end())
    saved_opt = detail::parse_metadata(it->second, path, "optimizer");
  if (!saved_opt.is_null() && !saved_opt.is_object()) bad(path, "metadata 'optimizer' is not a JSON object");
  const json* saved_name = saved_opt.is_object() && saved_opt.contains("name") ? &saved_opt["name"] : nullptr;
  if (saved_name && !saved_name->is_string()) bad(path, "metadata 'optimizer' has a non-string name");
  FileOptimizer file{.saved = {}, .named = saved_name != nullptr};
  SavedOptimizerState& saved = file.saved;
  saved.path = path;
  if (saved_name) {
    saved.name = saved_name->get<std::string>();
    if (saved_opt.contains("iterations")) {
      const json& it = saved_opt["iterations"];
      if (!it.is_number_integer() || it.get<int64_t>() < 0)
        bad(path, "metadata 'optimizer': 'iterations' must be a non-negative integer, got " + it.dump());
      saved.iterations = it.get<int64_t>();
    }
  }
  for (const auto& [name, t] : by_name) {
    if (name.rfind("optimizer/", 0) != 0) continue;
    if (t.numel() != model.num_params() || t.dtype() != DType::F32)
      bad(path, "optimizer state '" + name + "' has " + std::to_string(t.numel()) + " values for " +
                    std::to_string(model.num_params()) + " parameters");
    saved.tensors.emplace_back(name.substr(10), model.unpack_params_layout(t));  // into params()' layout
  }
  return file;
}

// State values a layer could not use: a moving statistic that is not finite, a step counter
// that is not an integer [lo, hi] below 2^24 (layers/random_bits.h).
void check_state_values(const Model& model, const std::map<std::string, Tensor>& by_name, const std::string& path) {
  for (const auto& l : model.layers())
    for (const auto& spec : l->state_specs()) {
      const std::string name = l->name() + "/" + spec.name;
      for (float v : by_name.at(name).to_vector()) {
        const bool ok =
            spec.averaged ? std::isfinite(v) : std::isfinite(v) && v >= 0.0f && v < 16777216.0f && v == std::floor(v);
        if (!ok)
          bad(path, "state '" + name + "' holds " + std::to_string(v) +
                        (spec.averaged ? ", not a finite number" : ", not a step count (an integer in [0, 2^24))"));
      }
    }
}

// Model::set_weight_decay's switches, in call order: [["dense_1/bias", true], ...].
std::vector<std::pair<std::string, bool>> read_decay_switches(const std::map<std::string, std::string>& metadata,
                                                              const Model& model, const std::string& path) {
  std::vector<std::pair<std::string, bool>> switches;
  const auto w = metadata.find("weight_decay_switches");
  if (w == metadata.end()) return switches;
  const json list = detail::parse_metadata(w->second, path, "weight_decay_switches");
  if (!list.is_array()) bad(path, "metadata 'weight_decay_switches' is not a list");
  const auto names = model.named_params();
  for (const json& e : list) {
    if (!e.is_array() || e.size() != 2 || !e[0].is_string() || !e[1].is_boolean())
      bad(path, "metadata 'weight_decay_switches' holds " + e.dump() + ", not a [parameter name, true/false] pair");
    const std::string name = e[0].get<std::string>();
    if (std::none_of(names.begin(), names.end(), [&](const auto& p) { return p.first == name; }))
      bad(path, "metadata 'weight_decay_switches' names '" + name + "', which is not a parameter of the model");
    switches.emplace_back(name, e[1].get<bool>());
  }
  return switches;
}

// load_checkpoint on a file read already (load_model reads it once for both). Everything is
// checked before the model changes.
TrainingState load_from(Model& model, SafeTensors st, const std::string& path) {
  EMBER_CHECK(model.built(), Error, "load: build the model (same architecture as the checkpoint) first");
  detail::compare_architecture(st.metadata, model, path);
  const std::map<std::string, Tensor> by_name(st.tensors.begin(), st.tensors.end());
  auto params = checked_tensors(model, by_name, path);
  // The optimizer state: restored now into a compiled model's optimizer of that name, or kept for
  // compile().
  Optimizer* opt = model.optimizer();
  FileOptimizer file = read_optimizer_state(st.metadata, by_name, model, path);
  SavedOptimizerState& saved = file.saved;
  const bool restore_now = opt && file.named && saved.name == opt->name();
  if (restore_now) detail::check_optimizer_state(*opt, saved);
  TrainingState state;
  state.with_optimizer = file.named;
  state.epochs_done = static_cast<int>(parse_int(st.metadata, "epochs_done", path, 0, 1 << 30));
  state.seed = parse_seed(st.metadata, path, "seed");
  const bool has_random_seed = st.metadata.count("random_seed") > 0;
  const uint64_t random_seed = parse_seed(st.metadata, path, "random_seed");
  check_state_values(model, by_name, path);
  state.batch_size = parse_int(st.metadata, "batch_size", path, 0, int64_t{1} << 40);
  state.batches_done = parse_int(st.metadata, "batches_done", path, 0, int64_t{1} << 40);
  if (state.batches_done > 0 && state.batch_size <= 0)
    bad(path, "metadata 'batches_done' is " + std::to_string(state.batches_done) + " without a batch size");
  const auto switches = read_decay_switches(st.metadata, model, path);

  // Everything checked: now change the model.
  for (auto& [name, p] : params) p.copy_from(by_name.at(name));
  if (has_random_seed) model.set_random_seed(random_seed);
  if (model.weight_decay_switches().empty())  // a model that set its own keeps them
    for (const auto& [name, on] : switches) model.set_weight_decay(name, on);
  if (restore_now) {
    detail::apply_optimizer_state(*opt, saved, model.device());  // checked above
  } else if (!opt && file.named) {
    detail::keep_optimizer_state(model, std::move(saved));  // for compile()
  } else if (!file.named) {
    detail::keep_optimizer_state(model, std::nullopt);  // an earlier load's state belongs to other weights
  }
  for (const auto& [k, v] : st.metadata)
    if (k != "format" && k != "ember_version" && k != "architecture" && k != "optimizer" && k != "epochs_done" &&
        k != "batches_done" && k != "seed" && k != "random_seed" && k != "batch_size" && k != "weight_decay_switches")
      state.extra[k] = v;
  return state;
}
}  // namespace

void Model::save(const std::string& path, const TrainingState& state) const {
  const Claim claim(*this, "save");
  if (built()) topo_->sync_trainable();  // the flags the file keeps: each shared layer's user object's
  save_checkpoint(*this, path, state);
}

TrainingState Model::load(const std::string& path) {
  const Claim claim(*this, "load");
  return load_checkpoint(*this, path);
}

TrainingState load_checkpoint(Model& model, const std::string& path) {
  return load_from(model, read_safetensors(path), path);
}

std::unique_ptr<Model> load_model(const std::string& path, TrainingState* state) {
  SafeTensors st = read_safetensors(path);  // read once: rebuilt from, then loaded
  std::unique_ptr<Model> model = detail::model_from_architecture(st, path);
  TrainingState loaded = load_from(*model, std::move(st), path);
  if (state) *state = std::move(loaded);
  return model;
}

}  // namespace ember
