/// @file
/// Reading and writing a layer's configuration values (Layer::config(), LayerConfig in layer.h), the
/// same way for every layer: what checkpoints store and load_model's factories read back.
#pragma once

#include <cstdint>
#include <string>

#include "activation.h"
#include "layer.h"

namespace ember {

/// @name Configuration values
/// Writers give text that the readers turn back into the same value
/// (floats with 9 significant digits: exact); readers throw ArgumentError naming the key and the
/// text for a missing key or a malformed value.
/// @{

std::string config_value(int64_t v);     ///< The integer in decimal.
std::string config_value(float v);       ///< 9 significant digits: reads back exactly.
std::string config_value(bool v);        ///< "true" or "false".
std::string config_value(Size2 v);       ///< "3,3" (height, width).
std::string config_value(Activation v);  ///< "relu" or "linear".
std::string config_value(Padding v);     ///< "valid" or "same".
/// The integer at `key` (ArgumentError for a missing key or a malformed value).
int64_t config_int(const LayerConfig& c, const std::string& key);
/// The finite number at `key` (ArgumentError for a missing key or a malformed value).
float config_float(const LayerConfig& c, const std::string& key);
/// "true" or "false" at `key` (ArgumentError for a missing key or anything else).
bool config_bool(const LayerConfig& c, const std::string& key);
/// Two integers "h,w" at `key` (ArgumentError for a missing key or a malformed value).
Size2 config_size2(const LayerConfig& c, const std::string& key);
/// "relu" or "linear" at `key` (ArgumentError for a missing key or anything else).
Activation config_activation(const LayerConfig& c, const std::string& key);
/// "valid" or "same" at `key` (ArgumentError for a missing key or anything else).
Padding config_padding(const LayerConfig& c, const std::string& key);
/// @}

}  // namespace ember
