// Fuzz target: the JSON reader every header and config file goes through (train/io/json.h). Beyond
// "a value or an ft::Error": a header accepted with integers only reads the same with every
// scalar allowed, and each string and number read writes back (json_quote, json_number) to text
// that reads as the same value.
#include <cstring>

#include "tests/fuzz/fuzz_check.h"
#include "train/io/json.h"

namespace {

using ft::JsonValue;
using ft::fuzz::require;

bool same(const JsonValue& a, const JsonValue& b) {
  if (a.kind != b.kind || a.boolean != b.boolean || a.integer != b.integer || a.text != b.text ||
      a.items.size() != b.items.size() || a.members.size() != b.members.size())
    return false;
  // Bitwise, so that -0 and 0 differ and the comparison holds for every finite double.
  if (std::memcmp(&a.number, &b.number, sizeof a.number) != 0) return false;
  for (size_t i = 0; i < a.items.size(); ++i)
    if (!same(a.items[i], b.items[i])) return false;
  for (size_t i = 0; i < a.members.size(); ++i)
    if (a.members[i].first != b.members[i].first || !same(a.members[i].second, b.members[i].second)) return false;
  return true;
}

void check_round_trips(const JsonValue& v) {
  switch (v.kind) {
    case JsonValue::Kind::String:
      require(ft::parse_json(ft::json_quote(v.text), "fuzz: quoted").text == v.text, "json_quote reads back");
      break;
    case JsonValue::Kind::Number:
    case JsonValue::Kind::Integer: {
      const JsonValue back = ft::parse_json(ft::json_number(v.number), "fuzz: number");
      require(back.is_number() && back.number == v.number, "json_number reads back");
      break;
    }
    default: break;
  }
  for (const JsonValue& item : v.items) check_round_trips(item);
  for (const auto& [key, value] : v.members) {
    require(ft::parse_json(ft::json_quote(key), "fuzz: key").text == key, "json_quote of a key reads back");
    check_round_trips(value);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = ft::fuzz::as_text(data, size);
  JsonValue all, integers_only;
  const bool read_all = ft::fuzz::accepts([&] { all = ft::parse_json(text, "fuzz", ft::JsonScalars::All); });
  const bool read_integers =
      ft::fuzz::accepts([&] { integers_only = ft::parse_json(text, "fuzz", ft::JsonScalars::IntegersOnly); });
  if (read_integers) require(read_all && same(all, integers_only), "integers-only JSON reads the same as full JSON");
  if (read_all) check_round_trips(all);
  return 0;
}
