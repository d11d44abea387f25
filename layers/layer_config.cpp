// Configuration values as text, and back.
#include "layer_config.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "../core/error.h"

namespace ember {

namespace {
const std::string& text_of(const LayerConfig& c, const std::string& key) {
  const auto it = c.find(key);
  if (it == c.end()) throw ArgumentError("layer configuration: no '" + key + "'");
  return it->second;
}

[[noreturn]] void malformed(const std::string& key, const std::string& text, const char* what) {
  throw ArgumentError("layer configuration: '" + key + "' is '" + text + "', not " + what);
}

int64_t parse_int(const std::string& key, const std::string& text) {
  if (text.empty()) malformed(key, text, "an integer");
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end != text.c_str() + text.size()) malformed(key, text, "an integer");
  return v;
}
}  // namespace

std::string config_value(int64_t v) { return std::to_string(v); }

std::string config_value(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));  // 9 digits: any float reads back exactly
  return buf;
}

std::string config_value(bool v) { return v ? "true" : "false"; }
std::string config_value(Size2 v) { return std::to_string(v.h) + "," + std::to_string(v.w); }
std::string config_value(Activation v) { return activation_name(v); }
std::string config_value(Padding v) { return v == Padding::Same ? "same" : "valid"; }

int64_t config_int(const LayerConfig& c, const std::string& key) { return parse_int(key, text_of(c, key)); }

float config_float(const LayerConfig& c, const std::string& key) {
  const std::string& text = text_of(c, key);
  char* end = nullptr;
  const float v = std::strtof(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v)) malformed(key, text, "a finite number");
  return v;
}

bool config_bool(const LayerConfig& c, const std::string& key) {
  const std::string& text = text_of(c, key);
  if (text != "true" && text != "false") malformed(key, text, "true or false");
  return text == "true";
}

Size2 config_size2(const LayerConfig& c, const std::string& key) {
  const std::string& text = text_of(c, key);
  const auto comma = text.find(',');
  if (comma == std::string::npos) malformed(key, text, "two integers such as 3,3");
  return Size2{parse_int(key, text.substr(0, comma)), parse_int(key, text.substr(comma + 1))};
}

Activation config_activation(const LayerConfig& c, const std::string& key) {
  const std::string& text = text_of(c, key);
  for (const Activation a : {Activation::None, Activation::ReLU, Activation::Sigmoid, Activation::Tanh,
                             Activation::GELU, Activation::GELUTanh})
    if (text == activation_name(a)) return a;
  malformed(key, text, "an activation (linear, relu, sigmoid, tanh, gelu, gelu_tanh)");
}

Padding config_padding(const LayerConfig& c, const std::string& key) {
  const std::string& text = text_of(c, key);
  if (text == "same") return Padding::Same;
  if (text == "valid") return Padding::Valid;
  malformed(key, text, "a padding (valid, same)");
}

}  // namespace ember
