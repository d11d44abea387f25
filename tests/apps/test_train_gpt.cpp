// The train_gpt app, run as a user runs it: a small GPT on a synthetic text learns (the validation
// loss far below the uniform guess), saves, and samples from the file alone, the same text for the
// same seed; bad command lines exit 2 with one line, a missing text exits 1 naming it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "app_run.h"
#include "idx_fixtures.h"

namespace ember {
namespace {

std::string gpt(const std::string& args) { return std::string(EMBER_TRAIN_GPT) + " " + args; }

// A text whose next byte is mostly predictable: words from a small list in a fixed cycle.
std::string synthetic_text() {
  const char* words[] = {"the ", "whale ", "and ", "sea ", "ship ", "call ", "me ", "ahab "};
  std::string s;
  for (int i = 0; s.size() < 24000; ++i) s += words[(i * 3 + i / 7) % 8];
  return s;
}

TEST(TrainGpt, LearnsSavesAndSamplesFromTheFileAlone) {
  const std::string dir = test::temp_dir("train_gpt");
  const std::string text = synthetic_text();
  std::ofstream(dir + "/t.txt") << text;
  const test::AppRun r = test::run_raw(
      gpt("--data " + dir +
          "/t.txt --steps 60 --blocks 1 --heads 2 --features 16 --context 16 --batch-size 8 "
          "--warmup-steps 5 --learning-rate 3e-3 --dropout 0.1 --log-every 20 --threads 1 --device cpu --save " +
          dir + "/m.st --history " + dir + "/h.json"));
  ASSERT_EQ(r.code, 0) << r.output;
  const size_t at = r.output.find("Validation loss: ");
  ASSERT_NE(at, std::string::npos) << r.output;
  const double val = std::stod(r.output.substr(at + 17));
  // 15 distinct bytes: a uniform guess costs ln 15 = 2.71 nats; 60 steps learn the words' spelling
  // (1.49 measured with --dropout 0.1, 1.36 without).
  EXPECT_LT(val, 2.0) << r.output;
  EXPECT_NE(r.output.find("median step"), std::string::npos) << r.output;
  std::ifstream h(dir + "/h.json");
  const nlohmann::json j = nlohmann::json::parse(h);
  ASSERT_EQ(j["losses"].size(), 3u);
  EXPECT_LT(j["losses"][2]["loss"].get<double>(), j["losses"][0]["loss"].get<double>());
  EXPECT_NEAR(j["val_loss"].get<double>(), val, 5e-5);  // the line prints 4 decimals

  const std::string sample = "--load " + dir + "/m.st --sample 40 --prompt 'the ' --seed 3 --temperature 0.8";
  const test::AppRun a = test::run_raw(gpt(sample)), b = test::run_raw(gpt(sample));
  ASSERT_EQ(a.code, 0) << a.output;
  EXPECT_EQ(a.output, b.output);              // the same seed, the same text
  ASSERT_EQ(a.output.size(), 4u + 40u + 1u);  // the prompt, 40 bytes, a newline
  EXPECT_EQ(a.output.substr(0, 4), "the ");
  const std::set<char> vocabulary(text.begin(), text.end());
  for (char c : a.output.substr(4, 40)) EXPECT_TRUE(vocabulary.count(c)) << int(c);
  std::filesystem::remove_all(dir);
}

TEST(TrainGpt, BadCommandLinesExit2AndAMissingTextExits1) {
  const test::AppRun heads = test::run_raw(gpt("--features 10 --heads 4"));
  EXPECT_EQ(heads.code, 2) << heads.output;
  EXPECT_NE(heads.output.find("multiple of --heads"), std::string::npos) << heads.output;
  EXPECT_EQ(test::run_raw(gpt("--load x.st")).code, 2);
  EXPECT_EQ(test::run_raw(gpt("--steps 0")).code, 2);
  EXPECT_EQ(test::run_raw(gpt("--dropout 1")).code, 2);
  EXPECT_EQ(test::run_raw(gpt("--stpes 10")).code, 2);
  const test::AppRun missing = test::run_raw(gpt("--data /nonexistent/t.txt --steps 1"));
  EXPECT_EQ(missing.code, 1) << missing.output;
  EXPECT_NE(missing.output.find("/nonexistent/t.txt"), std::string::npos) << missing.output;
}

}  // namespace
}  // namespace ember
