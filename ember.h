/// @file
/// Ember: one header for the whole public API: `#include <ember/ember.h>`.
/// Each folder's public headers are listed in its own umbrella (e.g. layers/layers.h).
#pragma once

#include "core/core.h"
#include "data/data.h"
#include "distribute/distribute.h"
#include "layers/layers.h"
#include "optim/optim.h"
