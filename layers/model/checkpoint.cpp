// The model-level checkpoint (see checkpoint.h); the file format itself is core/safetensors.
#include "checkpoint.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include <nlohmann/json.hpp>

#include "../../core/runtime.h"
#include "model.h"
#include "registry.h"
#include "sequential.h"

namespace ember {

using json = nlohmann::json;

namespace {
[[noreturn]] void bad(const std::string& path, const std::string& why) {
  throw CheckpointError("checkpoint " + path + ": " + why);
}

// Metadata JSON from a file, nesting at most 32 deep (refused while parsing: json's dump() and
// comparisons recurse, and a crafted 5M-deep array parses but would overflow the stack there).
json parse_metadata(const std::string& text, const std::string& path, const std::string& key) {
  try {
    return json::parse(text, [&](int depth, json::parse_event_t, json&) {
      if (depth > 32) bad(path, "metadata '" + key + "' nests deeper than 32 levels");
      return true;
    });
  } catch (const json::exception&) {
    bad(path, "metadata '" + key + "' is not valid JSON");
  }
}

// What layer i is called on, by name (the model's inputs by theirs).
json inbound_names(const Model& model, size_t i) {
  json inbound = json::array();
  for (int from : model.layer_inputs(i))
    inbound.push_back(from < 0 ? model.input_names()[static_cast<size_t>(-1 - from)]
                               : model.layer_ref(static_cast<size_t>(from)));
  return inbound;
}

// Every input's name and per-sample shape, in order.
json inputs_json(const Model& model) {
  json inputs = json::array();
  for (size_t k = 0; k < model.num_inputs(); ++k) {
    const Shape& s = model.input_shapes()[k];
    inputs.push_back({{"name", model.input_names()[k]}, {"shape", std::vector<int64_t>(s.begin(), s.end())}});
  }
  return inputs;
}

json config_json(const Layer& l) {
  json c = json::object();
  for (const auto& [k, v] : l.config()) c[k] = v;
  return c;
}

// Version 2: each layer's configuration and inbound layers, so that load_model can
// recreate the model and load() can name the first difference. Version 1 (Ember 0.3.0 and before):
// names, types and parameter shapes only.
json architecture(const Model& model) {
  json layers = json::array();
  for (size_t i = 0; i < model.layers().size(); ++i) {
    const Layer& l = *model.layers()[i];
    // A later call of a shared layer (the same name again) lists no tensors: they are its first's.
    json params = json::array();
    json state = json::array();
    if (!model.is_twin(i)) {
      for (const auto& spec : l.param_specs())
        params.push_back({{"name", spec.name}, {"shape", std::vector<int64_t>(spec.shape.begin(), spec.shape.end())}});
      for (const auto& spec : l.state_specs())
        state.push_back({{"name", spec.name}, {"shape", std::vector<int64_t>(spec.shape.begin(), spec.shape.end())}});
    }
    json entry = {{"name", l.name()}, {"type", l.type()}, {"params", params}};
    if (!state.empty()) entry["state"] = state;
    entry["config"] = config_json(l);
    entry["inbound"] = inbound_names(model, i);
    layers.push_back(entry);
  }
  const Shape& in = model.input_shape();
  return {{"version", 2},
          {"model", model.is_graph() ? "Functional" : "Sequential"},
          {"name", model.name()},
          {"input_name", model.input_name()},  // input 0's (what files before several inputs hold)
          {"input_shape", std::vector<int64_t>(in.begin(), in.end())},
          {"inputs", inputs_json(model)},
          {"outputs", model.output_names()},
          {"layers", layers}};
}

// The file's architecture (any version) against `model`: the first difference in layer count,
// name, type, configuration or inbound layers (what a version holds), named; nothing for a file
// without one.
void compare_architecture(const std::map<std::string, std::string>& metadata, const Model& model,
                          const std::string& path) {
  const auto it = metadata.find("architecture");
  if (it == metadata.end()) return;
  const json a = parse_metadata(it->second, path, "architecture");
  if (!a.is_object() || !a.contains("layers") || !a["layers"].is_array())
    bad(path, "metadata 'architecture' has no list of layers");
  const json& stored = a["layers"];
  const auto& layers = model.layers();
  if (stored.size() != layers.size())
    bad(path, "holds a model of " + std::to_string(stored.size()) + " layers; this one has " +
                  std::to_string(layers.size()) + " (a different architecture)");
  const auto text = [](const json& j, const char* key) {
    return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string("?");
  };
  for (size_t i = 0; i < layers.size(); ++i) {
    const json& e = stored[i];
    const Layer& l = *layers[i];
    const std::string here = "'" + l.name() + "' (" + l.type() + ")";
    if (text(e, "name") != l.name() || text(e, "type") != l.type())
      bad(path, "layer " + std::to_string(i) + " is '" + text(e, "name") + "' (" + text(e, "type") +
                    ") in the file but " + here + " in this model (a different architecture)");
    if (e.contains("config") && e["config"] != config_json(l)) {
      const json mine = config_json(l);
      std::string what;
      for (const auto& [k, v] : e["config"].items())
        if (!mine.contains(k) || mine[k] != v) {
          what = "'" + k + "' is " + v.dump() + " in the file but " + (mine.contains(k) ? mine[k].dump() : "absent") +
                 " here";
          break;
        }
      if (what.empty())
        what = "its configuration differs (" + e["config"].dump() + " in the file, " + mine.dump() + " here)";
      bad(path, "layer " + here + ": " + what);
    }
    if (e.contains("inbound") && e["inbound"] != inbound_names(model, i))
      bad(path, "layer " + here + " is called on " + e["inbound"].dump() + " in the file but on " +
                    inbound_names(model, i).dump() + " in this model");
  }
  // Then what the layers alone do not say: the inputs' names and shapes, which layers are outputs.
  if (a.contains("inputs") && a["inputs"] != inputs_json(model))
    bad(path, "holds a model of inputs " + a["inputs"].dump() + "; this one's are " + inputs_json(model).dump() +
                  " (a different architecture)");
  if (a.contains("outputs") && a["outputs"] != json(model.output_names()))
    bad(path, "holds a model of outputs " + a["outputs"].dump() + "; this one's are " +
                  json(model.output_names()).dump() + " (a different architecture)");
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
    for (const auto& [name, t] : o->state())  // without the flat buffers' padding: one value per parameter
      if (t.defined()) st.tensors.emplace_back("optimizer/" + name, model.pack_params_layout(host(t)));
  }
  st.metadata = state.extra;
  for (const char* written_if_any : {"batches_done", "weight_decay_switches"})  // never a caller's extra
    st.metadata.erase(written_if_any);
  st.metadata["format"] = "ember";
  st.metadata["ember_version"] = ember::version();
  st.metadata["architecture"] = architecture(model).dump();
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
// load_checkpoint on a file read already (load_model reads it once for both).
TrainingState load_from(Model& model, SafeTensors st, const std::string& path) {
  EMBER_CHECK(model.built(), Error, "load: build the model (same architecture as the checkpoint) first");
  compare_architecture(st.metadata, model, path);
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
    saved_opt = parse_metadata(st.metadata["optimizer"], path, "optimizer");
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
    saved.tensors.emplace_back(name.substr(10), model.unpack_params_layout(t));  // into params()' layout
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
  // Model::set_weight_decay's switches, in call order: [["dense_1/bias", true], ...].
  std::vector<std::pair<std::string, bool>> switches;
  if (const auto w = st.metadata.find("weight_decay_switches"); w != st.metadata.end()) {
    const json list = parse_metadata(w->second, path, "weight_decay_switches");
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
  }

  // Everything checked: now change the model.
  for (auto& [name, p] : params) p.copy_from(by_name.at(name));
  if (has_random_seed) model.set_random_seed(random_seed);
  if (model.weight_decay_switches().empty())  // a model that set its own keeps them
    for (const auto& [name, on] : switches) model.set_weight_decay(name, on);
  if (restore_now) {
    detail::apply_optimizer_state(*opt, saved, model.device());  // checked above
  } else if (!opt && saved_name) {
    detail::keep_optimizer_state(model, std::move(saved));  // for compile()
  }
  for (const auto& [k, v] : st.metadata)
    if (k != "format" && k != "ember_version" && k != "architecture" && k != "optimizer" && k != "epochs_done" &&
        k != "batches_done" && k != "seed" && k != "random_seed" && k != "batch_size" && k != "weight_decay_switches")
      state.extra[k] = v;
  return state;
}

}  // namespace

TrainingState load_checkpoint(Model& model, const std::string& path) {
  return load_from(model, read_safetensors(path), path);
}

std::unique_ptr<Model> load_model(const std::string& path, TrainingState* state) {
  SafeTensors st = read_safetensors(path);
  const auto it = st.metadata.find("architecture");
  if (it == st.metadata.end()) bad(path, "holds no architecture: build the model in code and load() the file");
  const json a = parse_metadata(it->second, path, "architecture");
  if (!a.is_object() || !a.contains("version") || !a["version"].is_number_integer() || a["version"].get<int>() < 2)
    bad(path,
        "was written before checkpoints held layer configurations (Ember 0.3.0 and older): build the model in code "
        "and load() the file into it");
  const auto field = [&](const json& j, const char* key, const std::string& where) -> const json& {
    if (!j.is_object() || !j.contains(key)) bad(path, "architecture: " + where + " has no '" + key + "'");
    return j[key];
  };
  const json& layers = field(a, "layers", "the model");
  const json& shape = field(a, "input_shape", "the model");
  if (!layers.is_array() || layers.empty()) bad(path, "architecture: no layers");
  std::vector<int64_t> dims;
  try {
    dims = shape.get<std::vector<int64_t>>();
  } catch (const json::exception&) {
    bad(path, "architecture: 'input_shape' is not a list of integers");
  }
  const json& kind_json = field(a, "model", "the model");
  const std::string kind = kind_json.is_string() ? kind_json.get<std::string>() : "";
  const std::string input_name =
      a.contains("input_name") && a["input_name"].is_string() ? a["input_name"].get<std::string>() : "input_1";
  // Every parameter and state tensor a recreated layer declares must be in the file with its shape,
  // checked before the model allocates anything: a crafted configuration (a Dense of 2^40 units)
  // is refused here, not after a huge allocation.
  std::map<std::string, const Tensor*> in_file;
  for (const auto& [name, t] : st.tensors) in_file[name] = &t;
  const auto check_specs = [&](const Layer& l) {
    const auto check = [&](const std::string& what, const Shape& want) {
      const std::string name = l.name() + "/" + what;
      const auto t = in_file.find(name);
      if (t == in_file.end())
        bad(path, "architecture: layer '" + l.name() + "' needs a tensor '" + name + "' the file has not");
      if (!(t->second->shape() == want))
        bad(path, "architecture: layer '" + l.name() + "' needs '" + name + "' of " + want.str() + "; the file's is " +
                      t->second->shape().str());
    };
    for (const auto& spec : l.param_specs()) check(spec.name, spec.shape);
    for (const auto& spec : l.state_specs()) check(spec.name, spec.shape);
  };
  std::unique_ptr<Model> model;
  try {
    const auto make = [&](const json& e, size_t i) {
      const std::string where = "layer " + std::to_string(i);
      const json& type = field(e, "type", where);
      const json& name = field(e, "name", where);
      const json& config = field(e, "config", where);
      if (!type.is_string() || !name.is_string() || !config.is_object())
        bad(path, "architecture: " + where + " has a malformed type, name or config");
      LayerConfig c;
      for (const auto& [k, v] : config.items()) {
        if (!v.is_string()) bad(path, "architecture: " + where + ": config '" + k + "' is not text");
        c[k] = v.get<std::string>();
      }
      std::shared_ptr<Layer> l = make_layer(type.get<std::string>(), c);
      l->set_name(name.get<std::string>());
      return l;
    };
    if (kind == "Sequential") {
      auto seq = std::make_unique<Sequential>();
      Shape s(dims);
      for (size_t i = 0; i < layers.size(); ++i) {
        std::shared_ptr<Layer> l = make(layers[i], i);
        s = l->build(s);  // the shapes build() will find, checked first
        check_specs(*l);
        seq->add(std::move(l));
      }
      seq->build(Shape(dims));
      model = std::move(seq);
    } else if (kind == "Functional") {
      // A name seen before is a later call of that layer (a shared layer): called again, its
      // output known as "name[k]" (Model::layer_ref).
      std::map<std::string, std::shared_ptr<Layer>> objects;
      std::map<std::string, int> calls;
      // The inputs: the list (files since several inputs), else the one input's name and shape.
      std::vector<SymbolicTensor> model_inputs;
      std::map<std::string, SymbolicTensor> tensors;
      if (a.contains("inputs")) {
        const json& list = a["inputs"];
        if (!list.is_array() || list.empty()) bad(path, "architecture: 'inputs' is not a list of inputs");
        for (size_t k = 0; k < list.size(); ++k) {
          const std::string where = "input " + std::to_string(k);
          const json& n = field(list[k], "name", where);
          const json& sh = field(list[k], "shape", where);
          std::vector<int64_t> d;
          try {
            d = sh.get<std::vector<int64_t>>();
          } catch (const json::exception&) {
            bad(path, "architecture: " + where + "'s shape is not a list of integers");
          }
          if (!n.is_string() || n.get<std::string>().empty()) bad(path, "architecture: " + where + " has no name");
          model_inputs.push_back(Input(Shape(d), n.get<std::string>()));
          if (!tensors.emplace(n.get<std::string>(), model_inputs.back()).second)
            bad(path, "architecture: two inputs are named " + n.dump());
        }
      } else {
        model_inputs.push_back(Input(Shape(dims), input_name));
        tensors.emplace(input_name, model_inputs.back());
      }
      SymbolicTensor last;
      for (size_t i = 0; i < layers.size(); ++i) {
        std::shared_ptr<Layer> l = make(layers[i], i);
        const int call = calls[l->name()]++;
        if (call > 0) {
          std::shared_ptr<Layer>& first = objects.at(l->name());
          if (first->type() != l->type())
            bad(path, "architecture: layer " + std::to_string(i) + " is a " + l->type() + " named '" + l->name() +
                          "' like an earlier " + first->type());
          l = first;
        } else {
          objects[l->name()] = l;
        }
        std::vector<SymbolicTensor> inputs;
        const json& inbound = field(layers[i], "inbound", "layer " + std::to_string(i));
        if (!inbound.is_array() || inbound.empty())
          bad(path, "architecture: layer '" + l->name() + "' has no inbound list");
        for (const json& from : inbound) {
          const auto t = from.is_string() ? tensors.find(from.get<std::string>()) : tensors.end();
          if (t == tensors.end())
            bad(path,
                "architecture: layer '" + l->name() + "' is called on " + from.dump() + ", which no earlier layer is");
          inputs.push_back(t->second);
        }
        last = call_layer(l, inputs);
        if (call == 0) check_specs(*l);
        const std::string ref = call == 0 ? l->name() : l->name() + "[" + std::to_string(call) + "]";
        if (!tensors.emplace(ref, last).second) bad(path, "architecture: two layers are named '" + ref + "'");
      }
      const std::string name = a.contains("name") && a["name"].is_string() ? a["name"].get<std::string>() : "model";
      // The outputs: the list (files since several outputs), else the last layer's.
      std::vector<SymbolicTensor> model_outputs;
      if (a.contains("outputs")) {
        const json& list = a["outputs"];
        if (!list.is_array() || list.empty()) bad(path, "architecture: 'outputs' is not a list of layer names");
        for (const json& o : list) {
          const auto t = o.is_string() ? tensors.find(o.get<std::string>()) : tensors.end();
          if (t == tensors.end()) bad(path, "architecture: output " + o.dump() + " is no layer of the model");
          model_outputs.push_back(t->second);
        }
      } else {
        model_outputs.push_back(last);
      }
      model = std::make_unique<Model>(model_inputs, model_outputs, name);
      model->build();
    } else {
      bad(path, "architecture: model kind '" + kind + "' (Sequential or Functional)");
    }
  } catch (const CheckpointError&) {
    throw;
  } catch (const Error& e) {  // a factory's, a shape's or the graph's refusal: the file's fault
    bad(path, std::string("architecture: ") + e.what());
  }
  TrainingState loaded = load_from(*model, std::move(st), path);
  if (state) *state = std::move(loaded);
  return model;
}

}  // namespace ember
