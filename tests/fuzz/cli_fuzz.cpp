// Fuzz target: the example binaries' command line (examples/common/cli.h) and the strict number
// parsers under it (lib/parse.h). The input is argv, its arguments separated by NUL bytes; the
// flags are ft-mlp's, read with the minimums ft-mlp checks. Every argument also goes to
// parse_int64 and parse_double directly: a number either is the whole argument or is refused.
#include <cctype>
#include <cmath>
#include <limits>

#include "examples/common/cli.h"
#include "lib/parse.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using ft::fuzz::accepts;
using ft::fuzz::require;

enum class Kind { Integer, Number, Text };

struct Flag {
  const char* name;
  const char* default_value;
  Kind kind;
  double min;
};

// ft-mlp's flags (examples/mlp/main.cpp and the shared checkpoint and data-parallel flags), and
// two without a minimum.
constexpr double kAny = -std::numeric_limits<double>::infinity();
constexpr Flag kFlags[] = {
    {"device", "cpu", Kind::Text, 0},        {"kernels", "fused", Kind::Text, 0},
    {"graph", "1", Kind::Integer, 0},        {"epochs", "3", Kind::Integer, 0},
    {"batch", "256", Kind::Integer, 1},      {"optimizer", "adamw", Kind::Text, 0},
    {"lr", "1e-3", Kind::Number, 0},         {"momentum", "0.9", Kind::Number, 0},
    {"schedule", "cosine", Kind::Text, 0},   {"warmup", "10", Kind::Integer, 0},
    {"weight-decay", "0.01", Kind::Number, 0}, {"hidden", "1024", Kind::Integer, 1},
    {"layers", "3", Kind::Integer, 0},       {"dropout", "0.1", Kind::Number, 0},
    {"seed", "0", Kind::Integer, 0},         {"data-dir", "/tmp", Kind::Text, 0},
    {"metrics", "", Kind::Text, 0},          {"log-every", "20", Kind::Integer, 0},
    {"steps", "0", Kind::Integer, 0},        {"ckpt-dir", "", Kind::Text, 0},
    {"ckpt-every", "0", Kind::Integer, 0},   {"keep-last", "0", Kind::Integer, 0},
    {"resume", "", Kind::Text, 0},           {"data-parallel", "auto", Kind::Text, 0},
    {"zero", "0", Kind::Integer, 0},         {"bucket-mb", "25", Kind::Number, 0},
    {"comm-timeout", "60", Kind::Number, 0}, {"check-replicas", "0", Kind::Integer, 0},
    {"offset", "0", Kind::Integer, kAny},    {"scale", "1", Kind::Number, kAny},
};

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// parse_int64 and parse_double on one argument. An accepted integer is an optional sign and
// digits only; it also reads as a double, to the same value correctly rounded. An accepted
// double is finite and no part of the text is left over: leading space is text too.
void check_numbers(const std::string& text) {
  int64_t integer = 0;
  double number = 0;
  const bool is_integer = accepts([&] { integer = ft::parse_int64(text, "fuzz"); });
  const bool is_number = accepts([&] { number = ft::parse_double(text, "fuzz"); });
  if (is_integer) {
    const size_t sign = text[0] == '+' || text[0] == '-';
    require(text.size() > sign, "an accepted integer has digits");
    for (size_t i = sign; i < text.size(); ++i) require(is_digit(text[i]), "an accepted integer is only digits");
    require(is_number && number == static_cast<double>(integer), "an integer reads as the same double");
  }
  if (is_number) {
    require(std::isfinite(number), "an accepted double is finite");
    require(!text.empty() && !std::isspace(static_cast<unsigned char>(text.front())),
            "an accepted double has no leading space");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> arguments = ft::fuzz::split_on_nul(data, size);
  for (const std::string& argument : arguments) check_numbers(argument);

  ft::cli::Args args("ft-fuzz", "the fuzz target's flags");
  for (const Flag& flag : kFlags) args.flag(flag.name, flag.default_value, "help");
  std::vector<char*> argv{const_cast<char*>("ft-fuzz")};
  for (std::string& argument : arguments) argv.push_back(argument.data());
  bool parsed = false;
  if (!accepts([&] { parsed = args.parse(static_cast<int>(argv.size()), argv.data()); }) || !parsed) return 0;
  for (const Flag& flag : kFlags) {
    const std::string value = args.str(flag.name);
    if (flag.kind == Kind::Integer) {
      long long x = 0;
      const long long min = flag.min == kAny ? std::numeric_limits<long long>::min() : static_cast<long long>(flag.min);
      if (accepts([&] { x = args.integer(flag.name, min); }))
        require(x >= min && x == ft::parse_int64(value, "fuzz"), "integer() is parse_int64 at least its minimum");
    } else if (flag.kind == Kind::Number) {
      double x = 0;
      if (accepts([&] { x = args.number(flag.name, flag.min); }))
        require(x >= flag.min && x == ft::parse_double(value, "fuzz"), "number() is parse_double at least its minimum");
    }
  }
  return 0;
}
