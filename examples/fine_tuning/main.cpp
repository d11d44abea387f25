// Transfer learning against an installed Ember (Keras' fine-tuning recipe): a CNN trained on MNIST
// and saved; loaded, its convolutional base frozen and a new head put on its features; the head
// trained on Fashion-MNIST. Prints the accuracy against the same model trained from scratch for the
// same steps, and the step time with the base frozen against the same model with nothing frozen.
// Exits non-zero if a check fails.
//   fine_tuning <mnist_dir> [fashion_mnist_dir]   (scripts/fetch_data.sh mnist / fashion-mnist;
//                                                   default: fashion-mnist beside mnist_dir)
#include <ember/ember.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <vector>

using namespace ember;

namespace {

// conv2d -> max_pooling2d -> conv2d_1 -> max_pooling2d_1 -> flatten -> dense (features) -> dense_1.
std::unique_ptr<Sequential> make_cnn() {
  auto m = std::make_unique<Sequential>("mnist_cnn");
  m->add(std::make_shared<Conv2D>(16, Size2{3, 3}, Activation::ReLU));
  m->add(std::make_shared<MaxPool2D>(Size2{2, 2}));
  m->add(std::make_shared<Conv2D>(32, Size2{3, 3}, Activation::ReLU));
  m->add(std::make_shared<MaxPool2D>(Size2{2, 2}));
  m->add(std::make_shared<Flatten>());
  m->add(std::make_shared<Dense>(64, Activation::ReLU));
  m->add(std::make_shared<Dense>(10));
  return m;
}

FitOptions quiet(int64_t batch_size, uint64_t seed) {
  FitOptions o;
  o.epochs = 1;
  o.batch_size = batch_size;
  o.seed = seed;
  o.verbose = 0;
  return o;
}

// A loaded copy of the MNIST model with a new head on its convolutional features ("flatten": what
// transfers from digits to clothes; the MNIST-trained "dense" after it is dropped); its base frozen
// or not.
std::unique_ptr<Model> tuned_from(const std::string& path, bool freeze_base) {
  std::unique_ptr<Model> base = load_model(path);
  if (freeze_base) base->set_trainable(false);  // every layer so far: the head comes after
  SymbolicTensor logits = layer<Dense>(10)(base->layer_output("flatten"));
  auto tuned = std::make_unique<Model>(base->input(), logits, "fashion_from_mnist");
  tuned->build(/*seed=*/7);  // initialises the head; the base's values come from the file
  tuned->compile(std::make_unique<Adam>());
  return tuned;
}

double seconds_of(Model& m, const Dataset& data) {
  const auto t0 = std::chrono::steady_clock::now();
  m.fit(data, quiet(64, 5));
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc != 2 && argc != 3) {
      std::fprintf(stderr, "usage: fine_tuning <mnist_dir> [fashion_mnist_dir]\n");
      return 2;
    }
    const std::filesystem::path mnist_dir = argv[1];
    const std::string fashion_dir = argc == 3 ? argv[2] : (mnist_dir.parent_path() / "fashion-mnist").string();
    const MnistData mnist = load_mnist(mnist_dir.string());
    const MnistData fashion = load_mnist(fashion_dir, "fashion-mnist");

    // 1. The base model: 200 steps on MNIST, saved.
    auto cnn = make_cnn();
    cnn->compile(std::make_unique<Adam>());
    cnn->fit(mnist.train.take(6400), quiet(32, 1));
    const double mnist_accuracy = cnn->evaluate(mnist.test.take(2000)).accuracy;
    const std::string path = (std::filesystem::temp_directory_path() / "ember_fine_tuning.safetensors").string();
    cnn->save(path);

    // 2. Fine-tuning: the loaded base frozen, a new head; 300 steps on Fashion-MNIST.
    const Dataset train = fashion.train.take(9600), test = fashion.test.take(2000);
    std::unique_ptr<Model> tuned = tuned_from(path, /*freeze_base=*/true);
    const std::vector<float> kernel = tuned->get_layer("conv2d").params()[0].to_vector();
    tuned->fit(train, quiet(32, 2));
    const double tuned_accuracy = tuned->evaluate(test).accuracy;
    const bool base_kept = tuned->get_layer("conv2d").params()[0].to_vector() == kernel;

    // 3. The same model from scratch, every layer training, for the same steps.
    auto scratch = make_cnn();
    scratch->compile(std::make_unique<Adam>());
    scratch->fit(train, quiet(32, 2));
    const double scratch_accuracy = scratch->evaluate(test).accuracy;

    // 4. A step with the base frozen against the same model with nothing frozen: 20 steps of 64
    //    each, alternating, the median of 3.
    std::unique_ptr<Model> unfrozen = tuned_from(path, /*freeze_base=*/false);
    std::filesystem::remove(path);
    const Dataset timed = train.take(1280);
    std::vector<double> frozen_s, unfrozen_s;
    for (int round = 0; round < 3; ++round) {
      frozen_s.push_back(seconds_of(*tuned, timed));
      unfrozen_s.push_back(seconds_of(*unfrozen, timed));
    }
    std::sort(frozen_s.begin(), frozen_s.end());
    std::sort(unfrozen_s.begin(), unfrozen_s.end());

    std::printf("%s", tuned->summary().c_str());
    std::printf("MNIST base: test accuracy %.4f after 200 steps\n", mnist_accuracy);
    std::printf("Fashion-MNIST, 300 steps of 32: frozen MNIST base + new head %.4f, the same model from scratch %.4f\n",
                tuned_accuracy, scratch_accuracy);
    std::printf("step (64 images): base frozen %.2f ms, nothing frozen %.2f ms (%.2fx)\n", frozen_s[1] / 20 * 1e3,
                unfrozen_s[1] / 20 * 1e3, frozen_s[1] / unfrozen_s[1]);
    std::printf("frozen base bit-identical after training: %s\n", base_kept ? "yes" : "NO");

    const bool ok = base_kept && mnist_accuracy > 0.8 &&  // chance: 0.1; 0.92 measured
                    tuned_accuracy > 0.5;                 // chance: 0.1; 0.77 measured
    if (!ok) std::fprintf(stderr, "fine_tuning: training or freezing did not behave\n");
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fine_tuning: error: %s\n", e.what());
    return 1;
  }
}
