#!/usr/bin/env python3
"""ft-tokenize encodes as the `tokenizers` package does, token for token.

Trains two small byte-level BPE tokenizers with `tokenizers` on a mixed corpus: GPT-2's form
(the ByteLevel pre-tokenizer with its own pattern, merges as "a b" strings after a round trip
through the older format) and Llama 3's (a Split pattern with case-insensitive contractions and
digit groups of 1-3, ByteLevel without a pattern, ignore_merges, a template adding
<|begin_of_text|>). Each test text is encoded by both and must give the same ids, with and
without special tokens, and ft-tokenize --decode must give the text back. Files it cannot read
must fail with a message naming what.

With ft-gpt2 given too, a tiny GPT-2 trains on the documents' text through the GPT-2-style
tokenizer (encoded once into --token-cache, reused by a second run, which must reach the same
loss), its loss falls well below the uniform one, and its sample is printed as text.

    tokenizer_parity.py <ft-tokenize> <work folder> [<ft-gpt2>]
"""
import json
import os
import random
import shutil
import struct
import subprocess
import sys

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")

def random_texts(count, seed):
    """Texts drawn from pieces that stress the split patterns: contractions in any case, digit
    runs, white space of every kind, marks, letters of several scripts, emoji, added tokens."""
    rng = random.Random(seed)
    pieces = ["'s", "'T", "'re", "'VE", "'m", "'ll", "'D", "'", " ", "  ", "\t", "\n", "\r\n", "\n\n", " \n ",
              "\u00a0", "\u2003", "\u3000", "\u0085", "\x0b", "0", "7", "123", "45678", "\u0663\u0664", "\u2167",
              "\u00bd", "the", "The", "THE", "quick", "naïve", "Straße", "东京", "한국", "Ελλάδα", "мир", "🙂", "🚀🧪",
              "!", "?!", "...", "--", "(", ")", "#", "$", "\"", "<|endoftext|>", "<|begin_of_text|>", "<|end", "ö",
              "\u0301", "x1", "1x"]
    return ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 40))) for _ in range(count)]


CORPUS = [
    "The quick brown fox jumps over the lazy dog. It's 2026; we'll see what they've done.",
    "DON'T SHOUT. I'M here, you're there, she'd go. Numbers: 1234567 and 3.14159 and 42.",
    "Café, naïve, crème brûlée, Straße, Ærøskøbing, São Paulo. Ελληνικά κείμενα. Русский текст.",
    "東京は日本の首都です。北京是中国的首都。서울은 한국의 수도입니다. 🙂🚀 emoji too.",
    "def f(x):\n    return x * 2  # doubled\n\n\tindented\twith\ttabs\r\nwindows line\r\n",
    "   leading spaces, trailing spaces   \n\n\nmany newlines\n \n  \n",
    "<|endoftext|> a document ends <|endoftext|>and the next begins",
    "mixed123abc 12ab34 a1b2c3 ١٢٣ Ⅻ ½ ²³ 0x1F600 -- !!! ??? ... ''' \"quoted\" (paren) [bracket]",
] * 40

TEXTS = [
    "Hello world! It's a test.",
    "The QUICK brown fox... didn't jump; it'LL REST. They'Ve been 12345678 times.",
    "Café crème brûlée naïve Straße — «quotes» “curly” ‘single’",
    "東京タワー and 北京 and 서울, 🙂🚀🧪 and Ελληνικά",
    "def g(y):\n    if y > 0:\n        return y\n\n\n    return -y\r\n\t\ttabs\n",
    "     five leading spaces and trailing     ",
    "\n\n\n",
    " ",
    "a",
    "<|endoftext|>",
    "before<|endoftext|>after <|endoftext|> spaced",
    "numbers 1 12 123 1234 12345 1.5e-10 ١٢٣٤ ⅫⅣ ½¾",
    "unseen words: xylophone zygote quixotic syzygy",
    "mixed   \t \n  whitespace \u00a0nbsp\u2003em\u3000ideographic",
    "",
] + random_texts(300, seed=7)


def train(kind, folder):
    if kind == "gpt2":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        special = ["<|endoftext|>"]
    else:
        tok = Tokenizer(models.BPE(ignore_merges=True))
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
        special = ["<|begin_of_text|>", "<|endoftext|>"]
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=2000, special_tokens=special, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS + random_texts(2000, seed=1), trainer)
    if kind == "llama3":
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.TemplateProcessing(
            single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", bos)])
    path = os.path.join(folder, f"{kind}.json")
    tok.save(path)
    if kind == "gpt2":  # GPT-2's own tokenizer.json writes its merges as "a b" strings
        j = json.load(open(path, encoding="utf-8"))
        j["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in j["model"]["merges"]]
        json.dump(j, open(path, "w", encoding="utf-8"), ensure_ascii=True)  # \u escapes throughout
    return Tokenizer.from_file(path), path


def read_shard(path):
    """An llm.c shard's tokens: GPT-2's form (uint16) or Llama 3's (uint32)."""
    data = open(path, "rb").read()
    magic, version, count = struct.unpack("<3i", data[:12])
    width = {(20240520, 1): "H", (20240801, 7): "I"}[(magic, version)]
    return list(struct.unpack(f"<{count}{width}", data[1024:]))


def check_shards(binary, folder, kind, tok, path):
    """ft-tokenize --write-shards on 3 threads with small pieces (so that texts are cut at line
    starts) gives each document's start token and its tokens, in order, split as llm.c names them."""
    docs = [
        "".join(f"Line {i}: {t}\n" for i, t in enumerate(TEXTS * 3)),  # cut into many pieces
        "short document, no newline",
        "\n".join(random_texts(200, seed=11)),
    ]
    paths = []
    for i, doc in enumerate(docs):
        paths.append(os.path.join(folder, f"doc{i}.txt"))
        open(paths[-1], "wb").write(doc.encode("utf-8"))
    out = os.path.join(folder, f"shards-{kind}")
    got = run(binary, "--tokenizer", path, "--write-shards", out, "--input", ",".join(paths), "--name", kind,
              "--shard-tokens", "5000", "--val-tokens", "3000", "--threads", "3", "--piece-bytes", "1000")
    if got.returncode != 0:
        print(f"FAIL {kind} shards: {got.stderr.decode()}")
        return 1
    start = tok.token_to_id("<|begin_of_text|>" if kind == "llama3" else "<|endoftext|>")
    want = []
    for doc in docs:
        want += [start] + tok.encode(doc, add_special_tokens=False).ids
    names = sorted(os.listdir(out))
    shards = [read_shard(os.path.join(out, n)) for n in names]
    expected_names = [f"{kind}_train_{i:06d}.bin" for i in range(1, len(names))] + [f"{kind}_val_000000.bin"]
    ok = (sum(shards[-1:] + shards[:-1], []) == want and names == expected_names and len(shards[-1]) == 3000
          and all(len(s) == 5000 for s in shards[:-2]))
    print(f"{kind}: {len(want)} tokens of {len(docs)} documents in {len(names)} shards: "
          f"{'as tokenizers encodes them' if ok else 'MISMATCH'}; {got.stdout.decode().splitlines()[0]}")
    return 0 if ok else 1


def check_training(gpt2, folder):
    cache = os.path.join(folder, "token-cache")
    shutil.rmtree(cache, ignore_errors=True)  # a run before this one wrote the documents anew: another folder
    args = ["--train", os.path.join(folder, "doc*.txt"), "--format", "text", "--tokenizer",
            os.path.join(folder, "gpt2.json"), "--token-cache", cache, "--model", "tiny", "--seq", "64", "--batch", "8",
            "--steps", "60", "--lr", "3e-3", "--device", "cpu", "--log-every", "20", "--sample-every", "60",
            "--prompt", "The quick", "--sample-len", "20"]
    runs = [run(gpt2, *args) for _ in range(2)]
    results = []
    for r in runs:
        out = r.stdout.decode()
        line = [l for l in out.splitlines() if l.startswith("RESULT")]
        if r.returncode != 0 or not line or "sample at step 60:" not in out:
            print(f"FAIL ft-gpt2 --tokenizer: rc {r.returncode}\n{out}\n{r.stderr.decode()}")
            return 1
        fields = dict(kv.split("=") for kv in line[0].split()[1:])
        results.append((float(fields["final_loss"]), float(fields["uniform_loss"])))
    (loss, uniform), (again, _) = results
    folders = os.listdir(cache)
    ok = loss < uniform - 2.5 and again == loss and len(folders) == 1
    print(f"ft-gpt2 --tokenizer: final loss {loss:.4f} (uniform {uniform:.4f}), again {again:.4f} from the "
          f"cached shards ({len(folders)} cache folder): {'ok' if ok else 'MISMATCH'}")
    return 0 if ok else 1


def run(binary, *args):
    return subprocess.run([binary, *args], capture_output=True)


def main():
    binary, folder = sys.argv[1], sys.argv[2]
    os.makedirs(folder, exist_ok=True)
    texts = []
    for i, text in enumerate(TEXTS):
        path = os.path.join(folder, f"text{i}.txt")
        with open(path, "wb") as f:
            f.write(text.encode("utf-8"))
        texts.append(path)
    failures = 0
    for kind in ("gpt2", "llama3"):
        tok, path = train(kind, folder)
        for special in (False, True):
            got = run(binary, "--tokenizer", path, "--encode", ",".join(texts), "--add-special-tokens",
                      "1" if special else "0")
            if got.returncode != 0:
                print(f"error: ft-tokenize failed on {kind}: {got.stderr.decode()}")
                return 1
            lines = got.stdout.decode().split("\n")
            for i, text in enumerate(TEXTS):
                want = tok.encode(text, add_special_tokens=special).ids
                ours = [int(x) for x in lines[i].split()]
                if ours != want:
                    failures += 1
                    if failures <= 10:
                        print(f"FAIL {kind} special={special} text {i} {text!r}:\n  tokenizers {want}\n"
                              f"  ft-tokenize {ours}")
        # Decoding gives the text back.
        for i, text in enumerate(TEXTS):
            ids_path = os.path.join(folder, f"ids{i}.txt")
            with open(ids_path, "w") as f:
                f.write(" ".join(map(str, tok.encode(text, add_special_tokens=False).ids)))
            back = run(binary, "--tokenizer", path, "--decode", ids_path)
            if back.returncode != 0 or back.stdout != text.encode("utf-8"):
                failures += 1
                if failures <= 10:
                    print(f"FAIL {kind} decode text {i}: {back.stdout!r} {back.stderr.decode()}")
        print(f"{kind}: {len(TEXTS)} texts, vocabulary {tok.get_vocab_size()}: "
              f"{'the same ids' if failures == 0 else 'MISMATCH'}")

        failures += check_shards(binary, folder, kind, tok, path)

    # Files it cannot read: the error names what.
    base = json.load(open(os.path.join(folder, "gpt2.json"), encoding="utf-8"))
    cases = {
        "unigram": (lambda j: j["model"].update(type="Unigram"), "model type 'Unigram' is not supported"),
        "normalizer": (lambda j: j.update(normalizer={"type": "NFC"}), "normalizer 'NFC' is not supported"),
        "fallback": (lambda j: j["model"].update(byte_fallback=True), "byte_fallback is not supported"),
        "merge": (lambda j: j["model"]["merges"].append("zzqq xxyy"), "names a token the vocabulary lacks"),
        "pattern": (lambda j: j.update(pre_tokenizer={"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": r"\d+|^x"}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]}), "the escape \\d"),
        "truncated": (None, "at byte"),
    }
    for name, (edit, message) in cases.items():
        path = os.path.join(folder, f"bad-{name}.json")
        if edit is None:
            text = json.dumps(base)
            open(path, "w").write(text[: len(text) // 2])
        else:
            j = json.loads(json.dumps(base))
            edit(j)
            json.dump(j, open(path, "w"))
        got = run(binary, "--tokenizer", path, "--encode", texts[0])
        err = got.stderr.decode()
        if got.returncode == 0 or message not in err or "bad-" + name not in err:
            failures += 1
            print(f"FAIL {name}: expected an error naming the file and '{message}', got rc {got.returncode}: {err}")
        else:
            print(f"{name}: {err.strip().splitlines()[-1]}")
    if len(sys.argv) > 3:
        failures += check_training(sys.argv[3], folder)
    print("error: tokenizer parity failed" if failures else "tokenizer parity: every text encodes the same")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
