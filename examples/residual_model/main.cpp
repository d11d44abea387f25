// A residual CNN built as a graph against an installed Ember: Input, layers called on symbolic
// tensors, a shortcut joined by add(), a branch joined by concatenate(); trained with fit(),
// summarised, saved and reloaded into the same graph built again. Exits non-zero if a check fails.
//   residual_model <mnist_dir>     (scripts/fetch_data.sh mnist fetches it)
#include <ember/ember.h>

#include <cstdio>
#include <filesystem>

using namespace ember;

namespace {

// y = relu(x + bn(conv(relu(bn(conv(x)))))): the identity shortcut, so x keeps its shape.
SymbolicTensor residual_block(const SymbolicTensor& x) {
  const int64_t filters = x.shape()[0];
  auto conv_bn = [&](const SymbolicTensor& t) {
    SymbolicTensor c = layer<Conv2D>(filters, Size2{3, 3}, Activation::None, Padding::Same, Size2{1, 1},
                                     /*use_bias=*/false)(t);
    return layer<BatchNormalization>()(c);
  };
  return layer<ReLU>()(add({x, conv_bn(layer<ReLU>()(conv_bn(x)))}));
}

Model make_model(const Shape& input) {
  SymbolicTensor x = Input(input, "image");
  SymbolicTensor h = layer<Conv2D>(8, Size2{3, 3}, Activation::ReLU, Padding::Same)(x);
  h = layer<MaxPool2D>(Size2{2, 2})(h);
  h = residual_block(h);
  // Two views of the block's output side by side: its channels' means and a strided 1x1 conv.
  SymbolicTensor pooled = layer<GlobalAvgPool2D>()(h);
  SymbolicTensor strided =
      layer<Flatten>()(layer<Conv2D>(2, Size2{1, 1}, Activation::ReLU, Padding::Valid, Size2{2, 2})(h));
  return Model(x, layer<Dense>(10)(concatenate({pooled, strided})), "residual");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc != 2) {
      std::fprintf(stderr, "usage: residual_model <mnist_dir>\n");
      return 2;
    }
    const MnistData mnist = load_mnist(argv[1]);
    const Dataset train = mnist.train.take(6400), test = mnist.test.take(2000);
    Model model = make_model(train.sample_shape());
    model.compile(std::make_unique<Adam>());
    FitOptions options;
    options.epochs = 2;
    options.batch_size = 32;
    options.seed = 3;
    options.verbose = 0;
    const History history = model.fit(train, options, &test);
    std::printf("%s", model.summary().c_str());
    for (const EpochLogs& e : history.epochs)
      std::printf("epoch %d: loss %.4f, val_accuracy %.4f\n", e.epoch, e.loss, *e.val_accuracy);

    const std::string path = (std::filesystem::temp_directory_path() / "ember_residual_model.safetensors").string();
    model.save(path);
    Model reloaded = make_model(train.sample_shape());
    reloaded.build(/*seed=*/99);
    reloaded.load(path);
    std::filesystem::remove(path);
    const EvalResult before = model.evaluate(test), after = reloaded.evaluate(test);
    std::printf("test accuracy %.4f, reloaded %.4f\n", before.accuracy, after.accuracy);

    const bool ok = history.epochs.back().loss < history.epochs.front().loss &&
                    before.accuracy > 0.7 &&  // chance: 0.1; 0.85 measured on MNIST
                    after.accuracy == before.accuracy && after.loss == before.loss;
    if (!ok) std::fprintf(stderr, "residual_model: training or reloading did not behave\n");
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "residual_model: error: %s\n", e.what());
    return 1;
  }
}
