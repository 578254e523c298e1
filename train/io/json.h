// JSON for the text files fusedtrain reads and writes beside its tensors: the header of a
// safetensors file, a PEFT adapter's adapter_config.json, a Hugging Face tokenizer.json. A reader
// into a tree of values (no streaming, no comments; \u escapes to UTF-8, surrogate pairs
// joined) and the writer's quoting.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ft {

struct JsonValue {
  enum class Kind { Null, Bool, Integer, Number, String, Array, Object };
  // Declared, so that clang with libstdc++ need not ask whether JsonValue is implicitly default-
  // constructible while `members` instantiates std::pair<std::string, JsonValue> inside this very
  // definition (it fails to compile there otherwise).
  JsonValue() = default;
  Kind kind = Kind::Null;
  bool boolean = false;
  int64_t integer = 0;  // an Integer's value
  double number = 0;    // a Number's value, and an Integer's as a double
  std::string text;     // a String's value
  std::vector<JsonValue> items;
  std::vector<std::pair<std::string, JsonValue>> members;  // in file order

  /// An Integer (written without fraction or exponent) or a Number.
  bool is_number() const { return kind == Kind::Integer || kind == Kind::Number; }
  /// The first member named `key` of an Object, or nullptr (also for any other kind).
  const JsonValue* find(const std::string& key) const;
};

/// What parse_json accepts besides strings, arrays and objects.
enum class JsonScalars {
  IntegersOnly,  // a safetensors header: integers only, no fractions, exponents, true, false or null
  All,           // every JSON scalar
};

/// Parses `text`, which must hold one JSON value and nothing after it but whitespace. Numbers are
/// read strictly: the whole token converts and must fit (an int64 for integers, a finite double
/// otherwise). Nesting deeper than 8 is refused. A syntax error is an ft::Error reading
/// "<context> at byte N: <what went wrong>", so `context` should name the caller and the file.
JsonValue parse_json(const std::string& text, const std::string& context, JsonScalars scalars = JsonScalars::All);

/// `s` as a JSON string literal: quoted, with quotes, backslashes and control characters escaped.
std::string json_quote(const std::string& s);

/// `x` (finite) as the shortest JSON number that parse_json reads back to the same double ("16",
/// "0.05"; "9.223372036854776e+18" from 2^63 on, where bare digits would be an Integer out of range).
std::string json_number(double x);

}  // namespace ft
