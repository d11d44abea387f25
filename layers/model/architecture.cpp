// A model's architecture in a checkpoint (see architecture.h).
#include "architecture.h"

#include <nlohmann/json.hpp>

#include "model.h"
#include "registry.h"
#include "sequential.h"

namespace ember::detail {

using json = nlohmann::json;

void bad_checkpoint(const std::string& path, const std::string& why) {
  throw CheckpointError("checkpoint " + path + ": " + why);
}

// Metadata JSON from a file, nesting at most 32 deep (refused while parsing: json's dump() and
// comparisons recurse, and a crafted 5M-deep array parses but would overflow the stack there).
json parse_metadata(const std::string& text, const std::string& path, const std::string& key) {
  try {
    return json::parse(text, [&](int depth, json::parse_event_t, json&) {
      if (depth > 32) bad_checkpoint(path, "metadata '" + key + "' nests deeper than 32 levels");
      return true;
    });
  } catch (const json::exception&) {
    bad_checkpoint(path, "metadata '" + key + "' is not valid JSON");
  }
}

namespace {
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
json architecture_json(const Model& model) {
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
    if (!model.is_twin(i) && !l.trainable()) entry["trainable"] = false;  // frozen (absent: trains)
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

}  // namespace

std::string architecture_text(const Model& model) { return architecture_json(model).dump(); }

void compare_architecture(const std::map<std::string, std::string>& metadata, const Model& model,
                          const std::string& path) {
  const auto it = metadata.find("architecture");
  if (it == metadata.end()) return;
  const json a = parse_metadata(it->second, path, "architecture");
  if (!a.is_object() || !a.contains("layers") || !a["layers"].is_array())
    bad_checkpoint(path, "metadata 'architecture' has no list of layers");
  const json& stored = a["layers"];
  const auto& layers = model.layers();
  if (stored.size() != layers.size())
    bad_checkpoint(path, "holds a model of " + std::to_string(stored.size()) + " layers; this one has " +
                             std::to_string(layers.size()) + " (a different architecture)");
  const auto text = [](const json& j, const char* key) {
    return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string("?");
  };
  for (size_t i = 0; i < layers.size(); ++i) {
    const json& e = stored[i];
    const Layer& l = *layers[i];
    const std::string here = "'" + l.name() + "' (" + l.type() + ")";
    if (text(e, "name") != l.name() || text(e, "type") != l.type())
      bad_checkpoint(path, "layer " + std::to_string(i) + " is '" + text(e, "name") + "' (" + text(e, "type") +
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
      bad_checkpoint(path, "layer " + here + ": " + what);
    }
    if (e.contains("inbound") && e["inbound"] != inbound_names(model, i))
      bad_checkpoint(path, "layer " + here + " is called on " + e["inbound"].dump() + " in the file but on " +
                               inbound_names(model, i).dump() + " in this model");
  }
  // Then what the layers alone do not say: the inputs' names and shapes, which layers are outputs.
  if (a.contains("inputs") && a["inputs"] != inputs_json(model))
    bad_checkpoint(path, "holds a model of inputs " + a["inputs"].dump() + "; this one's are " +
                             inputs_json(model).dump() + " (a different architecture)");
  if (a.contains("outputs") && a["outputs"] != json(model.output_names()))
    bad_checkpoint(path, "holds a model of outputs " + a["outputs"].dump() + "; this one's are " +
                             json(model.output_names()).dump() + " (a different architecture)");
}

namespace {
// Rebuilding a model from a checkpoint's architecture: the file `path`'s tensors (their shapes
// bound what a layer may declare) and the architecture's JSON `a`.
class Rebuild {
 public:
  Rebuild(const SafeTensors& st, const std::string& path, const json& a) : path_(path), a_(a) {
    for (const auto& [name, t] : st.tensors) in_file_[name] = &t;
  }

  std::unique_ptr<Model> model() {
    const json& layers = field(a_, "layers", "the model");
    const json& shape = field(a_, "input_shape", "the model");
    if (!layers.is_array() || layers.empty()) bad_checkpoint(path_, "architecture: no layers");
    const std::vector<int64_t> dims = int_list(shape, "'input_shape'");
    const json& kind_json = field(a_, "model", "the model");
    const std::string kind = kind_json.is_string() ? kind_json.get<std::string>() : "";
    try {
      if (kind == "Sequential") return sequential(layers, dims);
      if (kind == "Functional") return functional(layers, dims);
    } catch (const CheckpointError&) {
      throw;
    } catch (const Error& e) {  // a factory's, a shape's or the graph's refusal: the file's fault
      bad_checkpoint(path_, std::string("architecture: ") + e.what());
    }
    bad_checkpoint(path_, "architecture: model kind '" + kind + "' (Sequential or Functional)");
  }

 private:
  const json& field(const json& j, const char* key, const std::string& where) const {
    if (!j.is_object() || !j.contains(key)) bad_checkpoint(path_, "architecture: " + where + " has no '" + key + "'");
    return j[key];
  }
  std::vector<int64_t> int_list(const json& j, const std::string& what) const {
    try {
      return j.get<std::vector<int64_t>>();
    } catch (const json::exception&) {
      bad_checkpoint(path_, "architecture: " + what + " is not a list of integers");
    }
  }

  // Layer i's object from its type, name and configuration (the registry's factory).
  std::shared_ptr<Layer> make(const json& e, size_t i) const {
    const std::string where = "layer " + std::to_string(i);
    const json& type = field(e, "type", where);
    const json& name = field(e, "name", where);
    const json& config = field(e, "config", where);
    if (!type.is_string() || !name.is_string() || !config.is_object())
      bad_checkpoint(path_, "architecture: " + where + " has a malformed type, name or config");
    LayerConfig c;
    for (const auto& [k, v] : config.items()) {
      if (!v.is_string()) bad_checkpoint(path_, "architecture: " + where + ": config '" + k + "' is not text");
      c[k] = v.get<std::string>();
    }
    std::shared_ptr<Layer> l = make_layer(type.get<std::string>(), c);
    l->set_name(name.get<std::string>());
    if (e.contains("trainable")) {
      if (!e["trainable"].is_boolean())
        bad_checkpoint(path_, "architecture: " + where + "'s 'trainable' is not true/false");
      l->set_trainable(e["trainable"].get<bool>());
    }
    return l;
  }

  // Every parameter and state tensor a recreated layer declares must be in the file with its
  // shape, checked before the model allocates anything: a crafted configuration (a Dense of 2^40
  // units) is refused here, not after a huge allocation.
  void check_specs(const Layer& l) const {
    const auto check = [&](const std::string& what, const Shape& want) {
      const std::string name = l.name() + "/" + what;
      const auto t = in_file_.find(name);
      if (t == in_file_.end())
        bad_checkpoint(path_, "architecture: layer '" + l.name() + "' needs a tensor '" + name + "' the file has not");
      if (!(t->second->shape() == want))
        bad_checkpoint(path_, "architecture: layer '" + l.name() + "' needs '" + name + "' of " + want.str() +
                                  "; the file's is " + t->second->shape().str());
    };
    for (const auto& spec : l.param_specs()) check(spec.name, spec.shape);
    for (const auto& spec : l.state_specs()) check(spec.name, spec.shape);
  }

  std::unique_ptr<Model> sequential(const json& layers, const std::vector<int64_t>& dims) const {
    auto seq = a_.contains("name") && a_["name"].is_string()
                   ? std::make_unique<Sequential>(a_["name"].get<std::string>())
                   : std::make_unique<Sequential>();
    Shape s(dims);
    for (size_t i = 0; i < layers.size(); ++i) {
      std::shared_ptr<Layer> l = make(layers[i], i);
      s = l->build(s);  // the shapes build() will find, checked first
      check_specs(*l);
      seq->add(std::move(l));
    }
    seq->build(Shape(dims));
    return seq;
  }

  // The inputs: the list (files since several inputs), else the one input's name and shape.
  std::vector<SymbolicTensor> functional_inputs(const std::vector<int64_t>& dims) {
    std::vector<SymbolicTensor> inputs;
    if (!a_.contains("inputs")) {
      const std::string name =
          a_.contains("input_name") && a_["input_name"].is_string() ? a_["input_name"].get<std::string>() : "input_1";
      inputs.push_back(Input(Shape(dims), name));
      tensors_.emplace(name, inputs.back());
      return inputs;
    }
    const json& list = a_["inputs"];
    if (!list.is_array() || list.empty()) bad_checkpoint(path_, "architecture: 'inputs' is not a list of inputs");
    for (size_t k = 0; k < list.size(); ++k) {
      const std::string where = "input " + std::to_string(k);
      const json& n = field(list[k], "name", where);
      const std::vector<int64_t> d = int_list(field(list[k], "shape", where), where + "'s shape");
      if (!n.is_string() || n.get<std::string>().empty())
        bad_checkpoint(path_, "architecture: " + where + " has no name");
      inputs.push_back(Input(Shape(d), n.get<std::string>()));
      if (!tensors_.emplace(n.get<std::string>(), inputs.back()).second)
        bad_checkpoint(path_, "architecture: two inputs are named " + n.dump());
    }
    return inputs;
  }

  // Layer i called on its inbound tensors. A name seen before is a later call of that layer (a
  // shared layer): called again, its output known as "name[k]" (Model::layer_ref).
  SymbolicTensor call(const json& e, size_t i) {
    std::shared_ptr<Layer> l = make(e, i);
    const int call = calls_[l->name()]++;
    if (call > 0) {
      std::shared_ptr<Layer>& first = objects_.at(l->name());
      if (first->type() != l->type())
        bad_checkpoint(path_, "architecture: layer " + std::to_string(i) + " is a " + l->type() + " named '" +
                                  l->name() + "' like an earlier " + first->type());
      l = first;
    } else {
      objects_[l->name()] = l;
    }
    std::vector<SymbolicTensor> inputs;
    const json& inbound = field(e, "inbound", "layer " + std::to_string(i));
    if (!inbound.is_array() || inbound.empty())
      bad_checkpoint(path_, "architecture: layer '" + l->name() + "' has no inbound list");
    for (const json& from : inbound) {
      const auto t = from.is_string() ? tensors_.find(from.get<std::string>()) : tensors_.end();
      if (t == tensors_.end())
        bad_checkpoint(path_, "architecture: layer '" + l->name() + "' is called on " + from.dump() +
                                  ", which no earlier layer is");
      inputs.push_back(t->second);
    }
    SymbolicTensor out = call_layer(l, inputs);
    if (call == 0) check_specs(*l);
    const std::string ref = call == 0 ? l->name() : l->name() + "[" + std::to_string(call) + "]";
    if (!tensors_.emplace(ref, out).second) bad_checkpoint(path_, "architecture: two layers are named '" + ref + "'");
    return out;
  }

  std::unique_ptr<Model> functional(const json& layers, const std::vector<int64_t>& dims) {
    const std::vector<SymbolicTensor> inputs = functional_inputs(dims);
    SymbolicTensor last;
    for (size_t i = 0; i < layers.size(); ++i) last = call(layers[i], i);
    const std::string name = a_.contains("name") && a_["name"].is_string() ? a_["name"].get<std::string>() : "model";
    // The outputs: the list (files since several outputs), else the last layer's.
    std::vector<SymbolicTensor> outputs;
    if (a_.contains("outputs")) {
      const json& list = a_["outputs"];
      if (!list.is_array() || list.empty())
        bad_checkpoint(path_, "architecture: 'outputs' is not a list of layer names");
      for (const json& o : list) {
        const auto t = o.is_string() ? tensors_.find(o.get<std::string>()) : tensors_.end();
        if (t == tensors_.end())
          bad_checkpoint(path_, "architecture: output " + o.dump() + " is no layer of the model");
        outputs.push_back(t->second);
      }
    } else {
      outputs.push_back(last);
    }
    auto model = std::make_unique<Model>(inputs, outputs, name);
    model->build();
    return model;
  }

  const std::string& path_;
  const json& a_;
  std::map<std::string, const Tensor*> in_file_;
  std::map<std::string, SymbolicTensor> tensors_;  // the inputs' and the calls' outputs, by name
  std::map<std::string, std::shared_ptr<Layer>> objects_;
  std::map<std::string, int> calls_;
};
}  // namespace

std::unique_ptr<Model> model_from_architecture(const SafeTensors& st, const std::string& path) {
  const auto it = st.metadata.find("architecture");
  if (it == st.metadata.end())
    bad_checkpoint(path, "holds no architecture: build the model in code and load() the file");
  const json a = parse_metadata(it->second, path, "architecture");
  if (!a.is_object() || !a.contains("version") || !a["version"].is_number_integer() || a["version"].get<int>() < 2)
    bad_checkpoint(path,
                   "was written before checkpoints held layer configurations (Ember 0.3.0 and older): build the model "
                   "in code and load() the file into it");
  return Rebuild(st, path, a).model();
}

}  // namespace ember::detail
