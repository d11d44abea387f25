/// @file
/// Layer factories: how load_model recreates a layer from its type (Layer::type()) and its
/// configuration (Layer::config()), Keras' get_config / from_config. Every built-in layer is
/// registered; a user layer registers its own before a model holding it is loaded:
///
/// @code
///   register_layer("ChannelScale", [](const LayerConfig&) { return std::make_shared<ChannelScale>(); });
/// @endcode
///
/// and reads its values with the functions of layers/layer_config.h.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "../layer.h"
#include "../layer_config.h"

namespace ember {

/// Makes a layer of one type from its configuration (Layer::config()).
using LayerFactory = std::function<std::shared_ptr<Layer>(const LayerConfig& config)>;

/// Registers (or replaces) the factory of `type`. Thread-safe.
void register_layer(const std::string& type, LayerFactory factory);
bool layer_registered(const std::string& type);  ///< Whether `type` has a factory. Thread-safe.
/// A new layer of `type` from `config`. ArgumentError for a type nobody registered or a
/// configuration its factory refuses (a missing or malformed value, named).
std::shared_ptr<Layer> make_layer(const std::string& type, const LayerConfig& config);

}  // namespace ember
