// Regression on data made in std::vectors: y = sin(3x) + noise (sd 0.1), x ~ U(-1, 1), 10,000
// points; an MLP trained with mean squared error, 20% of the points held out by
// validation_split. The noise alone costs 0.0100 of MSE; the check asks for <= 0.0110.
//   regression                (last line: val_mse X; needs no data)
#include <ember/ember.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

using namespace ember;

int main() {
  try {
    constexpr int kPoints = 10000;
    std::mt19937_64 gen(7);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::normal_distribution<float> noise(0.0f, 0.1f);
    std::vector<float> x(kPoints), y(kPoints);
    for (int i = 0; i < kPoints; ++i) {
      x[i] = uniform(gen);
      y[i] = std::sin(3.0f * x[i]) + noise(gen);
    }
    const Dataset data = Dataset::from_vectors(x, Shape{1}, y, Shape{});  // targets (N, 1)

    Sequential model;
    model.add<Dense>(64, Activation::ReLU);
    model.add<Dense>(64, Activation::ReLU);
    model.add<Dense>(1);
    model.build(Shape{1}, /*seed=*/1);
    model.compile(std::make_unique<Adam>(AdamOptions{.learning_rate = 3e-3f}),
                  std::make_unique<losses::MeanSquaredError>(), {std::make_shared<metrics::MeanAbsoluteError>()});
    FitOptions options;
    options.epochs = 40;
    options.batch_size = 64;
    options.seed = 1;
    options.verbose = 0;
    options.validation_split = 0.2;
    options.learning_rate_schedule = LearningRateSchedule{
        .kind = LearningRateSchedule::Kind::Cosine, .initial = 3e-3f, .decay = 0.0f, .decay_epochs = 40};
    const History history = model.fit(data, options);
    const EpochLogs& last = history.epochs.back();
    std::printf("%s", model.summary().c_str());
    std::printf("epoch %d: loss %.5f, val_mae %.5f (noise floor of the mse: 0.0100)\n", last.epoch, last.loss,
                *find_value(last.val_metrics, "mae"));
    const double val_mse = *last.val_loss;
    std::printf("val_mse %.5f\n", val_mse);
    return val_mse <= 0.0110 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "regression: error: %s\n", e.what());
    return 1;
  }
}
