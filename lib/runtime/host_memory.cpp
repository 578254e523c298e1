// The host's available memory, for runs that check they fit before allocating (both builds).
#include <fstream>
#include <sstream>
#include <string>

#include "lib/runtime.h"

namespace ft {

size_t host_memory_available() {
  std::ifstream in("/proc/meminfo");
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string key;
    size_t kib = 0;
    if (fields >> key >> kib && key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

}  // namespace ft
