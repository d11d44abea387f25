// Model::summary (Keras' table) and Model::placement_report (--log-device-placement).
#include <algorithm>
#include <sstream>

#include "../../core/runtime.h"
#include "execute.h"
#include "model.h"
#include "topology.h"

namespace ember {

namespace {
std::string with_commas(int64_t v) {  // 93322 -> "93,322"
  const std::string digits = std::to_string(v);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string batch_shape(const Shape& s) {
  std::string out = "(None";
  for (int64_t d : s) out += ", " + std::to_string(d);
  return out + ")";
}
}  // namespace

std::string Model::summary() const {
  require_built("summary");
  std::ostringstream os;
  // A stack: Keras' Sequential table; a graph: its functional table, with the Input and what
  // each layer is called on.
  const size_t width = topo_->graph ? 98 : 65;
  const std::vector<size_t> stops = topo_->graph ? std::vector<size_t>{31, 57, 69} : std::vector<size_t>{29, 55};
  const std::string rule(width, '_'), dbl(width, '=');
  auto row = [&](const std::vector<std::string>& cells) {
    std::string line = " " + cells[0];
    for (size_t c = 1; c < cells.size(); ++c) {
      line.resize(std::max(line.size() + 1, stops[c - 1]), ' ');
      line += cells[c];
    }
    os << line << "\n";
  };
  const auto connected = [&](size_t i) {
    std::string out = "[";
    for (size_t k = 0; k < topo_->nodes[i].inputs.size(); ++k) {
      const int from = topo_->nodes[i].inputs[k];
      out += (k ? ", '" : "'") +
             (from < 0 ? topo_->input_names[static_cast<size_t>(-1 - from)] + "[0]"
                       : layer_ref(static_cast<size_t>(from), "[0]")) +
             "[0]'";
    }
    return out + "]";
  };
  os << "Model: \"" << name_ << "\"\n" << rule << "\n";
  if (topo_->graph)
    row({"Layer (type)", "Output Shape", "Param #", "Connected to"});
  else
    row({"Layer (type)", "Output Shape", "Param #"});
  os << dbl << "\n";
  if (topo_->graph)
    for (size_t k = 0; k < topo_->input_shapes.size(); ++k) {
      row({topo_->input_names[k] + " (InputLayer)", "[" + batch_shape(topo_->input_shapes[k]) + "]", "0", "[]"});
      os << "\n";
    }
  for (size_t i = 0; i < topo_->layers.size(); ++i) {
    std::vector<std::string> cells{
        topo_->layers[i]->name() + " (" + topo_->layers[i]->type() + ")", batch_shape(topo_->output_shapes[i]),
        is_twin(i) ? "shared" : with_commas(topo_->layers[i]->num_params() + topo_->layers[i]->num_non_trainable())};
    if (topo_->graph) cells.push_back(connected(i));
    row(cells);
    if (i + 1 < topo_->layers.size()) os << "\n";
  }
  os << dbl << "\n";
  topo_->sync_trainable();
  int64_t frozen = 0;  // Keras counts a frozen layer's parameters as non-trainable
  for (size_t i = 0; i < topo_->layers.size(); ++i)
    if (!is_twin(i) && !topo_->layers[i]->trainable()) frozen += topo_->layers[i]->num_params();
  os << "Total params: " << with_commas(num_params() + num_non_trainable()) << "\n";
  os << "Trainable params: " << with_commas(num_params() - frozen) << "\n";
  os << "Non-trainable params: " << with_commas(num_non_trainable() + frozen) << "\n" << rule << "\n";
  return os.str();
}

std::string Model::placement_report(int64_t batch_size) const {
  require_built("placement_report");
  const detail::PrecisionScope precision_scope(precision_);  // the kernels the model's own steps run
  std::ostringstream os;
  const detail::ExecutionPlan& plan = exec_->execution_plan();
  const detail::Step* running = nullptr;  // a rewrite running several layers as one step
  for (size_t i = 0; i < topo_->layers.size(); ++i) {
    const Layer& l = *topo_->layers[i];
    if (const detail::Step* fused = plan.rewrite_at(i, fuses())) running = fused;
    os << "  " << l.name() << " (" << l.type() << "): " << device_.str() << ", ";
    if (running != nullptr && running->first() == i)
      os << running->kernel_info(batch_size, device_);
    else if (running != nullptr && i <= running->last())
      os << "fused into '" << topo_->layers[running->first()]->name() << "'";
    else
      os << l.kernel_info(batch_size, device_);
    os << "\n";
  }
  return os.str();
}

}  // namespace ember
