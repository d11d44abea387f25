// A model's architecture as a checkpoint keeps it: JSON in the file's metadata (version 2: each
// layer's name, type, configuration, parameter and state shapes and inbound layers; the model's
// inputs and outputs), compared against a model by load() and rebuilt into one by load_model().
// Knows the model's public API and the layer registry; checkpoint.cpp is its one caller.
#pragma once

#include <map>
#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "../../core/safetensors.h"

namespace ember {
class Model;
}

namespace ember::detail {

/// CheckpointError "checkpoint <path>: <why>".
[[noreturn]] void bad_checkpoint(const std::string& path, const std::string& why);
/// Metadata `key`'s JSON text, nesting at most 32 deep (CheckpointError else, or for text that is
/// not JSON).
nlohmann::json parse_metadata(const std::string& text, const std::string& path, const std::string& key);
/// The architecture of a built model, as the metadata's "architecture" text.
std::string architecture_text(const Model& model);
/// The file's architecture (any version) against `model`: the first difference in layer count,
/// name, type, configuration or inbound layers (what a version holds), named (CheckpointError);
/// nothing for a file without one.
void compare_architecture(const std::map<std::string, std::string>& metadata, const Model& model,
                          const std::string& path);
/// The model a checkpoint's architecture describes, built (its parameters not loaded yet). Every
/// tensor a layer declares must be in `st` with its shape, checked before anything is allocated.
/// CheckpointError for a file without a version-2 architecture, or anything in it that does not
/// make a model (a layer's own refusal included).
std::unique_ptr<Model> model_from_architecture(const SafeTensors& st, const std::string& path);

}  // namespace ember::detail
