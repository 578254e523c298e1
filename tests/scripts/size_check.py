#!/usr/bin/env python3
"""No source file is longer than 600 lines and no function longer than 120: a longer one is split.

Checked: every .h .hpp .cpp .cu .cuh under lib, optim, layers, train, models, examples, tests
and bench (a folder that is missing is skipped; so is anything under a build*/ or data/ folder,
and the fuzz corpora, tests/fuzz/<target>/). A file's length is its line count. A function's
length runs from the line of its opening brace to the line of its closing brace, both counted.
A function is any brace block, not inside another function, whose text before the `{` ends with
`)` and then perhaps qualifiers (const, noexcept, override, final, mutable, `-> Type`, ...) or a
constructor's member-initializer list (`: a_(x), b_{y}`): free and member functions, inline or
out of line, CUDA kernels, templates, main, gtest's TEST(...) bodies. A lambda counts toward the
function it sits in; classes, namespaces, enums, extern "C" blocks and initializers are not
functions (an inline method inside a class is one, named Class::method). Comments, string and
char literals (raw strings too) and preprocessor lines are blanked before braces are counted;
of an #if/#elif/#else chain only the first branch is read.

The offenders that exist today are listed in KNOWN_LONG, with their length, so that a new one
fails here, a listed one may shrink but not grow, and one that is split (or gone) must leave the
list. KNOWN_LONG is keyed by (file, function) with "<file>" for the file's own length, where
"file" is the end of the path: the basename, or parent/basename where the basename alone is
shared by several files (main.cpp). So a file moved to another folder (git mv lib/cuda/norm.cu
lib/ops/norm/norm.cu) keeps its entry; a key that would match offenders in two files fails.

--list prints every function over 80 lines with its length (for whoever splits them).
With --self-test it first checks itself on a planted tree."""
import bisect
import pathlib
import re
import sys
import tempfile

FOLDERS = ["lib", "optim", "layers", "train", "models", "examples", "tests", "bench"]
SOURCES = (".h", ".hpp", ".cpp", ".cu", ".cuh")
MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 120
LIST_OVER = 80
FILE = "<file>"
# (end of path, function or "<file>") -> its length today. It may shrink; it may not grow.
KNOWN_LONG = {
    # Files.
    # Functions.
    # allowed: one wgmma/TMA pipeline; its phases are lambdas sharing the register accumulators
    ("attention_hopper_backward.cu", "attention_backward_hopper_kernel"): 199,
}

QUALIFIERS = {"const", "volatile", "noexcept", "override", "final", "mutable", "try", "&",
              "constexpr", "__restrict__", "__restrict"}
# A `)` followed by these is a qualifier's argument list, not the parameter list.
CALLED_QUALIFIERS = {"noexcept", "throw", "__attribute__", "__launch_bounds__", "alignas", "__align__"}
NOT_FUNCTIONS = {"if", "for", "while", "switch", "catch", "return", "sizeof", "decltype", "do", "requires"}
TOKEN = re.compile(r"[A-Za-z_]\w*|\d[\w.']*|->|::|\.\.\.|\S")
IDENT = re.compile(r"[A-Za-z_]\w*$")
RAW_PREFIXES = ("R", "u8R", "uR", "UR", "LR")


def blank_code(text):
    """text with comments, literals and preprocessor lines (and #else branches) turned to spaces;
    newlines are kept, so offsets and line numbers still match the file's."""
    out = list(text)
    n = len(text)
    conditions = []  # one per open #if: whether its branch being read is the first

    def blank(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    def comment_end(i):  # text[i:i+2] == "/*"
        j = text.find("*/", i + 2)
        return n if j < 0 else j + 2

    def line_end(i):  # the end of a // comment: the newline, unless escaped
        while True:
            j = text.find("\n", i)
            if j < 0:
                return n
            if text[j - 1] != "\\" and not (text[j - 1] == "\r" and text[j - 2] == "\\"):
                return j
            i = j + 1

    def quoted_end(i, quote):  # text[i] == quote; stops at an unescaped quote or the line's end
        j = i + 1
        while j < n and text[j] != quote and text[j] != "\n":
            j += 2 if text[j] == "\\" else 1
        return min(j + 1, n) if j < n and text[j] == quote else j

    def word_before(i):
        k = i
        while k > 0 and (text[k - 1].isalnum() or text[k - 1] in "_."):
            k -= 1
        return text[k:i]

    i, line_start = 0, True
    while i < n:
        c = text[i]
        if c == "\n":
            line_start = True
            i += 1
            continue
        if c in " \t\r\f\v":
            i += 1
            continue
        if c == "#" and line_start:  # a directive, to the end of its logical line
            j = i + 1
            while j < n and text[j] != "\n":
                if text.startswith("/*", j):
                    j = comment_end(j)
                elif text.startswith("//", j):
                    j = line_end(j)
                elif text[j] == "\\" and text[j + 1:j + 2] == "\n":
                    j += 2
                elif text[j] == "\\" and text[j + 1:j + 3] == "\r\n":
                    j += 3
                else:
                    j += 1
            word = re.match(r"#\s*(\w*)", text[i:j]).group(1)
            if word in ("if", "ifdef", "ifndef"):
                conditions.append(True)
            elif word in ("elif", "else", "elifdef", "elifndef") and conditions:
                conditions[-1] = False
            elif word == "endif" and conditions:
                conditions.pop()
            blank(i, j)
            i = j
            continue
        line_start = False
        if text.startswith("//", i):
            j = line_end(i)
            blank(i, j)
        elif text.startswith("/*", i):
            j = comment_end(i)
            blank(i, j)
        elif c == '"':
            if word_before(i) in RAW_PREFIXES:
                paren = text.find("(", i)
                close = text.find(")" + text[i + 1:paren] + '"', paren) if paren >= 0 else -1
                j = n if close < 0 else close + len(text[i + 1:paren]) + 2
            else:
                j = quoted_end(i, '"')
            blank(i, j)
        elif c == "'":
            if word_before(i)[:1].isdigit():  # a digit separator: 1'000'000
                i += 1
                continue
            j = quoted_end(i, "'")
            blank(i, j)
        else:
            j = i + 1
            if not all(conditions):
                blank(i, j)
        i = j
    return "".join(out)


class Parser:
    """The functions of one file: (name, line of its name, first line, last line)."""

    def __init__(self, text):
        self.text = text
        clean = blank_code(text)
        self.starts = [m.start() for m in re.finditer(r"^", text, re.M)]
        matches = list(TOKEN.finditer(clean))
        self.toks = [m.group() for m in matches]
        self.pos = [m.start() for m in matches]
        self.functions = []
        self.unbalanced = None

    def line(self, tok):
        return bisect.bisect_right(self.starts, self.pos[tok])

    def back(self, j, close, open_):
        """The index of the `open_` that the `close` at j closes, or -1."""
        depth = 0
        while j >= 0:
            t = self.toks[j]
            if t == close:
                depth += 1
            elif t == open_:
                depth -= 1
                if depth == 0:
                    return j
            elif open_ == "<" and t in (";", "{", "}"):
                return -1
            j -= 1
        return -1

    def ident(self, j):
        return j >= 0 and IDENT.match(self.toks[j]) is not None

    def after_name(self, j):
        """From a name ending at j (foo, foo<T>, A::B<T>::foo), the index just before it, or None."""
        if j >= 0 and self.toks[j] == ">":
            j = self.back(j, ">", "<") - 1
        if not self.ident(j):
            return None
        j -= 1
        while j >= 1 and self.toks[j] == "::":
            j -= 1
            if self.toks[j] == ">":
                j = self.back(j, ">", "<") - 1
            if not self.ident(j):
                return None
            j -= 1
        return j

    def strip_qualifiers(self, j):
        """Back over const, noexcept(...), override, -> Type and the like after a parameter list."""
        while j >= 0:
            t = self.toks[j]
            if t in QUALIFIERS:
                j -= 1
                continue
            if t == ")":
                k = self.back(j, ")", "(")
                if k > 0 and self.toks[k - 1] in CALLED_QUALIFIERS:
                    j = k - 2
                    continue
                return j
            # A trailing return type: -> Type, with ::, <...>, *, &, const and decltype(...).
            k, seen = j, False
            while k >= 0:
                u = self.toks[k]
                if u == "->":
                    break
                if u == ">":
                    k = self.back(k, ">", "<")
                    if k < 0:
                        break
                elif u == ")":
                    k = self.back(k, ")", "(")
                    if k < 1 or self.toks[k - 1] != "decltype":
                        k = -1
                        break
                    k -= 1
                elif not (IDENT.match(u) or u in ("::", "*", "&")):
                    k = -1
                    break
                seen = True
                k -= 1
            if k >= 0 and seen and self.toks[k] == "->":
                j = k - 1
                continue
            return j
        return j

    def before_initializers(self, j):
        """If a member-initializer list `: a_(x), b_{y}` ends at j, the index before its colon."""
        while j >= 0:
            if self.toks[j] == "...":
                j -= 1
            t = self.toks[j] if j >= 0 else ""
            if t not in (")", "}"):
                return None
            k = self.back(j, t, "(" if t == ")" else "{")
            j = self.after_name(k - 1) if k > 0 else None
            if j is None or j < 0:
                return None
            if self.toks[j] == ":":
                return j - 1
            if self.toks[j] != ",":
                return None
            j -= 1
        return None

    def name(self, paren, scope):
        """The function's name (and the index of its first token) from its parameter list's `(`;
        scope is the class it sits in, if any (so that a constructor SGD() is no macro)."""
        toks = self.toks
        for k in range(paren - 1, max(paren - 5, -1), -1):
            if toks[k] == "operator":
                spaced = ((" " + p) if IDENT.match(p) else p for p in toks[k + 1:paren])
                name, first = "operator" + "".join(spaced), k
                break
        else:
            j = paren - 1
            if j >= 0 and toks[j] == "]":  # a lambda outside any function
                k = self.back(j, "]", "[")
                if k >= 2 and toks[k - 1] == "=" and self.ident(k - 2):
                    return toks[k - 2], k - 2
                return "<lambda>", max(k, 0)
            if j >= 0 and toks[j] == ">":
                j = self.back(j, ">", "<") - 1
            if not self.ident(j):
                return "?", max(j, 0)
            name, first = toks[j], j
            # A macro, TEST(Suite, Name), stands where a statement would: no return type before it.
            if (re.fullmatch(r"[A-Z][A-Z0-9_]*", name) and name != scope
                    and (first == 0 or toks[first - 1] in (";", "{", "}", ")"))):
                close = self.back_to_close(paren)
                args = self.text[self.pos[paren] + 1:self.pos[close]]
                return name + "(" + " ".join(args.split()) + ")", first
            if first >= 1 and toks[first - 1] == "~":
                name, first = "~" + name, first - 1
        while first >= 2 and toks[first - 1] == "::":
            q = first - 2
            if toks[q] == ">":
                q = self.back(q, ">", "<") - 1
            if not self.ident(q):
                break
            name, first = toks[q] + "::" + name, q
        return name, first

    def back_to_close(self, paren):
        depth = 0
        for k in range(paren, len(self.toks)):
            depth += {"(": 1, ")": -1}.get(self.toks[k], 0)
            if depth == 0:
                return k
        return len(self.toks) - 1

    def function_at(self, brace, scope=None):
        """(name, index of its first token) if the `{` at brace opens a function body, else None."""
        j = brace - 1
        if j < 0:
            return None
        if self.toks[j] in (")", "}"):
            before = self.before_initializers(j)
            if before is not None:
                k = self.strip_qualifiers(before)
                if k >= 0 and self.toks[k] == ")":
                    j = k
        j = self.strip_qualifiers(j)
        if j < 0 or self.toks[j] != ")":
            return None
        paren = self.back(j, ")", "(")
        if paren < 0:
            return None
        return self.name(paren, scope)

    def class_name(self, brace):
        """The name of the class, struct or union that the `{` at brace opens, else None."""
        j = brace - 1
        while j >= 0 and self.toks[j] not in (";", "{", "}"):
            j -= 1
        seg = range(j + 1, brace)
        depth, found = 0, None
        for k in seg:
            t = self.toks[k]
            depth += {"<": 1, ">": -1}.get(t, 0)
            if depth == 0 and t in ("class", "struct", "union") and (k == 0 or self.toks[k - 1] != "enum"):
                found = k
        if found is None:
            return None
        k = found + 1
        while k < brace:
            t = self.toks[k]
            if t in ("alignas", "__align__", "__attribute__", "__declspec") and k + 1 < brace:
                k = self.back_to_close(k + 1) + 1
            elif t == "[":
                depth = 0
                while k < brace:
                    depth += {"[": 1, "]": -1}.get(self.toks[k], 0)
                    k += 1
                    if depth == 0:
                        break
            elif self.ident(k) and t not in ("final",):
                return t
            else:
                return None
        return None

    def parse(self):
        stack = []  # (kind, name, first token, brace token); kind: function, quiet (if at top), block
        in_function = 0
        for k, t in enumerate(self.toks):
            if t == "{":
                if in_function:
                    stack.append(("inner", None, None, k))
                    continue
                scope = [s[1] for s in stack if s[0] == "block" and s[1]]
                found = self.function_at(k, scope[-1] if scope else None)
                if found is None:
                    stack.append(("block", self.class_name(k), None, k))
                    continue
                name, first = found
                if name in NOT_FUNCTIONS:
                    stack.append(("quiet", name, first, k))
                else:
                    if "::" not in name and scope:
                        name = "::".join(scope) + "::" + name
                    stack.append(("function", name, first, k))
                in_function += 1
            elif t == "}":
                if not stack:
                    self.unbalanced = self.line(k)
                    continue
                kind, name, first, brace = stack.pop()
                if kind in ("function", "quiet"):
                    in_function -= 1
                if kind == "function":
                    self.functions.append((name, self.line(first), self.line(brace), self.line(k)))
        if stack and self.unbalanced is None:
            self.unbalanced = self.line(stack[-1][3])
        return self


def sources(root):
    for folder in FOLDERS:
        if not (root / folder).is_dir():
            continue
        for path in sorted((root / folder).rglob("*")):
            if path.suffix not in SOURCES or not path.is_file():
                continue
            parts = path.relative_to(root).parts
            if any(p.startswith("build") or p == "data" for p in parts[:-1]):
                continue
            if parts[:2] == ("tests", "fuzz") and len(parts) > 3:
                continue
            yield path, "/".join(parts)


def measure(root):
    """[(path, name or "<file>", lines, line it starts)] of each file and each function; and the
    files whose braces do not balance (their functions could not be measured)."""
    sizes, broken = [], []
    for path, rel in sources(root):
        try:
            text = path.read_text(errors="replace")
        except OSError:  # moved or removed while we read
            continue
        sizes.append((rel, FILE, len(text.splitlines()), 1))
        parser = Parser(text).parse()
        if parser.unbalanced is not None:
            broken.append(f"{rel}:{parser.unbalanced}: the braces do not balance here; "
                          "size_check could not measure its functions")
        for name, line, open_line, close_line in parser.functions:
            sizes.append((rel, name, close_line - open_line + 1, line))
    return sizes, broken


def matches(rel, key):
    return rel == key or rel.endswith("/" + key)


def problems(root, known=None):
    known = KNOWN_LONG if known is None else known
    sizes, found = measure(root)
    used = {}
    for rel, name, lines, line in sizes:
        limit = MAX_FILE_LINES if name == FILE else MAX_FUNCTION_LINES
        if lines <= limit:
            continue
        what = f"{rel} is {lines} lines" if name == FILE else f"{rel}:{line} {name} is {lines} lines"
        keys = [key for key in known if key[1] == name and matches(rel, key[0])]
        if not keys:
            found.append(f"{what}, over {limit}: split it")
            continue
        key = max(keys, key=lambda k: len(k[0]))
        used.setdefault(key, set()).add(rel)
        if lines > known[key]:
            found.append(f"{what}, more than the {known[key]} KNOWN_LONG allows it: "
                         "it may shrink, not grow")
    for key in sorted(known):
        if key not in used:
            found.append(f"KNOWN_LONG {key} no longer offends (or its file is gone): "
                         "take it off KNOWN_LONG")
        elif len(used[key]) > 1:
            found.append(f"KNOWN_LONG {key} matches {', '.join(sorted(used[key]))}: "
                         "give each its parent folder too")
    return found


def listing(root):
    sizes, _ = measure(root)
    long = sorted((s for s in sizes if s[1] != FILE and s[2] > LIST_OVER), key=lambda s: -s[2])
    for rel, name, lines, line in long:
        print(f"{lines:5d}  {rel}:{line}  {name}")
    print(f"size: {len(long)} functions over {LIST_OVER} lines")


def self_test():
    def function(name, lines, body="  x += 1;\n"):  # `lines` lines from `{` to `}`
        return f"void {name}(int x) {{\n" + body * (lines - 2) + "}\n"

    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        for folder in ("lib", "tests/fuzz/json", "build/lib", "examples/data"):
            (root / folder).mkdir(parents=True)
        write = lambda rel, text: (root / rel).write_text(text)
        write("lib/ok.cpp", function("fits", 120) + "// filler\n" * 480)  # 600 lines
        write("lib/inline.h", "struct Wide {\n" + "".join(
            f"  int get{i}() const {{\n    return {i};\n  }}\n" for i in range(50)) + "};\n")
        write("tests/fuzz/json/corpus.cpp", function("ignored", 500))
        write("build/lib/gen.cpp", function("ignored", 500))
        write("examples/data/gen.cpp", function("ignored", 500))
        assert problems(root, {}) == [], problems(root, {})

        write("lib/big.cpp", "int x;\n" * 601)
        write("lib/long.cpp", "// one\n" + function("too_long", 121))
        write("lib/lambda.cu", "__global__ void __launch_bounds__(256) kern(float* p) {\n"
              "  auto f = [&](int i) -> float {\n" + "    p[i] += 1;\n" * 125 + "  };\n  f(0);\n}\n")
        write("lib/ctor.cpp", "Foo::Foo(int a) noexcept\n    : a_(a), b_{a, 2},\n"
              "      c_(std::min(a, 3)) {\n" + "  a_ += 1;\n" * 120 + "}\n")
        write("lib/tricky.cpp", 'const char* s = "{{{";\nchar c = \'{\';  // {\n/* } } */\n'
              'const char* r = R"x(\n}\n)x";\nint n = 1\'000;\n#define OPEN {\n'
              "#if A\nvoid f() {\n#else\nvoid f(int) {\n#endif\n  return;\n}\n"
              + function("after", 130, '  s = "}"; c = \'}\'; r = R"( { )";  // }\n'))
        write("lib/class.h", "namespace ft {\ntemplate <class T>\n"
              "class alignas(16) Box final : public Base<T> {\n public:\n  int size() const override {\n"
              + "    x++;\n" * 125 + "  }\n};\n"
              "}  // namespace ft\n")
        write("tests/foo_test.cpp", "TEST(Foo, Works) {\n" + "  EXPECT_TRUE(true);\n" * 125 + "}\n")
        found = problems(root, {})
        expect = ["lib/big.cpp is 601 lines, over 600", "lib/long.cpp:2 too_long is 121 lines",
                  "lib/lambda.cu:1 kern is 130 lines", "lib/ctor.cpp:1 Foo::Foo is 122 lines",
                  "lib/tricky.cpp:16 after is 130 lines", "lib/class.h:5 Box::size is 127 lines",
                  "tests/foo_test.cpp:1 TEST(Foo, Works) is 127 lines"]
        for want in expect:
            assert any(p.startswith(want) for p in found), (want, found)
        assert len(found) == len(expect), found  # no lambda, no class, no `f` from the #else

        known = {("big.cpp", FILE): 601, ("long.cpp", "too_long"): 121, ("lambda.cu", "kern"): 129,
                 ("lib/ctor.cpp", "Foo::Foo"): 200, ("tricky.cpp", "after"): 130,
                 ("class.h", "Box::size"): 127, ("foo_test.cpp", "TEST(Foo, Works)"): 127,
                 ("gone.cu", FILE): 700}
        found = problems(root, known)
        assert len(found) == 2, found
        assert "kern is 130 lines, more than the 129" in found[0], found
        assert "('gone.cu', '<file>') no longer offends" in found[1], found
        (root / "lib/moved").mkdir()
        (root / "lib/big.cpp").rename(root / "lib/moved/big.cpp")  # a git mv keeps its entry
        assert len(problems(root, known)) == 2, problems(root, known)
        write("examples/big.cpp", "int x;\n" * 601)
        found = problems(root, known)
        assert any("matches examples/big.cpp, lib/moved/big.cpp" in p for p in found), found
        write("lib/broken.cpp", "void f() {\n")
        assert any("lib/broken.cpp:1: the braces do not balance" in p for p in problems(root, known))
    print("size: self-test ok")


def main():
    if "--self-test" in sys.argv:
        self_test()
    root = pathlib.Path(__file__).resolve().parents[2]
    if "--list" in sys.argv:
        listing(root)
        return 0
    found = problems(root)
    for p in found:
        print("SIZE:", p)
    print(f"size: {'FAILED' if found else 'ok'} ({len(found)} problems)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
