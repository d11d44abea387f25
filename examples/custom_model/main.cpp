// A custom model against an installed Ember: a user-defined layer (checked by check_gradients),
// composed with built-in layers, trained with a hand-written loop, saved and reloaded (into the
// model built in code, and recreated by load_model with the layer's factory). Exits non-zero if
// any check fails.
//   custom_model [mnist_dir]     (without a directory it trains on a synthetic task)
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "channel_scale.h"

using namespace ember;

namespace {

// The installed gradient checker (layers/gradient_check.h): ChannelScale's input, gamma and beta
// gradients against central differences of its forward, on a layer built on its own.
bool gradient_check() {
  ChannelScale layer;
  const GradientCheckReport report = check_gradients(layer, Shape{3, 2, 2});
  std::printf("gradient check of ChannelScale: %s\n", report.summary().c_str());
  return report.passed;
}

Sequential make_model() {
  Sequential m;
  m.add<Conv2D>(8, Size2{3, 3}, Activation::ReLU);
  m.add<ChannelScale>();
  m.add<MaxPool2D>(Size2{2, 2});
  m.add<Flatten>();
  m.add<Dense>(10);
  return m;
}

Dataset synthetic(int n) {  // class k: a bright pixel block in column band k
  Tensor images = Tensor::empty(Shape{n, 1, 12, 12}, DType::U8), labels = Tensor::empty(Shape{n}, DType::I32);
  Rng rng(7);
  for (int i = 0; i < n; ++i) {
    const int k = static_cast<int>(rng.below(10));
    labels.data<int32_t>()[i] = k;
    for (int j = 0; j < 144; ++j)
      images.data<uint8_t>()[i * 144 + j] = (j % 12 == k + 1) ? 220 : static_cast<uint8_t>(rng.below(40));
  }
  return Dataset(images, labels, 10, "synthetic");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (!gradient_check()) {
      std::fprintf(stderr, "custom_model: ChannelScale gradient check failed\n");
      return 1;
    }
    MnistData mnist;
    Dataset train, test;
    if (argc > 1) {
      mnist = load_mnist(argv[1]);
      train = mnist.train.take(6400);
      test = mnist.test;
    } else {
      train = synthetic(1024);
      test = synthetic(256);
    }
    Sequential model = make_model();
    model.build(train.sample_shape(), /*seed=*/3);
    model.compile(std::make_unique<Adam>());
    std::printf("%s", model.summary().c_str());

    // A hand-written training loop: the DataLoader, then gradients and the update step by step.
    DataLoader loader(train, {.batch_size = 32, .shuffle = true, .seed = 3});
    double first = 0, last = 0;
    for (int epoch = 0; epoch < 2; ++epoch) {
      loader.start_epoch(epoch);
      Batch batch;
      double sum = 0;
      int64_t steps = 0;
      while (loader.next(batch)) {
        sum += model.compute_gradients(batch.x(), batch.y());
        model.apply_gradients();
        ++steps;
      }
      const double mean = sum / static_cast<double>(steps);
      (epoch == 0 ? first : last) = mean;
      std::printf("epoch %d: mean loss %.4f over %lld steps\n", epoch + 1, mean, static_cast<long long>(steps));
    }
    const EvalResult before = model.evaluate(test);
    std::printf("test accuracy %.4f\n", before.accuracy);

    const std::string path = (std::filesystem::temp_directory_path() / "ember_custom_model.safetensors").string();
    model.save(path, TrainingState{.epochs_done = 2, .seed = 3, .batch_size = 32});
    Sequential reloaded = make_model();
    reloaded.build(train.sample_shape(), /*seed=*/99);
    reloaded.load(path);
    const EvalResult after = reloaded.evaluate(test);
    std::printf("reloaded from %s: test accuracy %.4f\n", path.c_str(), after.accuracy);
    // The file also recreates the model without make_model(), once the user layer has a factory.
    register_layer("ChannelScale", [](const LayerConfig&) { return std::make_shared<ChannelScale>(); });
    const std::unique_ptr<Model> recreated = load_model(path);
    const EvalResult again = recreated->evaluate(test);
    std::filesystem::remove(path);
    std::printf("recreated by load_model: test accuracy %.4f\n", again.accuracy);

    const bool ok = last < first && before.accuracy > 0.5 && after.accuracy == before.accuracy &&
                    again.accuracy == before.accuracy && again.loss == before.loss;
    if (!ok) std::fprintf(stderr, "custom_model: training or reloading did not behave\n");
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "custom_model: error: %s\n", e.what());
    return 1;
  }
}
