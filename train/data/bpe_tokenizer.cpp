#include "train/data/bpe_tokenizer.h"

#include <algorithm>
#include <array>
#include <climits>
#include <fstream>
#include <functional>
#include <queue>
#include <sstream>

#include "lib/error.h"
#include "lib/utf8.h"
#include "train/io/json.h"
#include "train/io/text_file.h"

namespace ft {

namespace {

/// GPT-2's pre-tokenizer pattern, which a ByteLevel pre-tokenizer with use_regex applies.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

/// Llama 3's Split pattern (Llama 3.1 and 3.2 ship the same).
constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

/// GPT-2's byte-to-character table: the printable bytes stand for themselves, the others for
/// the code points from U+0100 up, in byte order, so that every token is printable text.
const std::array<char32_t, 256>& byte_to_char() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      t[static_cast<size_t>(b)] = printable ? static_cast<char32_t>(b) : next++;
    }
    return t;
  }();
  return table;
}

/// The inverse: a byte-level character's byte, or -1.
int char_to_byte(char32_t c) {
  static const std::unordered_map<char32_t, int> inverse = [] {
    std::unordered_map<char32_t, int> m;
    for (int b = 0; b < 256; ++b) m[byte_to_char()[static_cast<size_t>(b)]] = b;
    return m;
  }();
  const auto found = inverse.find(c);
  return found == inverse.end() ? -1 : found->second;
}

/// A pre-tokenizer's pattern; its errors name the tokenizer file too.
SplitPattern split_pattern(const std::string& pattern, const std::string& context) {
  try {
    return SplitPattern(pattern);
  } catch (const Error& e) {
    throw Error(context + ": " + e.what());
  }
}

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

/// A JSON value's type member ("BPE", "ByteLevel", ...), or "" for null.
std::string type_of(const JsonValue* v) {
  if (!v || v->kind == JsonValue::Kind::Null) return "";
  const JsonValue* type = v->find("type");
  return type && type->kind == JsonValue::Kind::String ? type->text : "(no type)";
}

bool flag(const JsonValue& v, const char* key, bool fallback) {
  const JsonValue* f = v.find(key);
  return f && f->kind == JsonValue::Kind::Bool ? f->boolean : fallback;
}

/// The steps of a pre-tokenizer or post-processor: the list (`list_key`) of a Sequence, or the one.
std::vector<const JsonValue*> sequence_steps(const JsonValue* v, const char* list_key, const std::string& context) {
  if (type_of(v) != "Sequence") return {v};
  const JsonValue* list = v->find(list_key);
  FT_CHECK(list && list->kind == JsonValue::Kind::Array, context, ": a Sequence without \"", list_key, "\"");
  std::vector<const JsonValue*> steps;
  for (const JsonValue& step : list->items) steps.push_back(&step);
  return steps;
}

/// `s` as a pattern matching it literally (a Split pattern given as {"String": ...}).
std::string literal_pattern(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

BpeTokenizer BpeTokenizer::from_file(const std::string& path) {
  return from_json(read_text_file(path, "tokenizer"), "tokenizer '" + path + "'");
}

BpeTokenizer BpeTokenizer::from_json(const std::string& json, const std::string& context) {
  BpeTokenizer t;
  t.context_ = context;
  const JsonValue root = parse_json(json, context);
  FT_CHECK(root.kind == JsonValue::Kind::Object, context, ": not a tokenizer.json (the top level is not an object)");
  auto check = [&](bool ok, const auto&... what) { FT_CHECK(ok, context, ": ", what...); };

  // The model: byte-level BPE only.
  const JsonValue* model = root.find("model");
  check(model && model->kind == JsonValue::Kind::Object, "no \"model\" object");
  const std::string model_type = type_of(model);
  check(model_type == "BPE" || model_type == "(no type)", "the model type '", model_type,
        "' is not supported (byte-level BPE only, as GPT-2, Llama 3 and Qwen2 use)");
  const JsonValue* dropout = model->find("dropout");
  check(!dropout || dropout->kind == JsonValue::Kind::Null || (dropout->is_number() && dropout->number == 0),
        "BPE dropout is not supported");
  check(!flag(*model, "byte_fallback", false), "byte_fallback is not supported (a SentencePiece-style BPE, not byte-level)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const JsonValue* v = model->find(key);
    check(!v || v->kind == JsonValue::Kind::Null || v->text.empty(), "\"", key, "\" is not supported");
  }
  t.ignore_merges_ = flag(*model, "ignore_merges", false);

  const JsonValue* vocab = model->find("vocab");
  check(vocab && vocab->kind == JsonValue::Kind::Object && !vocab->members.empty(), "no \"vocab\" object in the model");
  int64_t largest = -1;
  for (const auto& [token, id] : vocab->members) {
    check(id.kind == JsonValue::Kind::Integer && id.integer >= 0 && id.integer < INT32_MAX, "the vocabulary entry '",
          token, "' has no valid id");
    largest = std::max(largest, id.integer);
  }
  const JsonValue* added = root.find("added_tokens");
  check(!added || added->kind == JsonValue::Kind::Array || added->kind == JsonValue::Kind::Null,
        "\"added_tokens\" is not an array");
  if (added)
    for (const JsonValue& a : added->items) {
      const JsonValue* id = a.find("id");
      check(id && id->kind == JsonValue::Kind::Integer && id->integer >= 0 && id->integer < INT32_MAX,
            "an added token has no valid id");
      largest = std::max(largest, id->integer);
    }
  t.tokens_.resize(static_cast<size_t>(largest + 1));
  t.special_.assign(t.tokens_.size(), false);
  t.added_.assign(t.tokens_.size(), false);
  for (const auto& [token, id] : vocab->members) {
    const auto i = static_cast<int32_t>(id.integer);
    check(t.vocab_.emplace(token, i).second, "the vocabulary lists '", token, "' twice");
    t.tokens_[static_cast<size_t>(i)] = token;
  }
  for (int b = 0; b < 256; ++b) {
    std::string symbol;
    append_utf8(symbol, byte_to_char()[static_cast<size_t>(b)]);
    const auto found = t.vocab_.find(symbol);
    check(found != t.vocab_.end(), "the vocabulary lacks the byte-level symbol of byte ", b, " ('", symbol,
          "'): not a byte-level BPE vocabulary, or trained without the full byte alphabet");
    t.byte_ids_[b] = found->second;
  }

  const JsonValue* merges = model->find("merges");
  check(merges && merges->kind == JsonValue::Kind::Array, "no \"merges\" array in the model");
  for (size_t rank = 0; rank < merges->items.size(); ++rank) {
    const JsonValue& m = merges->items[rank];
    std::string left, right;
    if (m.kind == JsonValue::Kind::String) {  // "a b", the older form
      const size_t space = m.text.find(' ');
      check(space != std::string::npos && m.text.find(' ', space + 1) == std::string::npos, "merge ", rank, " ('",
            m.text, "') is not two tokens separated by a space");
      left = m.text.substr(0, space), right = m.text.substr(space + 1);
    } else {
      check(m.kind == JsonValue::Kind::Array && m.items.size() == 2 && m.items[0].kind == JsonValue::Kind::String &&
                m.items[1].kind == JsonValue::Kind::String,
            "merge ", rank, " is neither \"a b\" nor [\"a\", \"b\"]");
      left = m.items[0].text, right = m.items[1].text;
    }
    const int32_t l = t.token_id(left), r = t.token_id(right), merged = t.token_id(left + right);
    check(l >= 0 && r >= 0 && merged >= 0, "merge ", rank, " ('", left, "' + '", right,
          "') names a token the vocabulary lacks");
    t.merges_.emplace(pair_key(l, r), Merge{static_cast<int32_t>(rank), merged});  // the first rank wins
  }

  if (added)
    for (const JsonValue& a : added->items) {
      const JsonValue* content = a.find("content");
      check(content && content->kind == JsonValue::Kind::String && !content->text.empty(),
            "an added token has no content");
      for (const char* key : {"lstrip", "rstrip", "single_word"})
        check(!flag(a, key, false), "the added token '", content->text, "' sets ", key, ", which is not supported");
      const auto id = static_cast<int32_t>(a.find("id")->integer);
      const bool special = flag(a, "special", false);
      t.tokens_[static_cast<size_t>(id)] = content->text;
      t.added_[static_cast<size_t>(id)] = true;
      t.special_[static_cast<size_t>(id)] = special;
      t.added_tokens_.push_back({content->text, id, special});
      t.starts_added_[static_cast<unsigned char>(content->text.front())] = true;
    }
  // Longest first: at a position where several start, the longest is cut out.
  std::stable_sort(t.added_tokens_.begin(), t.added_tokens_.end(),
                   [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });

  const std::string normalizer = type_of(root.find("normalizer"));
  check(normalizer.empty(), "the normalizer '", normalizer, "' is not supported (none is)");

  // The pre-tokenizer: Split patterns and ByteLevel, alone or in a Sequence.
  bool byte_level = false;
  const JsonValue* pre_tokenizer = root.find("pre_tokenizer");
  check(pre_tokenizer && pre_tokenizer->kind == JsonValue::Kind::Object, "no pre-tokenizer (byte-level BPE needs one)");
  for (const JsonValue* step : sequence_steps(pre_tokenizer, "pretokenizers", context)) {
    const std::string type = type_of(step);
    if (type == "ByteLevel") {
      byte_level = true;
      t.add_prefix_space_ = flag(*step, "add_prefix_space", false);
      if (flag(*step, "use_regex", true)) t.splits_.push_back(split_pattern(kGpt2Pattern, context));
    } else if (type == "Split") {
      const JsonValue* pattern = step->find("pattern");
      const JsonValue* regex = pattern ? pattern->find("Regex") : nullptr;
      const JsonValue* literal = pattern ? pattern->find("String") : nullptr;
      check((regex && regex->kind == JsonValue::Kind::String) || (literal && literal->kind == JsonValue::Kind::String),
            "a Split pre-tokenizer without a pattern {\"Regex\": ...} or {\"String\": ...}");
      const JsonValue* behavior = step->find("behavior");
      check(behavior && behavior->text == "Isolated", "a Split pre-tokenizer's behavior '",
            behavior ? behavior->text : "", "' is not supported (Isolated is)");
      check(!flag(*step, "invert", false), "an inverted Split pre-tokenizer is not supported");
      t.splits_.push_back(split_pattern(regex ? regex->text : literal_pattern(literal->text), context));
    } else {
      check(false, "the pre-tokenizer '", type, "' is not supported (ByteLevel and Split are)");
    }
  }
  check(byte_level, "no ByteLevel pre-tokenizer: not a byte-level BPE");
  const std::string decoder = type_of(root.find("decoder"));
  check(decoder.empty() || decoder == "ByteLevel", "the decoder '", decoder, "' is not supported (ByteLevel is)");

  // The post-processor: ByteLevel (offsets only) and TemplateProcessing, alone or in a Sequence.
  for (const JsonValue* p : sequence_steps(root.find("post_processor"), "processors", context)) {
    const std::string type = type_of(p);
    if (type.empty() || type == "ByteLevel") continue;
    check(type == "TemplateProcessing", "the post-processor '", type,
          "' is not supported (ByteLevel and TemplateProcessing are)");
    const JsonValue* single = p->find("single");
    check(single && single->kind == JsonValue::Kind::Array, "a TemplateProcessing without \"single\"");
    bool after_text = false;
    for (const JsonValue& piece : single->items) {
      if (piece.find("Sequence")) {
        after_text = true;
        continue;
      }
      const JsonValue* special = piece.find("SpecialToken");
      const JsonValue* name = special ? special->find("id") : nullptr;
      check(name && name->kind == JsonValue::Kind::String, "a template piece that is neither Sequence nor SpecialToken");
      const int32_t id = t.token_id(name->text);
      check(id >= 0, "the template's token '", name->text, "' is not in the vocabulary");
      (after_text ? t.suffix_ : t.prefix_).push_back(id);
    }
  }
  return t;
}

bool BpeTokenizer::splits_at_line_starts() const {
  if (splits_.empty() || add_prefix_space_) return false;
  for (const SplitPattern& split : splits_)
    if (split.source() != kGpt2Pattern && split.source() != kLlama3Pattern) return false;
  for (const AddedToken& a : added_tokens_)
    if (a.content.find('\n') != std::string::npos) return false;
  return true;
}

int32_t BpeTokenizer::document_start_token() const {
  return prefix_.empty() ? token_id("<|endoftext|>") : prefix_.front();
}

int32_t BpeTokenizer::token_id(const std::string& token) const {
  for (const AddedToken& a : added_tokens_)
    if (a.content == token) return a.id;
  const auto found = vocab_.find(token);
  return found == vocab_.end() ? -1 : found->second;
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    std::string whole;
    for (unsigned char b : piece) append_utf8(whole, byte_to_char()[b]);
    const auto found = vocab_.find(whole);
    if (found != vocab_.end()) {
      out.push_back(found->second);
      return;
    }
  }
  // The symbols as a linked list, and the mergeable adjacent pairs in a heap: the lowest rank
  // first, the leftmost of equal ones, as tokenizers' Word::merge_all orders them. A popped pair
  // whose symbols have changed since it was pushed is skipped. O(n log n) in the piece's length,
  // so a long run of spaces or digits stays fast.
  struct Symbol {
    int32_t id;
    int prev, next;
    bool merged_away = false;
  };
  struct Candidate {
    int32_t rank, merged;
    int at;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : at > o.at; }
  };
  const int n = static_cast<int>(piece.size());
  std::vector<Symbol> symbols;
  symbols.reserve(piece.size());
  for (int i = 0; i < n; ++i)
    symbols.push_back({byte_ids_[static_cast<unsigned char>(piece[static_cast<size_t>(i)])], i - 1, i + 1 < n ? i + 1 : -1});
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto consider = [&](int at) {
    if (at < 0 || symbols[static_cast<size_t>(at)].next < 0) return;
    const Symbol& left = symbols[static_cast<size_t>(at)];
    const auto found = merges_.find(pair_key(left.id, symbols[static_cast<size_t>(left.next)].id));
    if (found != merges_.end()) heap.push({found->second.rank, found->second.merged, at});
  };
  for (int i = 0; i + 1 < n; ++i) consider(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& left = symbols[static_cast<size_t>(c.at)];
    if (left.merged_away || left.next < 0) continue;
    const auto found = merges_.find(pair_key(left.id, symbols[static_cast<size_t>(left.next)].id));
    if (found == merges_.end() || found->second.merged != c.merged) continue;  // stale
    Symbol& right = symbols[static_cast<size_t>(left.next)];
    left.id = c.merged;
    right.merged_away = true;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = c.at;
    consider(left.prev);
    consider(c.at);
  }
  for (int i = n > 0 ? 0 : -1; i >= 0; i = symbols[static_cast<size_t>(i)].next) out.push_back(symbols[static_cast<size_t>(i)].id);
}

void BpeTokenizer::encode_ordinary(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::string prefixed;
  if (add_prefix_space_ && text.front() != ' ') {
    prefixed.reserve(text.size() + 1);
    prefixed += ' ';
    prefixed += text;
    text = prefixed;
  }
  std::u32string code_points;
  std::vector<size_t> byte_at;  // [code points + 1]: where each starts in `text`
  for (size_t at = 0; at < text.size();) {
    const DecodedCodePoint d = decode_utf8_at(text, at);
    code_points.push_back(d.code);
    byte_at.push_back(at);
    at += d.bytes;
  }
  byte_at.push_back(text.size());
  // Each pattern splits every piece so far: its matches and the gaps between them (Isolated).
  std::vector<std::pair<size_t, size_t>> pieces{{0, code_points.size()}};
  for (const SplitPattern& split : splits_) {
    std::vector<std::pair<size_t, size_t>> finer;
    for (const auto& [begin, end] : pieces) {
      size_t at = begin;
      for (const auto& [b, e] : split.find_all(code_points.substr(begin, end - begin))) {
        if (begin + b > at) finer.push_back({at, begin + b});
        finer.push_back({begin + b, begin + e});
        at = begin + e;
      }
      if (end > at) finer.push_back({at, end});
    }
    pieces = std::move(finer);
  }
  for (const auto& [begin, end] : pieces) encode_piece(text.substr(byte_at[begin], byte_at[end] - byte_at[begin]), out);
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int32_t> out;
  if (add_special_tokens) out = prefix_;
  size_t plain = 0;
  for (size_t at = 0; at < text.size();) {
    const AddedToken* cut = nullptr;
    if (starts_added_[static_cast<unsigned char>(text[at])])
      for (const AddedToken& a : added_tokens_)
        if (text.substr(at).starts_with(a.content)) {
          cut = &a;
          break;
        }
    if (!cut) {
      ++at;
      continue;
    }
    encode_ordinary(text.substr(plain, at - plain), out);
    out.push_back(cut->id);
    at += cut->content.size();
    plain = at;
  }
  encode_ordinary(text.substr(plain), out);
  if (add_special_tokens) out.insert(out.end(), suffix_.begin(), suffix_.end());
  return out;
}

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::string out;
  for (const int32_t id : ids) {
    FT_CHECK(id >= 0 && static_cast<size_t>(id) < tokens_.size() && !tokens_[static_cast<size_t>(id)].empty(),
             context_, ": token id ", id, " is not in the vocabulary (", tokens_.size(), " ids)");
    const std::string& token = tokens_[static_cast<size_t>(id)];
    if (added_[static_cast<size_t>(id)]) {
      if (!(skip_special_tokens && special_[static_cast<size_t>(id)])) out += token;
      continue;
    }
    for (size_t at = 0; at < token.size();) {
      const DecodedCodePoint d = decode_utf8_at(token, at);
      const int byte = char_to_byte(d.code);
      FT_CHECK(byte >= 0, context_, ": the token '", token, "' (id ", id, ") is not byte-level text");
      out += static_cast<char>(byte);
      at += d.bytes;
    }
  }
  return out;
}

}  // namespace ft
