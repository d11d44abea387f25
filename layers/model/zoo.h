/// @file
/// Ready-made models (train_mnist's --model choices), unbuilt: to train as they are, to compare
/// with, or as the base of a model of one's own. Keras' defaults throughout; the weights come from
/// build(sample_shape, seed) (a graph model's: build(seed)).
/// @code
///   Sequential cnn = models::reference_cnn();
///   cnn.build(Shape{1, 28, 28}, 1);
/// @endcode
#pragma once

#include <cstdint>

#include "graph.h"
#include "sequential.h"

namespace ember::models {

/// The reference CNN, Keras' MNIST tutorial model: Conv32-Pool-Conv64-Pool-Conv64-Flatten-
/// Dense64-Dense(classes), 3x3 VALID convolutions and the first Dense with ReLU, 2x2 pools; 93,322
/// parameters on 28x28 grey images with 10 classes.
Sequential reference_cnn(int64_t classes = 10);
/// The same layers appended to `m` (a model named otherwise, or with layers before them).
void add_reference_cnn(Sequential& m, int64_t classes = 10);

/// bn-cnn: Conv32-BatchNorm-ReLU-Pool, Conv64-BatchNorm-ReLU-Pool, Flatten, Dropout 0.25,
/// Dense(classes); 3x3 SAME convolutions (28 -> 14 -> 7), each keeping its bias.
Sequential bn_cnn(int64_t classes = 10);
/// The same layers appended to `m`.
void add_bn_cnn(Sequential& m, int64_t classes = 10);

/// A small residual CNN (a graph model named "resnet"; 151,274 parameters on 28x28x1, 10 classes):
///   stem  Conv32 3x3 - BN - ReLU - MaxPool 2
///   res1  [Conv32 3x3 - BN - ReLU - Conv32 3x3 - BN] + x - ReLU
///   res2  [Conv64 3x3 /2 - BN - ReLU - Conv64 3x3 - BN] + [Conv64 1x1 /2 - BN](x) - ReLU
///   res3  [Conv64 3x3 - BN - ReLU - Conv64 3x3 - BN] + x - ReLU
///   head  GlobalAvgPool2D - Dropout 0.5 - Dense(classes)
/// SAME convolutions without bias (BatchNormalization's beta takes its place), for `input` (C, H, W)
/// samples; build(seed) gives it its weights.
Model resnet(const Shape& input = Shape{1, 28, 28}, int64_t classes = 10);

}  // namespace ember::models
