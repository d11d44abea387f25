// Data augmentation against an installed Ember: a residual CNN on Fashion-MNIST trained with random
// crops (padding 2) and horizontal flips as layers of the model, which act in training only, and
// the same model trained without them; both evaluated on the test set. A FitOptions::transform
// hook adds what no layer does (here: a random erase of a 6x6 square). Exits non-zero if a check
// fails.
//   augmentation <mnist_dir> [fashion_mnist_dir [images epochs]]   (scripts/fetch_data.sh
//   fashion-mnist; default: fashion-mnist beside mnist_dir, 6,400 images, 2 epochs)
#include <ember/ember.h>

#include <cstdio>
#include <filesystem>
#include <string>

using namespace ember;

namespace {

// y = relu(x + bn(conv(relu(bn(conv(x)))))).
SymbolicTensor residual_block(const SymbolicTensor& x) {
  const int64_t filters = x.shape()[0];
  auto conv_bn = [&](const SymbolicTensor& t) {
    SymbolicTensor c = layer<Conv2D>(filters, Size2{3, 3}, Activation::None, Padding::Same, Size2{1, 1},
                                     /*use_bias=*/false)(t);
    return layer<BatchNormalization>()(c);
  };
  return layer<ReLU>()(add({x, conv_bn(layer<ReLU>()(conv_bn(x)))}));
}

Model make_model(bool augment) {
  SymbolicTensor x = Input(Shape{1, 28, 28}, "image");
  SymbolicTensor h = x;
  if (augment) {
    h = layer<RandomCrop>(28, 28, /*padding=*/2)(h);  // torchvision's RandomCrop(28, padding=2)
    h = layer<RandomFlip>("horizontal")(h);
  }
  h = layer<Conv2D>(16, Size2{3, 3}, Activation::ReLU, Padding::Same)(h);
  h = layer<MaxPool2D>(Size2{2, 2})(h);
  h = residual_block(h);
  h = layer<MaxPool2D>(Size2{2, 2})(h);
  h = layer<Flatten>()(h);
  return Model(x, layer<Dense>(10)(h), augment ? "augmented" : "plain");
}

// Zeros a 6x6 square of each image at a place drawn from (epoch, index, row): the same squares in a
// resumed run.
void random_erase(Batch& b, int epoch, int64_t index) {
  Tensor& x = b.x();  // (B, 1, 28, 28) f32 on the CPU
  for (int64_t r = 0; r < x.dim(0); ++r) {
    Rng rng(Rng(static_cast<uint64_t>(epoch)).fork(static_cast<uint64_t>(index)).fork(static_cast<uint64_t>(r)));
    const int64_t top = static_cast<int64_t>(rng.next_u64() % 23), left = static_cast<int64_t>(rng.next_u64() % 23);
    for (int64_t i = top; i < top + 6; ++i)
      for (int64_t j = left; j < left + 6; ++j) x.f32()[(r * 28 + i) * 28 + j] = 0.0f;
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc != 2 && argc != 3 && argc != 5) {
      std::fprintf(stderr, "usage: augmentation <mnist_dir> [fashion_mnist_dir [images epochs]]\n");
      return 2;
    }
    const int64_t images = argc == 5 ? std::stoll(argv[3]) : 6400;
    const int epochs = argc == 5 ? std::stoi(argv[4]) : 2;
    if (images < 32 || images > 60000 || epochs < 1) {
      std::fprintf(stderr, "augmentation: images in [32, 60000] and epochs >= 1\n");
      return 2;
    }
    const std::filesystem::path mnist_dir = argv[1];
    const std::string dir = argc == 3 ? argv[2] : (mnist_dir.parent_path() / "fashion-mnist").string();
    const MnistData fashion = load_mnist(dir, "fashion-mnist");
    const Dataset train = fashion.train.take(images), test = fashion.test.take(2000);
    FitOptions options;
    options.epochs = epochs;
    options.batch_size = 32;
    options.seed = 3;
    options.verbose = 0;

    double accuracy[3] = {};
    for (int run = 0; run < 3; ++run) {  // plain, the layers, the layers and the hook
      Model model = make_model(run > 0);
      model.build(/*seed=*/1);
      model.compile(std::make_unique<Adam>());
      FitOptions o = options;
      if (run == 2) o.transform = random_erase;
      model.fit(train, o, &test);
      accuracy[run] = model.evaluate(test).accuracy;
      if (run == 1) std::printf("%s", model.summary().c_str());
    }
    std::printf("Fashion-MNIST, %lld images x %d epochs in batches of 32, test accuracy on 2,000:\n",
                static_cast<long long>(images), epochs);
    std::printf("  without augmentation %.4f\n", accuracy[0]);
    std::printf("  RandomCrop(padding 2) + RandomFlip   %.4f\n", accuracy[1]);
    std::printf("  ... + a random erase in a fit hook   %.4f\n", accuracy[2]);
    const bool ok = accuracy[0] > 0.6 && accuracy[1] > 0.6 && accuracy[2] > 0.6;  // chance: 0.1
    if (!ok) std::fprintf(stderr, "augmentation: a model did not train\n");
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "augmentation: error: %s\n", e.what());
    return 1;
  }
}
