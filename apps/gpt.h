// The small GPT of train_gpt (a GPT-2-style decoder over bytes) and the pieces of its recipe that
// tests and benchmarks share: the model, the learning-rate curve, the sampler.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ember.h"

namespace ember::apps {

struct GptConfig {
  int64_t vocabulary = 0;  // distinct bytes
  int64_t context = 64;    // T
  int64_t blocks = 4;      // decoder blocks
  int64_t heads = 4;       // attention heads per block
  int64_t features = 128;  // C (a multiple of heads)
  float epsilon = 1e-5f;   // the LayerNormalizations' (PyTorch's default)
  float dropout = 0.0f;    // nanoGPT's: the embeddings' sum, the attention probabilities, each residual branch
};

// Token and position embeddings; blocks of LayerNormalization -> causal MultiHeadAttention ->
// residual Add, LayerNormalization -> Dense(4C, GELU tanh) -> Dense(C) -> residual Add; a final
// LayerNormalization; a Dense head to the vocabulary's logits at every step. Keras' initialisers.
// With dropout, nanoGPT's places: after the embeddings, on the attention probabilities, and at the
// end of each residual branch.
inline std::shared_ptr<Model> gpt_model(const GptConfig& g) {
  const auto drop = [&](SymbolicTensor t) { return g.dropout > 0.0f ? layer<Dropout>(g.dropout)(t) : t; };
  SymbolicTensor ids = Input(Shape{g.context}, "ids");
  SymbolicTensor x = drop(layer<PositionEmbedding>(g.context)(layer<Embedding>(g.vocabulary, g.features)(ids)));
  for (int64_t b = 0; b < g.blocks; ++b) {
    SymbolicTensor h = layer<LayerNormalization>(g.epsilon)(x);
    h = layer<MultiHeadAttention>(g.heads, g.features / g.heads,
                                  AttentionOptions{.causal = true, .dropout = g.dropout})(h);
    x = layer<Add>()({x, drop(h)});
    h = layer<LayerNormalization>(g.epsilon)(x);
    h = layer<Dense>(4 * g.features, Activation::GELUTanh)(h);
    h = layer<Dense>(g.features)(h);
    x = layer<Add>()({x, drop(h)});
  }
  x = layer<LayerNormalization>(g.epsilon)(x);
  return std::make_shared<Model>(ids, layer<Dense>(g.vocabulary)(x), "gpt");
}

// The rate before step s (0-based) of `steps`: linear warm-up to `peak` over `warmup` steps, then a
// cosine from `peak` down to `floor` at the last step.
inline float gpt_learning_rate(int64_t s, int64_t steps, int64_t warmup, float peak, float floor) {
  if (s < warmup) return peak * static_cast<float>(s + 1) / static_cast<float>(warmup);
  const int64_t span = std::max<int64_t>(steps - 1 - warmup, 1);
  const double r = std::min(1.0, static_cast<double>(s - warmup) / static_cast<double>(span));
  return static_cast<float>(floor + 0.5 * (1.0 + std::cos(3.14159265358979323846 * r)) * (peak - floor));
}

// The next id from one row of logits: softmax(z / temperature) over the top_k largest (0: all),
// drawn with `rng` (one uniform).
inline int32_t sample_logits(const float* z, int64_t k, float temperature, int64_t top_k, Rng& rng) {
  std::vector<std::pair<float, int32_t>> order;
  for (int64_t i = 0; i < k; ++i) order.push_back({z[i], static_cast<int32_t>(i)});
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  if (top_k > 0 && top_k < k) order.resize(static_cast<size_t>(top_k));
  std::vector<double> p;
  double sum = 0;
  for (const auto& [v, i] : order) sum += p.emplace_back(std::exp((v - order[0].first) / temperature));
  double u = rng.uniform() * sum;
  for (size_t i = 0; i < p.size(); ++i)
    if ((u -= p[i]) < 0) return order[i].second;
  return order.back().second;
}

}  // namespace ember::apps
