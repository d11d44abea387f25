// Builds against an installed Ember with the consumer's own core/, data/ and layers/ headers on
// the include path (see CMakeLists.txt), includes some of them itself after Ember, and trains a
// tiny model for a few steps: exits 0 when the loss went down.
#include <ember/ember.h>

#include <cstdio>

#define CONSUMER_OWN_HEADERS_OK
#include "core/tensor.h"
#include "data/dataset.h"
#include "layers/layer.h"

int main() {
  static_assert(consumer_core_tensor_h + consumer_data_dataset_h + consumer_layers_layer_h == 3);
  using namespace ember;
  // Two classes told apart by the sign of the image's mean.
  const int n = 64;
  Tensor images = Tensor::empty(Shape{n, 1, 4, 4}, DType::U8);
  Tensor labels = Tensor::empty(Shape{n}, DType::I32);
  Rng rng(3);
  for (int i = 0; i < n; ++i) {
    labels.data<int32_t>()[i] = i % 2;
    for (int j = 0; j < 16; ++j)
      images.data<uint8_t>()[i * 16 + j] = static_cast<uint8_t>(i % 2 ? 160 + rng.uniform(0, 90) : rng.uniform(0, 90));
  }
  Dataset data(images, labels, 2, "signs");
  Sequential model;
  model.add<Flatten>();
  model.add<Dense>(2);
  model.compile(std::make_unique<Adam>(AdamOptions{.learning_rate = 0.05f}));
  FitOptions opt;
  opt.epochs = 5;
  opt.batch_size = 16;
  opt.verbose = 0;
  const History h = model.fit(data, opt);
  const float first = h.epochs.front().loss, last = h.epochs.back().loss;
  std::printf("consumer: Ember %s, loss %.4f -> %.4f\n", version(), first, last);
  return last < first ? 0 : 1;
}
