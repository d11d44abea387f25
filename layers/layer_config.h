// Reading and writing a layer's configuration values (Layer::config(), LayerConfig in layer.h), the
// same way for every layer: what checkpoints store and load_model's factories read back.
#pragma once

#include <cstdint>
#include <string>

#include "activation.h"
#include "layer.h"

namespace ember {

// Configuration values. Writers give text that the readers turn back into the same value
// (floats with 9 significant digits: exact); readers throw ArgumentError naming the key and the
// text for a missing key or a malformed value.
std::string config_value(int64_t v);
std::string config_value(float v);
std::string config_value(bool v);
std::string config_value(Size2 v);
std::string config_value(Activation v);
std::string config_value(Padding v);
int64_t config_int(const LayerConfig& c, const std::string& key);
float config_float(const LayerConfig& c, const std::string& key);
bool config_bool(const LayerConfig& c, const std::string& key);
Size2 config_size2(const LayerConfig& c, const std::string& key);
Activation config_activation(const LayerConfig& c, const std::string& key);
Padding config_padding(const LayerConfig& c, const std::string& key);

}  // namespace ember
