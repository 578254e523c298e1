#include "train/data/file_list.h"

#include <glob.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <memory>
#include <sstream>

#include "lib/error.h"

namespace ft {

namespace {

/// a before b when their runs of digits are compared as numbers and the rest bytewise.
bool natural_less(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) && std::isdigit(static_cast<unsigned char>(b[j]))) {
      size_t ei = i, ej = j;
      while (ei < a.size() && std::isdigit(static_cast<unsigned char>(a[ei]))) ++ei;
      while (ej < b.size() && std::isdigit(static_cast<unsigned char>(b[ej]))) ++ej;
      // Without leading zeros, the longer run is the larger number.
      const std::string x = a.substr(i, ei - i), y = b.substr(j, ej - j);
      const std::string xs = x.substr(std::min(x.find_first_not_of('0'), x.size()));
      const std::string ys = y.substr(std::min(y.find_first_not_of('0'), y.size()));
      if (xs.size() != ys.size()) return xs.size() < ys.size();
      if (xs != ys) return xs < ys;
      i = ei, j = ej;
      continue;
    }
    if (a[i] != b[j]) return static_cast<unsigned char>(a[i]) < static_cast<unsigned char>(b[j]);
    ++i, ++j;
  }
  return a.size() - i < b.size() - j;
}

}  // namespace

std::vector<std::string> glob_files(const std::string& pattern, FileOrder order, const std::string& what) {
  glob_t matches{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &matches);
  std::unique_ptr<glob_t, void (*)(glob_t*)> guard(&matches, ::globfree);
  FT_CHECK(rc != GLOB_NOMATCH, what, ": no file matches '", pattern, "'");
  FT_CHECK(rc == 0, what, ": glob of '", pattern, "' failed (", rc == GLOB_NOSPACE ? "out of memory" : "read error", ")");
  std::vector<std::string> files(matches.gl_pathv, matches.gl_pathv + matches.gl_pathc);
  // glob(3) sorts by the locale's collation; these orders are the same under any locale.
  if (order == FileOrder::Natural)
    std::sort(files.begin(), files.end(), natural_less);
  else
    std::sort(files.begin(), files.end());
  return files;
}

std::vector<std::string> expand_file_list(const std::string& spec, const std::string& what,
                                          const std::vector<std::string>& skip_suffixes) {
  FT_CHECK(!spec.empty(), what, ": no file given");
  FT_CHECK(spec.front() != ',' && spec.back() != ',' && spec.find(",,") == std::string::npos, what,
           ": an empty entry in '", spec, "'");
  std::vector<std::string> files;
  std::stringstream entries(spec);
  std::string entry;
  while (std::getline(entries, entry, ',')) {
    FT_CHECK(!entry.empty(), what, ": an empty entry in '", spec, "'");
    if (entry.find_first_of("*?[") != std::string::npos) {
      size_t kept = 0;
      for (const std::string& file : glob_files(entry, FileOrder::Natural, what)) {
        const bool skip = std::any_of(skip_suffixes.begin(), skip_suffixes.end(),
                                      [&](const std::string& suffix) { return file.ends_with(suffix); });
        if (skip) continue;
        files.push_back(file);
        ++kept;
      }
      FT_CHECK(kept > 0, what, ": '", entry, "' matches only files it skips (", skip_suffixes.size(), " kinds)");
      continue;
    }
    std::error_code ec;
    FT_CHECK(std::filesystem::is_regular_file(entry, ec), what, ": '", entry, "' is not a file");
    files.push_back(entry);
  }
  FT_CHECK(!files.empty(), what, ": no file given");
  return files;
}

}  // namespace ft
