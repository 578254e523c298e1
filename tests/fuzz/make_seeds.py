#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora: tests/fuzz/<target>/seed-*, a few tiny valid and
near-valid inputs each, so that libFuzzer starts from the formats' structure instead of from
nothing. Run it again after changing a format; it rewrites only seed-* files, never the regress-*
inputs that found bugs."""
import gzip
import json
import pathlib
import struct

HERE = pathlib.Path(__file__).resolve().parent


def write(target, name, data):
    folder = HERE / target
    folder.mkdir(exist_ok=True)
    (folder / f"seed-{name}").write_bytes(data.encode() if isinstance(data, str) else data)


def json_seeds():
    write("json", "object", '{"a": 1, "b": [true, false, null], "c": {"d": "e\\u0041\\n"}}')
    write("json", "numbers", '[0, -0, 12, -7, 1.5, -2.5e-3, 6E+2, 9223372036854775807, -9223372036854775808]')
    write("json", "integers", '{"shape": [2, 3], "data_offsets": [0, 24]}')
    write("json", "deep", "[[[[[[[[1]]]]]]]]")
    write("json", "too-large", "[9223372036854775808, 1e400]")
    write("json", "unterminated", '{"key": "value')
    write("json", "bad-escape", '["\\x", "\\u00e9"]')


def cli_seeds():
    def argv(*args):
        return "\0".join(args)

    write("cli", "flags", argv("--epochs", "3", "--lr", "1e-3", "--batch=256", "--device", "cpu"))
    write("cli", "help", argv("--help"))
    write("cli", "negative", argv("--lr", "-0.1", "--offset", "-9223372036854775808", "--scale", "-1e308"))
    write("cli", "bad-numbers", argv("--steps", "2x", "--dropout", "nan", "--seed", "99999999999999999999"))
    write("cli", "unknown", argv("--nope", "1", "stray"))
    write("cli", "missing-value", argv("--hidden"))
    write("cli", "signs", argv("--warmup", "+5", "--momentum", "0x1p-3", "--weight-decay", "1e-320"))


def idx_bytes(dims, payload, type_code=0x08):
    return bytes([0, 0, type_code, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + bytes(payload)


def idx_seeds():
    write("idx", "labels", idx_bytes([4], [1, 9, 0, 3]))
    write("idx", "images", idx_bytes([2, 2, 3], range(12)))
    write("idx", "labels.gz", gzip.compress(idx_bytes([3], [7, 8, 9]), mtime=0))
    write("idx", "truncated", idx_bytes([10, 2], range(19)))
    write("idx", "trailing", idx_bytes([3], range(4)))
    write("idx", "bad-type", idx_bytes([4], range(4), type_code=0x0D))
    write("idx", "zero-dim", idx_bytes([0, 5], []))


def shard_bytes(tokens, magic=20240520, version=1, count=None, width="H"):
    header = struct.pack("<3i", magic, version, len(tokens) if count is None else count) + bytes(253 * 4)
    return header + struct.pack(f"<{len(tokens)}{width}", *tokens)


def token_seeds():
    write("token_shards", "shard", shard_bytes([50256, 15496, 11, 995, 0]))
    write("token_shards", "outside-vocab", shard_bytes([1, 2, 50257]))
    write("token_shards", "truncated", shard_bytes([1, 2, 3], count=4))
    write("token_shards", "bad-magic", shard_bytes([1], magic=20240521))
    write("token_shards", "text", "The quick brown fox.\n")
    write("token_shards", "llama3", shard_bytes([128000, 791, 4062, 128255], 20240801, 7, width="I"))
    write("token_shards", "llama3-outside-vocab", shard_bytes([1, 128256], 20240801, 7, width="I"))


def safetensors_bytes(header, data=b""):
    text = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(text)) + text + data


def safetensors_seeds():
    write("safetensors", "two", safetensors_bytes(
        {"__metadata__": {"format": "pt"},
         "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
         "b": {"dtype": "BF16", "shape": [1, 2], "data_offsets": [8, 12]}}, bytes(12)))
    write("safetensors", "empty-tensor",
          safetensors_bytes({"e": {"dtype": "I64", "shape": [0, 3], "data_offsets": [0, 0]}}))
    write("safetensors", "overlap", safetensors_bytes(
        {"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
         "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}}, bytes(6)))
    write("safetensors", "past-end",
          safetensors_bytes({"a": {"dtype": "F64", "shape": [2], "data_offsets": [0, 16]}}, bytes(8)))
    write("safetensors", "unknown-dtype",
          safetensors_bytes({"a": {"dtype": "C64", "shape": [1], "data_offsets": [0, 8]}}, bytes(8)))
    write("safetensors", "long-header", struct.pack("<Q", 1 << 40) + b"{}")


def checkpoint_seeds():
    def checkpoint(manifest, metadata):
        optimizer = safetensors_bytes(
            {"__metadata__": metadata, "m": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, bytes(4))
        return manifest.encode() + b"\0" + optimizer

    def manifest(crc):
        return ('{"model.safetensors": {"bytes": 120, "crc32": %d}, '
                '"optimizer.safetensors": {"bytes": 88, "crc32": 7}}\n' % crc)

    write("checkpoint", "valid", checkpoint(manifest(3735928559), {"step": "40", "philox": "1234", "epoch": "1"}))
    write("checkpoint", "no-philox", checkpoint(manifest(1), {"step": "0"}))
    write("checkpoint", "bad-step", checkpoint(manifest(1), {"step": "-3", "philox": "x"}))
    write("checkpoint", "crc-too-large", checkpoint(manifest(1 << 32), {"step": "1"}))
    write("checkpoint", "missing-entry", checkpoint('{"model.safetensors": {"bytes": 1}}', {}))


def criteo_line(label, dense, sparse):
    return "\t".join([str(label)] + [str(x) for x in dense] + list(sparse))


def criteo_seeds():
    good = criteo_line(1, [1, 2, "", -4, 5, 6, 7, 8, 9, 10, 11, 12, 13], ["68fd1e64", "80E26C9B", ""] + ["0"] * 23)
    other = criteo_line(0, [0] * 13, ["fb936136"] * 26)
    write("criteo", "two-lines", good + "\n" + other + "\n")
    write("criteo", "crlf-no-final-newline", good + "\r\n" + other)
    write("criteo", "fields", good + "\tx\n" + other + "\n")
    write("criteo", "bad-values", criteo_line(2, [1] * 13, ["0"] * 26) + "\n" +
          criteo_line(1, ["99999999999999999999"] + [1] * 12, ["123456789"] + ["0"] * 25) + "\n" + other + "\n")


def tokenizer_seeds():
    gpt2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
    llama3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+")
    write("tokenizer", "gpt2", (gpt2 + "\0the quick  fox's 123\n").encode())
    write("tokenizer", "llama3", (llama3 + "\0IT'S 12345 (word)\n\n").encode())
    write("tokenizer", "classes", "[^a-c\\s]+?|(?:ab){1,3}|x(?=y)\0abxy caf\u00e9 \u6771 <|endoftext|>".encode())
    write("tokenizer", "bad", b"(?<n>a\\d\0\xff\xe6\x9d the")


if __name__ == "__main__":
    for make in (json_seeds, cli_seeds, idx_seeds, token_seeds, safetensors_seeds, checkpoint_seeds, criteo_seeds,
                 tokenizer_seeds):
        make()
