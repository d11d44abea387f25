// Architecture in the file (version 2, layers/model/architecture.cpp): load_model recreates a
// Sequential or a graph model from a checkpoint without code (configurations, connections,
// weights, moving statistics, optimizer state), equal bit for bit in prediction and in a resumed
// run; load() into a model of another architecture names the first difference, even where every
// tensor would fit; a file written by 371d1ae (before configurations) still loads into its model
// built in code.
#include <gtest/gtest.h>

#include <filesystem>

#include "apps/model_zoo.h"
#include "idx_fixtures.h"
#include "test_util.h"

namespace ember {
namespace {

namespace fs = std::filesystem;

class LoadModel : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::temp_dir("load_model"); }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  std::string dir_;
};

// Every layer type with arguments, in a graph: the configurations must come back as they were.
Model every_layer_graph() {
  SymbolicTensor x = Input(Shape{1, 12, 12}, "pixels");
  SymbolicTensor h = layer<Conv2D>(6, Size2{3, 2}, Activation::ReLU, Padding::Same, Size2{1, 2})(x);
  SymbolicTensor b = layer<BatchNormalization>(0.9f, 2e-3f)(h);
  SymbolicTensor p = layer<MaxPool2D>(Size2{2, 2}, Size2{2, 1}, Padding::Same)(b);
  SymbolicTensor q = layer<AvgPool2D>(Size2{2, 2}, Size2{2, 1}, Padding::Same)(h);
  SymbolicTensor m = maximum({p, q});
  SymbolicTensor s = layer<Conv2D>(6, Size2{1, 1}, Activation::None, Padding::Valid, Size2{1, 1}, false)(m);
  SymbolicTensor c =
      concatenate({layer<LeakyReLU>(0.125f)(s), layer<Tanh>()(m), layer<GELU>(true)(s), layer<GELU>()(m)}, 1);
  SymbolicTensor f = layer<Dropout>(0.375f)(layer<Flatten>()(c));
  SymbolicTensor g = layer<GlobalAvgPool2D>()(layer<Sigmoid>()(c));
  SymbolicTensor d = layer<Dense>(5, Activation::ReLU)(f);
  SymbolicTensor y = layer<Dense>(4)(concatenate({average({d, layer<Dense>(5)(g)}), subtract(d, multiply({d, d}))}));
  return Model(x, layer<Softmax>()(add({y, y})), "every_layer");
}

TEST_F(LoadModel, RecreatesAGraphOfEveryLayerTypeBitForBit) {
  Model m = every_layer_graph();
  m.build(4);
  m.compile(std::make_unique<Adam>());
  const Tensor x = test::random_tensor(Shape{8, 1, 12, 12}, 5, 0.0f, 1.0f);
  Tensor labels = Tensor::zeros(Shape{8}, DType::I32);
  for (int i = 0; i < 8; ++i) labels.data<int32_t>()[i] = i % 4;
  for (int i = 0; i < 3; ++i) m.train_step(x, labels);  // moving statistics, Adam moments, Dropout's step
  m.save(path("graph.st"), TrainingState{.epochs_done = 2, .seed = 7, .batch_size = 8});
  TrainingState st;
  std::unique_ptr<Model> back = load_model(path("graph.st"), &st);
  EXPECT_EQ(st.epochs_done, 2);
  EXPECT_TRUE(back->is_graph());
  EXPECT_EQ(back->name(), "every_layer");
  EXPECT_EQ(back->input_name(), "pixels");
  ASSERT_EQ(back->layers().size(), m.layers().size());
  for (size_t i = 0; i < m.layers().size(); ++i) {
    EXPECT_EQ(back->layers()[i]->name(), m.layers()[i]->name());
    EXPECT_EQ(back->layers()[i]->config(), m.layers()[i]->config()) << m.layers()[i]->name();
    EXPECT_EQ(back->layer_inputs(i), m.layer_inputs(i)) << m.layers()[i]->name();
  }
  EXPECT_EQ(back->summary(), m.summary());
  EXPECT_EQ(back->params().to_vector(), m.params().to_vector());
  EXPECT_EQ(back->state().to_vector(), m.state().to_vector());
  EXPECT_EQ(back->predict(x).to_vector(), m.predict(x).to_vector());
  // The optimizer state waits for compile(): the next steps are the original's.
  back->compile(std::make_unique<Adam>());
  for (int i = 0; i < 2; ++i) EXPECT_EQ(back->train_step(x, labels), m.train_step(x, labels)) << i;
  EXPECT_EQ(back->params().to_vector(), m.params().to_vector());
}

TEST_F(LoadModel, RecreatesTheAppsModelsAndTheirResults) {
  const Tensor x = test::random_tensor(Shape{4, 1, 28, 28}, 6, 0.0f, 1.0f);
  Sequential bn;
  apps::add_bn_cnn(bn);
  bn.build(Shape{1, 28, 28}, 2);
  bn.save(path("bn.st"));
  std::unique_ptr<Model> bn_back = load_model(path("bn.st"));
  EXPECT_FALSE(bn_back->is_graph());  // a Sequential again
  EXPECT_EQ(bn_back->summary(), bn.summary());
  EXPECT_EQ(bn_back->predict(x).to_vector(), bn.predict(x).to_vector());
  Model resnet = apps::make_resnet();
  resnet.build(3);
  resnet.save(path("resnet.st"));
  std::unique_ptr<Model> res_back = load_model(path("resnet.st"));
  EXPECT_EQ(res_back->num_params(), 151274);
  EXPECT_EQ(res_back->summary(), resnet.summary());
  EXPECT_EQ(res_back->predict(x).to_vector(), resnet.predict(x).to_vector());
}

// A model of the same parameter shapes and another architecture (a ReLU removed, an activation
// changed, an input rewired): each difference is named, nothing is loaded.
TEST_F(LoadModel, LoadIntoAnotherArchitectureNamesTheFirstDifference) {
  const auto stack = [](bool relu_layer, Activation a) {
    Sequential m;
    m.add<Conv2D>(4, Size2{3, 3}, Activation::None);
    if (relu_layer) m.add<ReLU>();
    m.add<Flatten>();
    m.add<Dense>(10, a);
    m.build(Shape{1, 6, 6}, 1);
    return m;
  };
  stack(true, Activation::None).save(path("relu.st"));
  const auto expect_named = [&](Model& m, const std::string& file, const std::string& needle) {
    const std::vector<float> before = m.params().to_vector();
    try {
      m.load(path(file));
      ADD_FAILURE() << "loaded " << file << " into another architecture";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    EXPECT_EQ(m.params().to_vector(), before);
  };
  Sequential no_relu = stack(false, Activation::None);
  expect_named(no_relu, "relu.st", "holds a model of 4 layers; this one has 3");
  Sequential relu_dense = stack(true, Activation::ReLU);
  expect_named(relu_dense, "relu.st",
               "layer 'dense' (Dense): 'activation' is \"linear\" in the file but \"relu\" here");
  const auto graph = [](bool from_h) {
    SymbolicTensor x = Input(Shape{4});
    SymbolicTensor h = layer<Dense>(4)(x);
    SymbolicTensor k = layer<Dense>(4)(h);
    return Model(x, layer<Dense>(2)(add({k, from_h ? h : k})));
  };
  Model a = graph(true), b = graph(false);
  a.build(1);
  b.build(1);
  a.save(path("a.st"));
  expect_named(b, "a.st", "layer 'add' (Add) is called on [\"dense_1\",\"dense\"] in the file");
}

TEST_F(LoadModel, RefusesWhatItCannotRecreateNamingIt) {
  // A user layer nobody registered: named, with what to do.
  struct Scale : Layer {
    std::string type() const override { return "UserScale"; }
    Shape build(const Shape& s) override { return s; }
    const Tensor& do_forward(const Tensor& x, bool) override { return x; }
    const Tensor& do_backward(const Tensor& dy) override { return dy; }
  };
  SymbolicTensor x = Input(Shape{3});
  Model m(x, layer<Dense>(2)(layer<Scale>()(x)));
  m.build(1);
  m.save(path("user.st"));
  try {
    load_model(path("user.st"));
    ADD_FAILURE();
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("register_layer(\"UserScale\""), std::string::npos) << e.what();
  }
  EXPECT_FALSE(layer_registered("UserScale"));
  EXPECT_TRUE(layer_registered("Dense"));
  register_layer("UserScale", [](const LayerConfig&) { return std::make_shared<Scale>(); });
  EXPECT_TRUE(layer_registered("UserScale"));
  EXPECT_EQ(load_model(path("user.st"))->layers()[0]->type(), "UserScale");
  // A configuration asking for more than the file holds (a Dense of 2^40 units) is refused before
  // anything is allocated; metadata nested deeper than 32 levels before anything recurses over it.
  {
    Sequential d;
    d.add<Dense>(3);
    d.build(Shape{2}, 1);
    d.save(path("d.st"));
    SafeTensors f = read_safetensors(path("d.st"));
    std::string arch = f.metadata["architecture"];
    const size_t at = arch.find("\"units\":\"3\"");
    ASSERT_NE(at, std::string::npos) << arch;
    f.metadata["architecture"] = arch.substr(0, at) + "\"units\":\"1099511627776\"" + arch.substr(at + 11);
    write_safetensors(path("huge.st"), f);
    try {
      load_model(path("huge.st"));
      ADD_FAILURE();
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("needs 'dense/kernel' of (1099511627776, 2)"), std::string::npos)
          << e.what();
    }
    const size_t in = arch.find("\"inbound\":[");
    ASSERT_NE(in, std::string::npos) << arch;
    f.metadata["architecture"] = arch.substr(0, in) + "\"inbound\":" + std::string(100000, '[') +
                                 std::string(100000, ']') + arch.substr(arch.find(']', in) + 1);
    write_safetensors(path("deep.st"), f);
    try {
      d.load(path("deep.st"));
      ADD_FAILURE();
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("nests deeper than 32"), std::string::npos) << e.what();
    }
  }
  // A malformed configuration is the file's fault, named.
  Sequential s;
  s.add<Dense>(3);
  s.build(Shape{2}, 1);
  SafeTensors st;
  s.save(path("dense.st"));
  st = read_safetensors(path("dense.st"));
  const std::string arch = st.metadata["architecture"];
  const size_t units = arch.find("\"units\":\"3\"");
  ASSERT_NE(units, std::string::npos) << arch;
  st.metadata["architecture"] = arch.substr(0, units) + "\"units\":\"three\"" + arch.substr(units + 11);
  write_safetensors(path("bad.st"), st);
  try {
    load_model(path("bad.st"));
    ADD_FAILURE();
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("'units' is 'three'"), std::string::npos) << e.what();
  }
}

// tests/data/legacy_371d1ae_reference.safetensors, written by train_mnist built at 371d1ae (before
// architectures held configurations): `train_mnist --device cpu --epochs 1 --steps 3 --seed 1
// --save FILE` on MNIST, the reference CNN after 3 Adam steps. It loads into the model built in
// code, with its Adam state, and load_model says why it cannot recreate it.
TEST_F(LoadModel, ACheckpointOf371d1aeLoadsIntoItsModel) {
  const std::string file = std::string(EMBER_TEST_DATA_DIR) + "/legacy_371d1ae_reference.safetensors";
  Sequential m;
  apps::add_reference_cnn(m);
  m.build(Shape{1, 28, 28}, 99);
  const std::vector<float> fresh = m.params().to_vector();
  const TrainingState st = m.load(file);
  EXPECT_EQ(st.seed, 1u);
  EXPECT_NE(m.params().to_vector(), fresh);
  m.compile(std::make_unique<Adam>());
  EXPECT_EQ(m.optimizer()->iterations(), 3);
  try {
    load_model(file);
    ADD_FAILURE();
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("before checkpoints held layer configurations"), std::string::npos)
        << e.what();
  }
  // Its names and types are still compared: a model of another stack is named.
  Sequential other;
  apps::add_bn_cnn(other);
  other.build(Shape{1, 28, 28}, 1);
  EXPECT_THROW(other.load(file), CheckpointError);
}

}  // namespace
}  // namespace ember
