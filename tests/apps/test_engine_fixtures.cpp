// The training engine's results held against fixtures: train_mnist trains the reference CNN and
// the resnet under both convolution policies, bn-cnn and the reference CNN as two Mirrored replicas
// under Fast, for two short epochs each, and every tensor of each checkpoint (parameters, moving statistics,
// optimizer state) must hash to what the fixture files recorded. A change to how the engine runs a
// step (the order of its sums, its slices, its fusions, the epoch loop) that changes one bit of one
// value fails here, naming the case and the tensors.
//
// Two sets, on one thread each (the kernels' sums then do not depend on the thread count):
// - tests/data/engine_fixtures.txt: the paths a CPU without AVX-512 takes (ONEDNN_MAX_CPU_ISA=AVX2,
//   EMBER_MAX_CPU_ISA=avx2), on every x86-64 CPU;
// - tests/data/engine_fixtures_avx512.txt: Ember's AVX-512 kernels and oneDNN's AVX512_CORE ones
//   (ONEDNN_MAX_CPU_ISA=AVX512_CORE), on a CPU with AVX-512 (skipped elsewhere, and when
//   EMBER_MAX_CPU_ISA caps this process).
// Each file lists the CPU kinds (vendor, family, model) its hashes were checked on. On another kind
// a difference is reported as a skip naming the tensors (oneDNN could choose its blocking from a
// cache size there), and a match says so, so that the kind can be added.
//
// EMBER_WRITE_ENGINE_FIXTURES=DIR writes the hashes this build computes to DIR/<the file's name>
// instead, with this CPU's kind as the one checked on: the way the fixtures were made (the line
// naming the commit they were made at is added to the file by hand).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "app_run.h"
#include "core/cpu/cpu_features.h"
#include "ember.h"
#include "idx_fixtures.h"

namespace {

using ember::test::AppRun;
using ember::test::run_raw;
using ember::test::train_mnist_bin;

struct FixtureCase {
  const char* name;
  const char* flags;
};

// Two epochs over 320 images with a validation pass after each: the epoch loop, the schedules,
// evaluation and the checkpoint's training state are all in the hashes. Batch 96 trains three
// full batches and a short one of 32 per epoch, and runs the reference CNN's batches of 96 under
// Fast as CPU micro-batches of 64 and 32 rows; Exact slices every batch into 16 rows.
constexpr FixtureCase kCases[] = {
    {"reference_fast", "--model reference --conv-algorithms fast --batch-size 96"},
    {"reference_exact", "--model reference --conv-algorithms exact --batch-size 32"},
    {"bn_cnn_fast", "--model bn-cnn --conv-algorithms fast --batch-size 32"},
    {"resnet_fast", "--model resnet --conv-algorithms fast --batch-size 96"},
    {"resnet_exact", "--model resnet --conv-algorithms exact --batch-size 32"},
    {"reference_mirrored2_fast",
     "--model reference --conv-algorithms fast --batch-size 32 --strategy mirrored --replicas 2"},
};

// FNV-1a over a tensor's bytes: a fingerprint, not a defence against an adversary.
uint64_t fnv1a(const void* data, size_t bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

// "<tensor> <dtype> <shape> <hash>" per tensor of a checkpoint, in the file's order.
std::vector<std::string> tensor_lines(const std::string& path) {
  std::vector<std::string> out;
  for (const auto& [name, t] : ember::read_safetensors(path).tensors) {
    std::ostringstream os;
    os << name << " " << ember::dtype_name(t.dtype()) << " " << t.shape().str() << " " << std::hex
       << fnv1a(t.raw(), t.nbytes());
    out.push_back(os.str());
  }
  return out;
}

// "AuthenticAMD 25/1": the CPU's vendor, family and model from /proc/cpuinfo.
std::string cpu_kind() {
  std::ifstream in("/proc/cpuinfo");
  std::map<std::string, std::string> fields;
  for (std::string line; std::getline(in, line) && !line.empty();) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
    fields[key] = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
  }
  return fields["vendor_id"] + " " + fields["cpu family"] + "/" + fields["model"];
}

struct Fixtures {
  std::map<std::string, std::vector<std::string>> cases;  // per case, its tensor lines
  std::vector<std::string> kinds;                         // "# checked on: <kind>" lines
};

Fixtures read_fixtures(const std::string& path) {
  Fixtures f;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# checked on: ", 0) == 0) f.kinds.push_back(line.substr(14));
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.find(' ');
    f.cases[line.substr(0, space)].push_back(line.substr(space + 1));
  }
  return f;
}

// A fixture set: the ISA caps its runs take and the file of its hashes.
struct IsaPaths {
  const char* env;
  const char* file;
};
constexpr IsaPaths kAvx2{"ONEDNN_MAX_CPU_ISA=AVX2 EMBER_MAX_CPU_ISA=avx2",
                         EMBER_ENGINE_FIXTURES_DIR "/engine_fixtures.txt"};
constexpr IsaPaths kAvx512{"ONEDNN_MAX_CPU_ISA=AVX512_CORE", EMBER_ENGINE_FIXTURES_DIR "/engine_fixtures_avx512.txt"};

class EngineFixtures : public ::testing::Test {
 protected:
  void SetUp() override {
#if !defined(__x86_64__)
    GTEST_SKIP() << "the fixtures hold x86-64's AVX2 and AVX-512 paths";
#endif
    dir_ = ember::test::temp_dir("fixtures");
    ember::test::write_synthetic_mnist(dir_, 320, 64, false, 7);
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  // The checkpoint's tensor lines after a case's run.
  std::vector<std::string> train(const FixtureCase& c, const IsaPaths& isa) {
    const std::string out = dir_ + "/" + c.name + ".st";
    const AppRun r =
        run_raw(std::string(isa.env) + " " + train_mnist_bin() + " " + c.flags +
                " --device cpu --threads 1 --epochs 2 --seed 5 --quiet --data-dir " + dir_ + " --save " + out);
    EXPECT_EQ(r.code, 0) << c.name << ": " << r.output;
    return r.code == 0 ? tensor_lines(out) : std::vector<std::string>{};
  }
  // Every case's checkpoint against the set's file (or, writing, into DIR).
  void check(const IsaPaths& isa) {
    const std::string file = std::filesystem::path(isa.file).filename().string();
    if (const char* write = std::getenv("EMBER_WRITE_ENGINE_FIXTURES"); write && *write) {
      std::ofstream out(std::string(write) + "/" + file);
      out << "# Engine fixtures (tests/apps/test_engine_fixtures.cpp): per case, each checkpoint tensor's\n"
          << "# dtype, shape and FNV-1a hash of its bytes.\n# checked on: " << cpu_kind() << "\n";
      for (const FixtureCase& c : kCases)
        for (const std::string& line : train(c, isa)) out << c.name << " " << line << "\n";
      ASSERT_TRUE(out.good()) << "cannot write " << write << "/" << file;
      GTEST_SKIP() << "wrote the fixtures to " << write << "/" << file;
    }
    const Fixtures fixtures = read_fixtures(isa.file);
    ASSERT_EQ(fixtures.cases.size(), std::size(kCases)) << "cannot read the cases of " << isa.file;
    const std::string kind = cpu_kind();
    const bool checked_kind = std::find(fixtures.kinds.begin(), fixtures.kinds.end(), kind) != fixtures.kinds.end();
    std::ostringstream differ;
    for (const FixtureCase& c : kCases) {
      const std::vector<std::string> got = train(c, isa);
      const std::vector<std::string>& want = fixtures.cases.at(c.name);
      if (got.size() != want.size()) {
        differ << c.name << ": " << got.size() << " tensors, the fixture " << want.size() << "\n";
        continue;
      }
      for (size_t i = 0; i < got.size(); ++i)
        if (got[i] != want[i]) differ << c.name << ": " << got[i] << " (the fixture: " << want[i] << ")\n";
    }
    if (differ.str().empty()) {
      if (!checked_kind)
        std::cout << "the fixtures of " << file << " hold on " << kind << ", a CPU kind it does not list yet\n";
      return;
    }
    if (!checked_kind)
      GTEST_SKIP() << "on " << kind << ", a CPU kind " << file << " was not checked on, these differ:\n"
                   << differ.str();
    ADD_FAILURE() << "the checkpoints differ from " << file << ":\n" << differ.str();
  }
  std::string dir_;
};

TEST_F(EngineFixtures, TrainingGivesTheRecordedCheckpoints) { check(kAvx2); }

TEST_F(EngineFixtures, TrainingOnAvx512PathsGivesTheRecordedCheckpoints) {
  if (!ember::cpu_avx512()) GTEST_SKIP() << "no AVX-512 here (or EMBER_MAX_CPU_ISA caps this process)";
  check(kAvx512);
}

}  // namespace
