// The layer registry and the built-in layers' factories.
#include "registry.h"

#include <mutex>
#include <unordered_map>

#include "../../core/error.h"
#include "../activations.h"
#include "../attention.h"
#include "../augmentation.h"
#include "../avgpool2d.h"
#include "../batch_normalization.h"
#include "../conv2d.h"
#include "../dense.h"
#include "../dropout.h"
#include "../embedding.h"
#include "../flatten.h"
#include "../layer_normalization.h"
#include "../maxpool2d.h"
#include "../merge.h"
#include "../relu.h"

namespace ember {

namespace {

template <class L>
LayerFactory plain() {
  return [](const LayerConfig&) { return std::make_shared<L>(); };
}

std::unordered_map<std::string, LayerFactory> built_ins() {
  std::unordered_map<std::string, LayerFactory> f;
  f["Conv2D"] = [](const LayerConfig& c) {
    return std::make_shared<Conv2D>(config_int(c, "filters"), config_size2(c, "kernel"),
                                    config_activation(c, "activation"), config_padding(c, "padding"),
                                    config_size2(c, "strides"), config_bool(c, "use_bias"));
  };
  f["Dense"] = [](const LayerConfig& c) {
    return std::make_shared<Dense>(config_int(c, "units"), config_activation(c, "activation"));
  };
  f["MaxPool2D"] = [](const LayerConfig& c) {
    return std::make_shared<MaxPool2D>(config_size2(c, "pool"), config_size2(c, "strides"),
                                       config_padding(c, "padding"));
  };
  f["AvgPool2D"] = [](const LayerConfig& c) {
    return std::make_shared<AvgPool2D>(config_size2(c, "pool"), config_size2(c, "strides"),
                                       config_padding(c, "padding"));
  };
  f["BatchNormalization"] = [](const LayerConfig& c) {
    return std::make_shared<BatchNormalization>(config_float(c, "momentum"), config_float(c, "epsilon"));
  };
  f["Dropout"] = [](const LayerConfig& c) { return std::make_shared<Dropout>(config_float(c, "rate")); };
  f["RandomFlip"] = [](const LayerConfig& c) {
    const auto mode = c.find("mode");
    EMBER_CHECK(mode != c.end(), ArgumentError, "RandomFlip: the configuration has no 'mode'");
    return std::make_shared<RandomFlip>(mode->second);
  };
  f["RandomTranslation"] = [](const LayerConfig& c) {
    return std::make_shared<RandomTranslation>(config_float(c, "height_factor"), config_float(c, "width_factor"));
  };
  f["RandomCrop"] = [](const LayerConfig& c) {
    return std::make_shared<RandomCrop>(config_int(c, "height"), config_int(c, "width"), config_int(c, "padding"));
  };
  f["Rescaling"] = [](const LayerConfig& c) {
    return std::make_shared<Rescaling>(config_float(c, "scale"), config_float(c, "offset"));
  };
  f["LeakyReLU"] = [](const LayerConfig& c) { return std::make_shared<LeakyReLU>(config_float(c, "alpha")); };
  f["LayerNormalization"] = [](const LayerConfig& c) {
    return std::make_shared<LayerNormalization>(config_float(c, "epsilon"));
  };
  f["Embedding"] = [](const LayerConfig& c) {
    return std::make_shared<Embedding>(config_int(c, "input_dim"), config_int(c, "output_dim"),
                                       config_float(c, "init_stddev"));
  };
  f["PositionEmbedding"] = [](const LayerConfig& c) {
    return std::make_shared<PositionEmbedding>(config_int(c, "sequence_length"), config_float(c, "init_stddev"));
  };
  f["MultiHeadAttention"] = [](const LayerConfig& c) {
    return std::make_shared<MultiHeadAttention>(
        config_int(c, "num_heads"), config_int(c, "key_dim"),
        AttentionOptions{.value_dim = config_int(c, "value_dim"),
                         .causal = config_bool(c, "causal"),
                         .output_dim = config_int(c, "output_dim"),
                         .init_stddev = config_float(c, "init_stddev"),
                         .output_init_stddev = config_float(c, "output_init_stddev"),
                         // files written before attention dropout have no "dropout"
                         .dropout = c.contains("dropout") ? config_float(c, "dropout") : 0.0f});
  };
  f["GELU"] = [](const LayerConfig& c) { return std::make_shared<GELU>(config_bool(c, "approximate")); };
  f["Concatenate"] = [](const LayerConfig& c) {
    const int64_t axis = config_int(c, "axis");
    EMBER_CHECK(axis >= -64 && axis <= 64, ArgumentError, "Concatenate: axis " + std::to_string(axis));
    return std::make_shared<Concatenate>(static_cast<int>(axis));
  };
  f["GlobalAvgPool2D"] = plain<GlobalAvgPool2D>();
  f["Flatten"] = plain<Flatten>();
  f["ReLU"] = plain<ReLU>();
  f["Sigmoid"] = plain<Sigmoid>();
  f["Tanh"] = plain<Tanh>();
  f["Softmax"] = plain<Softmax>();
  f["Add"] = plain<Add>();
  f["Subtract"] = plain<Subtract>();
  f["Multiply"] = plain<Multiply>();
  f["Average"] = plain<Average>();
  f["Maximum"] = plain<Maximum>();
  return f;
}

struct Registry {
  std::mutex mutex;
  std::unordered_map<std::string, LayerFactory> factories = built_ins();
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

void register_layer(const std::string& type, LayerFactory factory) {
  EMBER_CHECK(!type.empty() && factory != nullptr, ArgumentError, "register_layer: a type and a factory");
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.factories[type] = std::move(factory);
}

bool layer_registered(const std::string& type) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.factories.count(type) > 0;
}

std::shared_ptr<Layer> make_layer(const std::string& type, const LayerConfig& config) {
  LayerFactory factory;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    const auto it = r.factories.find(type);
    EMBER_CHECK(it != r.factories.end(), ArgumentError,
                "no factory for layer type '" + type + "': register_layer(\"" + type + "\", ...) before loading");
    factory = it->second;
  }
  std::shared_ptr<Layer> layer;
  try {
    layer = factory(config);
  } catch (const std::exception& e) {  // a user factory's std::stoi, say, as well as Ember's errors
    throw ArgumentError("layer type '" + type + "': " + e.what());
  }
  EMBER_CHECK(layer != nullptr && layer->type() == type, ArgumentError,
              "the factory of '" + type + "' made " + (layer ? "a " + layer->type() : std::string("nothing")));
  return layer;
}

}  // namespace ember
