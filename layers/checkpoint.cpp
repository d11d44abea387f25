// safetensors reading/writing and the model-level checkpoint (see checkpoint.h).
#include "checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "../core/runtime.h"
#include "sequential.h"

namespace ember {

namespace {
using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // safetensors' own limit

const char* st_dtype(DType t) {
  switch (t) {
    case DType::F32:
      return "F32";
    case DType::I32:
      return "I32";
    case DType::U8:
      return "U8";
    case DType::F64:
      return "F64";
  }
  return "?";
}

// Writes all of buf or throws; `budget` simulates a crash (tests) by failing once it runs out.
void write_all(int fd, const void* buf, size_t n, const std::string& path, int64_t& budget) {
  const char* p = static_cast<const char*>(buf);
  while (n > 0) {
    size_t chunk = n;
    if (budget >= 0) {
      if (budget == 0) throw IoError("writing " + path + " failed: simulated crash");
      chunk = std::min<size_t>(chunk, static_cast<size_t>(budget));
    }
    const ssize_t w = ::write(fd, p, chunk);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw IoError("writing " + path + " failed: " + std::strerror(errno));
    }
    if (budget >= 0) budget -= w;
    p += w;
    n -= static_cast<size_t>(w);
  }
}

[[noreturn]] void bad(const std::string& path, const std::string& why) {
  throw CheckpointError("checkpoint " + path + ": " + why);
}
}  // namespace

void write_safetensors(const std::string& path, const SafeTensors& st, int64_t fail_after_bytes) {
  json header = json::object();
  uint64_t offset = 0;
  for (const auto& [name, t] : st.tensors) {
    EMBER_CHECK(t.defined() && t.device().is_cpu(), ArgumentError,
                "write_safetensors: tensor '" + name + "' must be a defined cpu tensor");
    EMBER_CHECK(name != "__metadata__" && !header.contains(name), ArgumentError,
                "write_safetensors: duplicate or reserved tensor name '" + name + "'");
    json shape = json::array();
    for (int64_t d : t.shape()) shape.push_back(d);
    header[name] = {{"dtype", st_dtype(t.dtype())}, {"shape", shape}, {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  if (!st.metadata.empty()) header["__metadata__"] = st.metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned
  const uint64_t n = text.size();
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));  // little-endian

  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const std::string tmp = (dir / ("." + target.filename().string() + ".tmp." + std::to_string(::getpid()))).string();
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw IoError("cannot write checkpoint " + path + ": " + std::strerror(errno));
  int64_t budget = fail_after_bytes;
  try {
    write_all(fd, len, 8, path, budget);
    write_all(fd, text.data(), text.size(), path, budget);
    for (const auto& [name, t] : st.tensors) {
      const Tensor rm = t.layout() == Layout::RowMajor ? t : t.to_layout(Layout::RowMajor);
      write_all(fd, rm.raw(), rm.nbytes(), path, budget);  // x86-64 is little-endian, as the format
    }
    if (::fsync(fd) != 0) throw IoError("fsync of " + tmp + " failed: " + std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    throw IoError("closing " + tmp + " failed: " + std::strerror(errno));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw IoError("cannot move the checkpoint into place at " + path + ": " + why);
  }
  // Make the rename itself durable.
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

SafeTensors read_safetensors(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) throw CheckpointError("cannot open checkpoint " + path + ": " + std::strerror(errno));
  const auto size = static_cast<uint64_t>(f.tellg());
  if (size < 8) bad(path, "file of " + std::to_string(size) + " bytes is too short for a safetensors header");
  f.seekg(0);
  unsigned char len[8];
  f.read(reinterpret_cast<char*>(len), 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  if (n > kMaxHeaderBytes || n > size - 8)
    bad(path, "header length " + std::to_string(n) + " does not fit a file of " + std::to_string(size) + " bytes");
  std::string text(n, '\0');
  if (!f.read(text.data(), static_cast<std::streamsize>(n))) bad(path, "cannot read the header");
  json header;
  try {
    header = json::parse(text);
  } catch (const json::exception& e) {
    bad(path, std::string("the header is not valid JSON (") + e.what() + ")");
  }
  if (!header.is_object()) bad(path, "the header is not a JSON object");
  const uint64_t data_size = size - 8 - n;
  std::vector<char> data(data_size);
  if (data_size > 0 && !f.read(data.data(), static_cast<std::streamsize>(data_size))) bad(path, "cannot read the data");

  SafeTensors st;
  uint64_t covered = 0;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) bad(path, "__metadata__ is not an object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) bad(path, "metadata '" + m.key() + "' is not a string");
        st.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    const json& e = *it;
    const std::string& name = it.key();
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets"))
      bad(path, "tensor '" + name + "' lacks dtype, shape or data_offsets");
    DType dt;
    const json& d = e["dtype"];
    if (d == "F32")
      dt = DType::F32;
    else if (d == "I32")
      dt = DType::I32;
    else if (d == "U8")
      dt = DType::U8;
    else
      bad(path, "tensor '" + name + "' has dtype " + d.dump() + "; Ember reads F32, I32 and U8");
    const json& sh = e["shape"];
    const json& off = e["data_offsets"];
    if (!sh.is_array() || static_cast<int>(sh.size()) > Shape::kMaxRank || !off.is_array() || off.size() != 2)
      bad(path, "tensor '" + name + "' has a malformed shape or data_offsets");
    uint64_t count = 1;
    for (const json& v : sh) {
      if (!v.is_number_unsigned() || v.get<uint64_t>() > (uint64_t{1} << 40))
        bad(path, "tensor '" + name + "' has a bad dimension");
      count *= v.get<uint64_t>();
      if (count > data_size) count = data_size + 1;  // saturate; fails the size check below
    }
    for (const json& v : off)
      if (!v.is_number_unsigned()) bad(path, "tensor '" + name + "' has non-integer data_offsets");
    const uint64_t b = off[0], en = off[1];
    if (b > en || en > data_size)
      bad(path, "tensor '" + name + "' data [" + std::to_string(b) + ", " + std::to_string(en) + ") lies outside the " +
                    std::to_string(data_size) + "-byte data section (truncated file?)");
    if (count * dtype_size(dt) != en - b)
      bad(path, "tensor '" + name + "' has " + std::to_string(en - b) + " bytes for its shape " + sh.dump());
    std::vector<int64_t> dims;
    for (const json& v : sh) dims.push_back(v.get<int64_t>());
    const Shape shape(dims);
    Tensor t = Tensor::empty(shape, dt, Device::cpu());
    if (t.nbytes() > 0) std::memcpy(t.raw(), data.data() + b, t.nbytes());
    st.tensors.emplace_back(name, std::move(t));
    covered += en - b;
  }
  if (covered > data_size) bad(path, "tensors overlap in the data section");
  return st;
}

}  // namespace ember

namespace ember {

namespace {
json architecture(const Sequential& model) {
  json layers = json::array();
  for (size_t i = 0; i < model.layers().size(); ++i) {
    const Layer& l = *model.layers()[i];
    json params = json::array();
    for (const auto& spec : l.param_specs())
      params.push_back({{"name", spec.name}, {"shape", std::vector<int64_t>(spec.shape.begin(), spec.shape.end())}});
    layers.push_back({{"name", l.name()}, {"type", l.type()}, {"params", params}});
  }
  const Shape& in = model.input_shape();
  return {{"model", "Sequential"}, {"input_shape", std::vector<int64_t>(in.begin(), in.end())}, {"layers", layers}};
}

int64_t parse_int(const std::map<std::string, std::string>& m, const std::string& key, const std::string& path) {
  const auto it = m.find(key);
  if (it == m.end()) return 0;
  try {
    size_t used = 0;
    const long long v = std::stoll(it->second, &used);
    if (used != it->second.size()) throw std::invalid_argument(key);
    return v;
  } catch (const std::exception&) {
    bad(path, "metadata '" + key + "' is not an integer: '" + it->second + "'");
  }
}
}  // namespace

void save_checkpoint(const Sequential& model, const std::string& path, const TrainingState& state) {
  EMBER_CHECK(model.built(), Error, "save: build the model first");
  SafeTensors st;
  const auto host = [](const Tensor& t) { return t.device().is_cpu() ? t : t.to(Device::cpu()); };
  for (const auto& [name, t] : model.named_params()) st.tensors.emplace_back(name, host(t));
  json opt = nullptr;
  if (const Optimizer* o = model.optimizer()) {
    opt = {{"name", o->name()}, {"iterations", o->iterations()}};
    for (const auto& [k, v] : o->hyperparameters()) opt[k] = v;
    for (const auto& [name, t] : o->state())
      if (t.defined()) st.tensors.emplace_back("optimizer/" + name, host(t));
  }
  st.metadata = state.extra;
  st.metadata["format"] = "ember";
  st.metadata["ember_version"] = ember::version();
  st.metadata["architecture"] = architecture(model).dump();
  st.metadata["optimizer"] = opt.dump();
  st.metadata["epochs_done"] = std::to_string(state.epochs_done);
  st.metadata["batches_done"] = std::to_string(state.batches_done);
  st.metadata["seed"] = std::to_string(state.seed);
  st.metadata["batch_size"] = std::to_string(state.batch_size);
  write_safetensors(path, st);
}

TrainingState load_checkpoint(Sequential& model, const std::string& path) {
  EMBER_CHECK(model.built(), Error, "load: build the model (same architecture as the checkpoint) first");
  SafeTensors st = read_safetensors(path);
  std::map<std::string, Tensor> by_name(st.tensors.begin(), st.tensors.end());
  // Validate everything before touching the model.
  const auto params = model.named_params();
  for (const auto& [name, p] : params) {
    const auto it = by_name.find(name);
    if (it == by_name.end()) bad(path, "has no tensor '" + name + "' (was it saved from a different model?)");
    if (it->second.dtype() != DType::F32 || !(it->second.shape() == p.shape()))
      bad(path, "tensor '" + name + "' is " + it->second.str() + " but the model needs " + p.shape().str());
  }
  for (const auto& [name, t] : by_name)
    if (name.rfind("optimizer/", 0) != 0 &&
        std::none_of(params.begin(), params.end(), [&](const auto& p) { return p.first == name; }))
      bad(path, "holds tensor '" + name + "' that the model does not have (different architecture?)");
  Optimizer* opt = model.optimizer();
  json saved_opt = nullptr;
  if (st.metadata.count("optimizer")) {
    try {
      saved_opt = json::parse(st.metadata["optimizer"]);
    } catch (const json::exception&) {
      bad(path, "metadata 'optimizer' is not valid JSON");
    }
  }
  const bool restore_opt = opt && saved_opt.is_object() && saved_opt.value("name", "") == opt->name();
  if (restore_opt)
    for (const auto& [name, t] : opt->state()) {
      const auto it = by_name.find("optimizer/" + name);
      if (it != by_name.end() && (it->second.numel() != model.num_params() || it->second.dtype() != DType::F32))
        bad(path, "optimizer state '" + name + "' has " + std::to_string(it->second.numel()) + " values for " +
                      std::to_string(model.num_params()) + " parameters");
    }
  TrainingState state;
  state.epochs_done = static_cast<int>(parse_int(st.metadata, "epochs_done", path));
  state.batches_done = parse_int(st.metadata, "batches_done", path);
  state.seed = static_cast<uint64_t>(parse_int(st.metadata, "seed", path));
  state.batch_size = parse_int(st.metadata, "batch_size", path);
  const int64_t iterations = restore_opt ? saved_opt.value("iterations", int64_t{0}) : 0;

  // Everything checked: now change the model.
  for (auto& [name, p] : model.named_params()) p.copy_from(by_name.at(name));
  if (restore_opt) {
    for (const auto& [name, t] : opt->state()) {
      const auto it = by_name.find("optimizer/" + name);
      if (it != by_name.end())  // the state lives where the parameters do
        opt->set_state(name, model.device().is_cpu() ? it->second : it->second.to(model.device()));
    }
    opt->set_iterations(iterations);
  }
  for (const auto& [k, v] : st.metadata)
    if (k != "format" && k != "ember_version" && k != "architecture" && k != "optimizer" && k != "epochs_done" &&
        k != "batches_done" && k != "seed" && k != "batch_size")
      state.extra[k] = v;
  return state;
}

}  // namespace ember
