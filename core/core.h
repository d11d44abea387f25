/// @file
/// core/'s public headers: tensors, devices, errors, logging, version.
/// ember.h includes this umbrella; a new public header of core/ is added here.
#pragma once

#include "cuda_graph.h"
#include "device.h"
#include "error.h"
#include "log.h"
#include "output_file.h"
#include "rng.h"
#include "runtime.h"
#include "safetensors.h"
#include "shape.h"
#include "tensor.h"
