// Building a model: a Sequential's layers built in a line or a graph's checked, the flat buffers
// allocated and bound, the parameters initialised from the seed, the random layers seeded, and the
// execution plan made (execute.h).
#include "../../core/error.h"
#include "../../core/runtime.h"
#include "execute.h"
#include "model.h"
#include "params.h"
#include "topology.h"

namespace ember {

Layer& Model::append(std::shared_ptr<Layer> layer, const char* who) {
  EMBER_CHECK(layer != nullptr, ArgumentError, std::string(who) + ": null layer");
  EMBER_CHECK(!built(), Error, std::string(who) + ": the model is already built; add layers before build()");
  topo_->layers.push_back(std::move(layer));
  return *topo_->layers.back();
}

void Model::build(uint64_t seed) {
  EMBER_CHECK(topo_->graph, Error, "Model::build: a Sequential needs its input shape: build(Shape{...}, seed)");
  build_model(nullptr, seed);
}

void Model::build(const Shape& sample_shape, uint64_t seed) { build_model(&sample_shape, seed); }

void Model::build_model(const Shape* sample_shape, uint64_t seed) {
  const Claim claim(*this, "build");
  EMBER_CHECK(!topo_->layers.empty(), Error, "Model::build: the model has no layers");
  EMBER_CHECK(!built(), Error, "Model::build: the model is already built");
  check_cpu_support();
  if (topo_->graph) {
    if (sample_shape != nullptr) {
      EMBER_CHECK(topo_->input_shapes.size() == 1, ShapeError,
                  "Model::build: the model has " + std::to_string(topo_->input_shapes.size()) +
                      " inputs; build(seed) builds it for their shapes");
      EMBER_CHECK(
          *sample_shape == topo_->input_shapes[0], ShapeError,
          "Model::build: the model's input is " + topo_->input_shapes[0].str() + ", given " + sample_shape->str());
    }
  } else {  // a Sequential: the line of calls
    topo_->line();
  }
  topo_->name_layers();
  // Layers another built model bound (its input(), layer_output() or a call of it made this graph):
  // adopted with their values, which move into this model's buffers below. Checked here, taken over
  // (their switches reset) only once nothing else can refuse the build.
  std::vector<char> adopted_layers(topo_->layers.size(), 0);
  for (size_t i = 0; i < topo_->layers.size(); ++i) {
    Layer& l = *topo_->layers[i];
    const auto owner = l.owner().lock();
    // Adopted: a built model's call, and that model (or none) holds the layer still.
    const bool adopted = i < topo_->adopt.size() && topo_->adopt[i] && owner != identity_ &&
                         (!owner || owner == topo_->adopt_from[i].lock());
    EMBER_CHECK(adopted || !owner || owner == identity_, ArgumentError,
                "Model::build: layer '" + l.name() + "' (" + l.type() +
                    ") belongs to another built model; a layer serves one model (make new layers for each model, "
                    "e.g. inside ModelRecipe::make_model, or build on a built model's input() and layer_output() "
                    "once to take its layers over)");
    adopted_layers[i] = adopted ? 1 : 0;
  }
  if (!topo_->graph) {
    topo_->input_shapes = {*sample_shape};
    topo_->output_shapes.clear();
    Shape s = *sample_shape;
    for (auto& l : topo_->layers) {
      try {
        s = l->build(s);
      } catch (const ShapeError& e) {
        throw ShapeError("layer '" + l->name() + "': " + e.what());
      }
      topo_->output_shapes.push_back(s);
    }
  }
  if (!topo_->graph) topo_->outputs = {static_cast<int>(topo_->layers.size()) - 1};
  for (int out : topo_->outputs) {
    const Shape& s = topo_->output_shapes[static_cast<size_t>(out)];
    const Layer& l = *topo_->layers[static_cast<size_t>(out)];
    EMBER_CHECK(s.rank() == 1 || s.rank() == 2, ShapeError,
                "Model: " + std::string(topo_->outputs.size() == 1 ? "the last layer" : "an output layer") + " '" +
                    l.name() + "' (" + l.type() +
                    ") must output per-sample values (features,) or (time, features), got " + s.str() +
                    " (add a Flatten where the whole sample should become features)");
  }
  std::vector<std::vector<Tensor>> kept_params(topo_->layers.size()), kept_state(topo_->layers.size());
  for (size_t i = 0; i < topo_->layers.size(); ++i) {
    if (adopted_layers[i] == 0) continue;
    Layer& l = *topo_->layers[i];
    l.set_needs_input_grad(true);  // this model's plan decides again
    l.set_output_grad_premasked(false);
    l.set_nothing_trains_below(false);
    if (topo_->shares[i] >= 0) continue;  // a twin: its first call's values
    kept_params[i] = l.params();
    kept_state[i] = l.state();
  }
  arena_->allocate(*topo_);
  for (auto& l : topo_->layers) l->set_owner(identity_);
  Rng init = Rng(seed).fork(0x494E4954ull /* "INIT" */);
  for (size_t i = 0; i < topo_->layers.size(); ++i)
    if (topo_->shares[i] < 0) topo_->layers[i]->init_params(init);  // on the cpu, then moved by to()
  for (size_t i = 0; i < topo_->layers.size(); ++i) {
    if (topo_->shares[i] >= 0) continue;
    const auto specs = topo_->layers[i]->state_specs();
    for (size_t k = 0; k < specs.size(); ++k)
      Tensor(topo_->layers[i]->state()[k]).fill(specs[k].init);  // fills the buffer
  }
  for (size_t i = 0; i < topo_->layers.size(); ++i) {  // an adopted layer's values
    const Layer& l = *topo_->layers[i];
    for (size_t k = 0; k < kept_params[i].size(); ++k) Tensor(l.params()[k]).copy_from(kept_params[i][k]);
    for (size_t k = 0; k < kept_state[i].size(); ++k) Tensor(l.state()[k]).copy_from(kept_state[i][k]);
  }
  seed_ = seed;
  seed_random_layers();
  exec_->plan(*topo_);  // the passes' decisions: input gradients, ReLU premasks, fusions, last readers
  if (const Device d = current_device(); !d.is_cpu()) to(d);  // built inside a DeviceScope
}

void Model::seed_random_layers() {
  // Per layer and replica stream: mixed, so that neighbouring layers or replicas share nothing.
  const Rng base = Rng(seed_).fork(0x524E47ull /* "RNG" */).fork(random_stream_);
  for (size_t i = 0; i < topo_->layers.size(); ++i) topo_->layers[i]->set_random_seed(base.fork(i).next_u64());
}

void Model::set_random_seed(uint64_t seed) {
  seed_ = seed;
  if (built()) seed_random_layers();
}

void Model::set_random_stream(uint64_t stream) {
  random_stream_ = stream;
  if (built()) seed_random_layers();
}

}  // namespace ember
