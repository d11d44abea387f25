// Formatting of backend failure messages (see error.h).
#include "error.h"

namespace ember::detail {

std::string failure_message(const char* library, const char* statement, const std::string& why, const char* file,
                            int line, const char* function) {
  std::string msg = std::string(library) + " error: " + why + " in `" + statement + "`";
  msg += " (" + std::string(file) + ":" + std::to_string(line) + " in " + function + ")";
  return msg;
}

}  // namespace ember::detail
