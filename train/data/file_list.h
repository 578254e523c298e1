// The files a flag names: comma-separated entries, each a path or a glob pattern.
#pragma once
#include <string>
#include <vector>

namespace ft {

/// How a pattern's matches are ordered: bytewise (the same under any locale), or naturally,
/// runs of digits compared as numbers (day_2 before day_10, as Criteo 1TB's days are meant).
enum class FileOrder { Bytewise, Natural };

/// The files matching the glob pattern `pattern`, in `order`. No match is an ft::Error that
/// `what` starts (the flag or the reader).
std::vector<std::string> glob_files(const std::string& pattern, FileOrder order, const std::string& what);

/// Expands `spec`: comma-separated entries, each a file's path or a glob pattern (its matches in
/// natural order, less those whose names end in one of `skip_suffixes`: the files a reader
/// keeps beside its data, such as caches), in the order given. An empty spec, an empty entry, a
/// pattern that matches no file, or a path that is not a file is an ft::Error that `what` starts.
std::vector<std::string> expand_file_list(const std::string& spec, const std::string& what,
                                          const std::vector<std::string>& skip_suffixes = {});

}  // namespace ft
