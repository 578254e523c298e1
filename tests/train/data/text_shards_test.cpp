// Where write_text_shards may cut text for its threads: only before a letter that starts a line
// after a line ending in a visible ASCII character (GPT-2's and Llama 3's patterns end a piece
// there whether or not the text goes on). The shards themselves are checked against Hugging
// Face's tokenizers in tests/train/data/tokenizer_parity.py.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "train/data/text_shards.h"

namespace ft {
namespace {

using Cuts = std::vector<size_t>;

TEST(TextShards, CutsOnlyBeforeALetterAfterANewlineAfterAVisibleCharacter) {
  EXPECT_EQ(line_start_cuts("ab\ncd", 1), (Cuts{3}));
  EXPECT_EQ(line_start_cuts("x\nyy\nzz", 1), (Cuts{2, 5}));
  EXPECT_EQ(line_start_cuts("x.\nyy", 1), (Cuts{3}));
  // Not after white space (a run's last space would go to the next piece only when text
  // follows), not before a digit or a mark, and not at the very start.
  for (const char* text : {"a \ncd", "a\r\ncd", "a\n\ncd", "a\n1b", "a\n(b", "\nab", "a\xC2\xA0\nb"}) {
    SCOPED_TRACE(text);
    EXPECT_EQ(line_start_cuts(text, 1), Cuts{});
  }
}

TEST(TextShards, PiecesAreAboutPieceBytesLong) {
  std::string text;
  for (int i = 0; i < 100; ++i) text += "line " + std::to_string(i) + "\n";  // about 8 bytes a line
  const Cuts cuts = line_start_cuts(text, 100);
  ASSERT_GE(cuts.size(), 6u);
  size_t last = 0;
  for (size_t cut : cuts) {
    EXPECT_GE(cut - last, 100u);
    EXPECT_LE(cut - last, 100u + 9);  // the next line start at most one line further
    EXPECT_EQ(text[cut - 1], '\n');
    last = cut;
  }
  EXPECT_EQ(line_start_cuts(text, static_cast<int64_t>(text.size())), Cuts{});
}

}  // namespace
}  // namespace ft
