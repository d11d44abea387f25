// A model of two inputs against an installed Ember: an MNIST image (u8, scaled by 1/255) and a
// question, a one-hot digit (f32); the answer is whether the image shows that digit. Neither input
// alone can answer it (half the questions are right), so a model above 0.5 reads both. A dataset of
// two named inputs (Dataset::from_inputs), fit with validation data, predict on two tensors, and
// load_model recreating both inputs. Exits non-zero if a check fails.
//   two_input <mnist_dir>     (scripts/fetch_data.sh mnist fetches it)
#include <ember/ember.h>

#include <cstdio>
#include <filesystem>

using namespace ember;

namespace {

// Per image a question: its own digit for half of them, another digit for the rest; the target
// says which (1: yes).
Dataset with_questions(const Dataset& images, uint64_t seed) {
  const int64_t n = images.size();
  Tensor question = Tensor::zeros(Shape{n, 10}, DType::F32);
  Tensor answer = Tensor::empty(Shape{n}, DType::I32);
  Rng rng(seed);
  for (int64_t i = 0; i < n; ++i) {
    const auto digit = static_cast<int64_t>(images.labels().data<int32_t>()[i]);
    const bool yes = rng.below(2) == 0;
    const int64_t asked = yes ? digit : (digit + 1 + static_cast<int64_t>(rng.below(9))) % 10;
    question.f32()[i * 10 + asked] = 1.0f;
    answer.data<int32_t>()[i] = yes ? 1 : 0;
  }
  return Dataset::from_inputs(
      {{.name = "image", .values = images.images(), .scale = images.scale()}, {.name = "question", .values = question}},
      answer, {.num_classes = 2, .name = images.name() + " with questions"});
}

Model make_model() {
  SymbolicTensor image = Input(Shape{1, 28, 28}, "image");
  SymbolicTensor question = Input(Shape{10}, "question");
  SymbolicTensor h = layer<Conv2D>(8, Size2{3, 3}, Activation::ReLU)(image);
  h = layer<MaxPool2D>(Size2{2, 2})(h);
  h = layer<Dense>(32, Activation::ReLU)(layer<Flatten>()(h));
  SymbolicTensor q = layer<Dense>(32, Activation::ReLU)(question);
  SymbolicTensor both = layer<Dense>(32, Activation::ReLU)(concatenate({h, q}));
  return Model({image, question}, {layer<Dense>(2)(both)}, "digit_question");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc != 2) {
      std::fprintf(stderr, "usage: two_input <mnist_dir>\n");
      return 2;
    }
    const MnistData mnist = load_mnist(argv[1]);
    const Dataset train = with_questions(mnist.train.take(12800), 1);
    const Dataset test = with_questions(mnist.test.take(2000), 2);
    Model model = make_model();
    model.compile(std::make_unique<Adam>());
    FitOptions options;
    options.epochs = 3;
    options.batch_size = 32;
    options.seed = 3;
    options.verbose = 0;
    const History history = model.fit(train, options, &test);
    std::printf("%s", model.summary().c_str());
    for (const EpochLogs& e : history.epochs)
      std::printf("epoch %d: loss %.4f, val_accuracy %.4f\n", e.epoch, e.loss, *e.val_accuracy);

    // predict takes one tensor per input, in the model's order (input_names()).
    const Dataset few = test.take(8);
    Tensor image = Tensor::empty(Shape{8, 1, 28, 28}, DType::F32);
    for (int64_t i = 0; i < image.numel(); ++i)
      image.f32()[i] = static_cast<float>(few.input(0).values.data<uint8_t>()[i]) * few.input(0).scale;
    const Tensor scores = model.predict({image, few.input(1).values});

    const std::string path = (std::filesystem::temp_directory_path() / "ember_two_input.safetensors").string();
    model.save(path);
    const std::unique_ptr<Model> reloaded = load_model(path);  // both inputs, names and shapes, from the file
    std::filesystem::remove(path);
    const EvalResult before = model.evaluate(test), after = reloaded->evaluate(test);
    std::printf("inputs %s and %s; test accuracy %.4f, reloaded %.4f\n", reloaded->input_names()[0].c_str(),
                reloaded->input_names()[1].c_str(), before.accuracy, after.accuracy);

    const bool ok = history.epochs.back().loss < history.epochs.front().loss &&
                    before.accuracy > 0.9 &&  // one input alone: 0.5
                    after.accuracy == before.accuracy && after.loss == before.loss &&
                    reloaded->predict({image, few.input(1).values}).to_vector() == scores.to_vector();
    if (!ok) std::fprintf(stderr, "two_input: training, predicting or reloading did not behave\n");
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "two_input: error: %s\n", e.what());
    return 1;
  }
}
