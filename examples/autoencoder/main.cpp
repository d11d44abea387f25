// An MNIST autoencoder: each image is its own target. Dense 784-256-64-256-784 (ReLU; a sigmoid
// on the output), mean squared error, Adam 1e-3, batch 256, 10 epochs: the recipe
// bench/pytorch_autoencoder.py runs in PyTorch (docs/benchmarks.md has both side by side).
// The targets are the pixels as floats in [0, 1]; the inputs stay bytes, scaled by 1/255 per
// batch (the same values).
//   autoencoder <mnist_dir> [seed]      (last line: test_mse X; exits 1 above 0.0075)
#include <ember/ember.h>

#include <cstdio>

using namespace ember;

namespace {
// The images as f32 (N, 784) targets: pixel / 255, exactly what the inputs' batches hold.
Dataset reconstruct(const Dataset& images) {
  const int64_t n = images.size(), per = images.sample_shape().numel();
  Tensor targets = Tensor::empty(Shape{n, per}, DType::F32, Device::cpu());
  const uint8_t* src = images.features().data<uint8_t>();
  for (int64_t i = 0; i < n * per; ++i) targets.f32()[i] = static_cast<float>(src[i]) * images.scale();
  return Dataset::from_tensors(images.features(), targets, {.scale = images.scale(), .name = images.name()});
}
}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc != 2 && argc != 3) {
      std::fprintf(stderr, "usage: autoencoder <mnist_dir> [seed]\n");
      return 2;
    }
    const uint64_t seed = argc == 3 ? std::stoull(argv[2]) : 1;
    const MnistData mnist = load_mnist(argv[1]);
    const Dataset train = reconstruct(mnist.train), test = reconstruct(mnist.test);

    Sequential model;
    model.add<Flatten>();
    model.add<Dense>(256, Activation::ReLU);
    model.add<Dense>(64, Activation::ReLU);
    model.add<Dense>(256, Activation::ReLU);
    model.add<Dense>(784);
    model.add<Sigmoid>();
    model.build(train.sample_shape(), seed);
    model.compile(std::make_unique<Adam>(AdamOptions{.learning_rate = 1e-3f}),
                  std::make_unique<losses::MeanSquaredError>(), {std::make_shared<metrics::MeanAbsoluteError>()});
    std::printf("%s", model.summary().c_str());
    FitOptions options;
    options.epochs = 10;
    options.batch_size = 256;
    options.seed = seed;
    options.verbose = 0;
    const History history = model.fit(train, options);
    for (const EpochLogs& e : history.epochs)
      std::printf("epoch %d: loss %.5f, mae %.5f, %.1f s\n", e.epoch, e.loss, *find_value(e.metrics, "mae"), e.seconds);
    const EvalResult result = model.evaluate(test);
    std::printf("test_mse %.5f\n", result.loss);
    // PyTorch's same recipe (Glorot init, bench/pytorch_autoencoder.py) reached 0.00657, 0.00679
    // and 0.00649 over seeds 1-3 here (mean 0.00662); Ember 0.00658-0.00703 over seeds and batch
    // slicing (docs/benchmarks.md: means within 2%). The bar: 5% over PyTorch's worst seed plus
    // Ember's own seed-to-seed spread (+-4%), so a CPU whose kernels round otherwise still passes:
    // 0.0075. (PyTorch with nn.Linear's own init ends at 0.0078-0.0080.)
    return result.loss <= 0.0075 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "autoencoder: error: %s\n", e.what());
    return 1;
  }
}
