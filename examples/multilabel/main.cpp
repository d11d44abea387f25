// Multi-label MNIST: two yes/no answers per image, "is the digit even" and "is it greater than
// 4", from one small CNN with two logits, trained with binary cross-entropy from logits; binary
// accuracy is the share of right answers over both. The check asks for >= 98.5%.
//   multilabel <mnist_dir>      (last line: binary_accuracy X)
#include <ember/ember.h>

#include <cstdio>

using namespace ember;

namespace {
// f32 (N, 2) targets {even, greater than 4} from the digit labels; the images stay as they are.
Dataset two_questions(const Dataset& digits) {
  const int64_t n = digits.size();
  Tensor targets = Tensor::empty(Shape{n, 2}, DType::F32, Device::cpu());
  const int32_t* label = digits.labels().data<int32_t>();
  for (int64_t i = 0; i < n; ++i) {
    targets.f32()[2 * i] = label[i] % 2 == 0 ? 1.0f : 0.0f;
    targets.f32()[2 * i + 1] = label[i] > 4 ? 1.0f : 0.0f;
  }
  return Dataset::from_tensors(digits.images(), targets, {.scale = digits.scale(), .name = digits.name()});
}
}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc != 2) {
      std::fprintf(stderr, "usage: multilabel <mnist_dir>\n");
      return 2;
    }
    const MnistData mnist = load_mnist(argv[1]);
    const Dataset train = two_questions(mnist.train), test = two_questions(mnist.test);

    Sequential model;
    model.add<Conv2D>(16, Size2{3, 3}, Activation::ReLU);
    model.add<MaxPool2D>(Size2{2, 2});
    model.add<Conv2D>(32, Size2{3, 3}, Activation::ReLU);
    model.add<MaxPool2D>(Size2{2, 2});
    model.add<Flatten>();
    model.add<Dense>(64, Activation::ReLU);
    model.add<Dense>(2);  // one logit per question
    model.build(train.sample_shape(), /*seed=*/1);
    model.compile(std::make_unique<Adam>(), std::make_unique<losses::BinaryCrossentropy>(/*from_logits=*/true),
                  {std::make_shared<metrics::BinaryAccuracy>()});
    FitOptions options;
    options.epochs = 4;
    options.batch_size = 64;
    options.seed = 1;
    options.verbose = 0;
    const History history = model.fit(train, options, &test);
    for (const EpochLogs& e : history.epochs)
      std::printf("epoch %d: loss %.4f, binary_accuracy %.4f, val_binary_accuracy %.4f, %.1f s\n", e.epoch, e.loss,
                  *find_value(e.metrics, "binary_accuracy"), *find_value(e.val_metrics, "binary_accuracy"), e.seconds);
    const double accuracy = *find_value(history.epochs.back().val_metrics, "binary_accuracy");
    std::printf("binary_accuracy %.4f\n", accuracy);
    return accuracy >= 0.985 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "multilabel: error: %s\n", e.what());
    return 1;
  }
}
