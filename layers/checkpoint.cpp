// The model-level checkpoint (see checkpoint.h); the file format itself is core/safetensors.
#include "checkpoint.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include <nlohmann/json.hpp>

#include "../core/runtime.h"
#include "model/model.h"

namespace ember {

using json = nlohmann::json;

namespace {
[[noreturn]] void bad(const std::string& path, const std::string& why) {
  throw CheckpointError("checkpoint " + path + ": " + why);
}

json architecture(const Model& model) {
  json layers = json::array();
  for (size_t i = 0; i < model.layers().size(); ++i) {
    const Layer& l = *model.layers()[i];
    json params = json::array();
    for (const auto& spec : l.param_specs())
      params.push_back({{"name", spec.name}, {"shape", std::vector<int64_t>(spec.shape.begin(), spec.shape.end())}});
    json state = json::array();
    for (const auto& spec : l.state_specs())
      state.push_back({{"name", spec.name}, {"shape", std::vector<int64_t>(spec.shape.begin(), spec.shape.end())}});
    json entry = {{"name", l.name()}, {"type", l.type()}, {"params", params}};
    if (!state.empty()) entry["state"] = state;
    if (model.is_graph()) {  // what the layer is called on (a stack's: the layer before it)
      json inbound = json::array();
      for (int from : model.layer_inputs(i))
        inbound.push_back(from < 0 ? model.input_name() : model.layers()[static_cast<size_t>(from)]->name());
      entry["inbound"] = inbound;
    }
    layers.push_back(entry);
  }
  const Shape& in = model.input_shape();
  return {{"model", model.is_graph() ? "Functional" : "Sequential"},
          {"name", model.name()},
          {"input_shape", std::vector<int64_t>(in.begin(), in.end())},
          {"layers", layers}};
}

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

void keep_optimizer_state(Model& model, SavedOptimizerState saved) { model.saved_optimizer_ = std::move(saved); }

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
  SafeTensors st;
  const auto host = [](const Tensor& t) { return t.device().is_cpu() ? t : t.to(Device::cpu()); };
  for (const auto& [name, t] : model.named_params()) st.tensors.emplace_back(name, host(t));
  for (const auto& [name, t] : model.named_state()) st.tensors.emplace_back(name, host(t));
  json opt = nullptr;
  if (const Optimizer* o = model.optimizer()) {
    opt = {{"name", o->name()}, {"iterations", o->iterations()}};
    for (const auto& [k, v] : o->hyperparameters()) opt[k] = v;
    for (const auto& [name, t] : o->state())
      if (t.defined()) st.tensors.emplace_back("optimizer/" + name, host(t));
  }
  st.metadata = state.extra;
  st.metadata["format"] = "ember";
  st.metadata["ember_version"] = ember::version();
  st.metadata["architecture"] = architecture(model).dump();
  st.metadata["optimizer"] = opt.dump();
  st.metadata["epochs_done"] = std::to_string(state.epochs_done);
  if (state.batches_done > 0) st.metadata["batches_done"] = std::to_string(state.batches_done);
  st.metadata["seed"] = std::to_string(state.seed);
  st.metadata["random_seed"] = std::to_string(model.random_seed());  // Dropout's masks
  st.metadata["batch_size"] = std::to_string(state.batch_size);
  write_safetensors(path, st);
}

TrainingState load_checkpoint(Model& model, const std::string& path) {
  EMBER_CHECK(model.built(), Error, "load: build the model (same architecture as the checkpoint) first");
  SafeTensors st = read_safetensors(path);
  std::map<std::string, Tensor> by_name(st.tensors.begin(), st.tensors.end());
  // Validate everything before touching the model. The state (moving statistics, counters)
  // is checked and restored like the parameters.
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
  Optimizer* opt = model.optimizer();
  json saved_opt = nullptr;
  if (st.metadata.count("optimizer")) {
    try {
      saved_opt = json::parse(st.metadata["optimizer"]);
    } catch (const json::exception&) {
      bad(path, "metadata 'optimizer' is not valid JSON");
    }
  }
  if (!saved_opt.is_null() && !saved_opt.is_object()) bad(path, "metadata 'optimizer' is not a JSON object");
  const json* saved_name = saved_opt.is_object() && saved_opt.contains("name") ? &saved_opt["name"] : nullptr;
  if (saved_name && !saved_name->is_string()) bad(path, "metadata 'optimizer' has a non-string name");
  // The saved optimizer state, checked as far as it can be without an optimizer; restored now
  // into a compiled model's optimizer of that name, or kept for compile().
  SavedOptimizerState saved;
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
    saved.tensors.emplace_back(name.substr(10), t);
  }
  const bool restore_now = opt && saved_name && saved.name == opt->name();
  if (restore_now) detail::check_optimizer_state(*opt, saved);
  TrainingState state;
  state.epochs_done = static_cast<int>(parse_int(st.metadata, "epochs_done", path, 0, 1 << 30));
  state.seed = parse_seed(st.metadata, path, "seed");
  const bool has_random_seed = st.metadata.count("random_seed") > 0;
  const uint64_t random_seed = parse_seed(st.metadata, path, "random_seed");
  // State values a layer could not use: a moving statistic that is not finite, a step counter
  // that is not an integer [lo, hi] below 2^24 (layers/random_bits.h).
  for (const auto& l : model.layers()) {
    const auto specs = l->state_specs();
    for (const auto& spec : specs) {
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
  state.batch_size = parse_int(st.metadata, "batch_size", path, 0, int64_t{1} << 40);
  state.batches_done = parse_int(st.metadata, "batches_done", path, 0, int64_t{1} << 40);
  if (state.batches_done > 0 && state.batch_size <= 0)
    bad(path, "metadata 'batches_done' is " + std::to_string(state.batches_done) + " without a batch size");

  // Everything checked: now change the model.
  for (auto& [name, p] : params) p.copy_from(by_name.at(name));
  if (has_random_seed) model.set_random_seed(random_seed);
  if (restore_now) {
    detail::apply_optimizer_state(*opt, saved, model.device());  // checked above
  } else if (!opt && saved_name) {
    detail::keep_optimizer_state(model, std::move(saved));  // for compile()
  }
  for (const auto& [k, v] : st.metadata)
    if (k != "format" && k != "ember_version" && k != "architecture" && k != "optimizer" && k != "epochs_done" &&
        k != "batches_done" && k != "seed" && k != "random_seed" && k != "batch_size")
      state.extra[k] = v;
  return state;
}

}  // namespace ember
