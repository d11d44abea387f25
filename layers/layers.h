/// @file
/// layers/'s public headers: the layers, loss, metrics, the model engine (graph models, Sequential) and its
/// checkpoints. ember.h includes this umbrella; a new public header of layers/ is added here.
#pragma once

#include "activation.h"
#include "activations.h"
#include "avgpool2d.h"
#include "batch_normalization.h"
#include "conv2d.h"
#include "dense.h"
#include "dropout.h"
#include "flatten.h"
#include "gradient_check.h"
#include "layer.h"
#include "layer_config.h"
#include "loss.h"
#include "matmul.h"
#include "maxpool2d.h"
#include "merge.h"
#include "metrics.h"
#include "model/checkpoint.h"
#include "model/graph.h"
#include "model/model.h"
#include "model/registry.h"
#include "model/sequential.h"
#include "relu.h"
