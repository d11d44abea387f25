// A small character model on a text held in the program: ids through an Embedding and learned
// positions, one pre-LN causal transformer block, a per-step head; trained on random windows
// (SequenceDataset), validated on the text's last tenth, saved, recreated from the file alone and
// sampled. The check: the validation loss falls below the text's unigram entropy (what a model
// that ignores the context at best reaches) and the recreated model predicts the same bits.
//   text_model [ignored]      (last line: val_loss X; needs no data)
#include <ember/ember.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

using namespace ember;

namespace {
// Words in a fixed pattern: the next byte follows from the last few, which only a model that
// reads its context learns.
std::string make_text() {
  const char* words[] = {"call ", "me ", "ishmael. ", "some ", "years ", "ago ", "never ", "mind ", "how ", "long "};
  std::string s;
  for (int i = 0; s.size() < 30000; ++i) s += words[(i * 7 + i / 10) % 10];
  return s;
}

double unigram_entropy(const std::vector<int32_t>& ids) {
  std::map<int32_t, double> counts;
  for (int32_t id : ids) counts[id] += 1;
  double h = 0;
  for (const auto& [id, c] : counts) h -= c / double(ids.size()) * std::log(c / double(ids.size()));
  return h;
}

Model tiny_gpt(int64_t vocabulary, int64_t context) {
  constexpr int64_t kFeatures = 32;
  SymbolicTensor ids = Input(Shape{context}, "ids");
  SymbolicTensor x = layer<PositionEmbedding>(context)(layer<Embedding>(vocabulary, kFeatures)(ids));
  SymbolicTensor h = layer<MultiHeadAttention>(2, kFeatures / 2,
                                               AttentionOptions{.causal = true})(layer<LayerNormalization>(1e-5f)(x));
  x = add({x, h});
  h = layer<Dense>(4 * kFeatures)(layer<LayerNormalization>(1e-5f)(x));
  x = add({x, layer<Dense>(kFeatures)(layer<GELU>(true)(h))});
  return Model(ids, layer<Dense>(vocabulary)(layer<LayerNormalization>(1e-5f)(x)), "text_model");
}
}  // namespace

int main() {
  try {
    constexpr int64_t kContext = 32;
    const std::string text = make_text();
    const ByteVocabulary vocab(text);
    const std::vector<int32_t> ids = vocab.encode(text);
    const auto split = ids.end() - static_cast<std::ptrdiff_t>(ids.size() / 10);
    const SequenceDataset train(std::vector<int32_t>(ids.begin(), split), kContext);
    const SequenceDataset val(std::vector<int32_t>(split, ids.end()), kContext);

    Model model = tiny_gpt(vocab.size(), kContext);
    model.build(/*seed=*/1);
    model.compile(
        std::make_unique<AdamW>(AdamWOptions{.learning_rate = 3e-3f, .weight_decay = 0.01f, .global_clipnorm = 1.0f}));
    Rng rng(1);
    for (int step = 0; step < 150; ++step) {
      const SequenceBatch b = train.train_batch(16, rng);
      model.train_step(b.x, b.y);
    }
    const double val_loss = model.evaluate(val.eval_dataset(), 64).loss;
    const double floor = unigram_entropy(ids);

    model.save("text_model.st");
    const auto back = load_model("text_model.st");
    const SequenceBatch windows = val.eval_windows();
    const bool same = back->predict(windows.x).to_vector() == model.predict(windows.x).to_vector();

    // Greedy continuation of the validation text's first window.
    Tensor x = windows.x.rows(0, 1).clone();
    std::string continuation;
    for (int i = 0; i < 40; ++i) {
      const Tensor z = back->predict(x);
      const float* last = z.f32() + (kContext - 1) * vocab.size();
      int32_t best = 0;
      for (int32_t k = 1; k < vocab.size(); ++k)
        if (last[k] > last[best]) best = k;
      continuation += vocab.decode(std::vector<int32_t>{best});
      int32_t* d = x.data<int32_t>();
      for (int64_t t = 0; t + 1 < kContext; ++t) d[t] = d[t + 1];
      d[kContext - 1] = best;
    }
    std::printf("%s\n", model.summary().c_str());
    std::printf("unigram entropy %.4f nats/byte; greedy continuation: \"%s\"\n", floor, continuation.c_str());
    std::printf("val_loss %.4f\n", val_loss);
    if (!same) {
      std::fprintf(stderr, "text_model: the recreated model predicts other values\n");
      return 1;
    }
    if (!(val_loss < 0.5 * floor)) {
      std::fprintf(stderr, "text_model: val_loss %.4f is not below half the unigram entropy %.4f\n", val_loss, floor);
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "text_model: %s\n", e.what());
    return 1;
  }
}
