#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/).

    tests/fuzz/make-corpus.py [OUT_DIR]      (default: tests/fuzz/corpus)

gguf/: small GGUF images written from the format's description: versions 1,
2 and 3, every metadata value type, arrays of each, tensors of several types,
a custom alignment, a tiny SentencePiece vocabulary and a tiny byte-level BPE
one (so that the target's tokenizer stage has something to build), and a few
broken ones (truncated, bad magic). Each file is well under 4 KiB.

tokenizer/: inputs of fuzz_tokenizer: the first byte picks the vocabulary and
the flags, the rest is the text.

The output is deterministic; the committed corpus is this script's output.
"""
import os
import struct
import sys

# metadata value types (on-disk ids)
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
SCALAR_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i",
              F32: "<f", BOOL: "<B", U64: "<Q", I64: "<q", F64: "<d"}

# tensor types (on-disk ids) with (block size, bytes per block)
T_F32, T_F16, T_Q4_0, T_Q8_0, T_I32, T_BF16 = 0, 1, 2, 8, 26, 30
TYPE_BLOCK = {T_F32: (1, 4), T_F16: (1, 2), T_Q4_0: (32, 18), T_Q8_0: (32, 34),
              T_I32: (1, 4), T_BF16: (1, 2)}


class Gguf:
    def __init__(self, version=3, alignment=32):
        self.version = version
        self.alignment = alignment
        self.kv = []       # (key, type, value[, element type])
        self.tensors = []  # (name, type, dims)

    # counts and lengths: uint32 in v1, uint64 after
    def _n(self, n):
        return struct.pack("<I" if self.version == 1 else "<Q", n)

    def _str(self, s):
        b = s.encode() if isinstance(s, str) else s
        return self._n(len(b)) + b

    def _value(self, t, v, et=None):
        if t == STR:
            return self._str(v)
        if t == ARR:
            out = struct.pack("<I", et) + self._n(len(v))
            for x in v:
                out += self._value(et, x)
            return out
        return struct.pack(SCALAR_FMT[t], v)

    def add(self, key, t, v, et=None):
        self.kv.append((key, t, v, et))
        return self

    def tensor(self, name, t, dims):
        self.tensors.append((name, t, dims))
        return self

    def bytes(self):
        out = b"GGUF" + struct.pack("<I", self.version)
        out += self._n(len(self.tensors)) + self._n(len(self.kv))
        for key, t, v, et in self.kv:
            out += self._str(key) + struct.pack("<I", t) + self._value(t, v, et)
        offset, sizes = 0, []
        for name, t, dims in self.tensors:
            n = 1
            for d in dims:
                n *= d
            blk, size = TYPE_BLOCK[t]
            nbytes = n // blk * size
            out += self._str(name) + struct.pack("<I", len(dims))
            for d in dims:
                out += self._n(d)
            out += struct.pack("<I", t) + struct.pack("<Q", offset)
            sizes.append(nbytes)
            offset += (nbytes + self.alignment - 1) // self.alignment * self.alignment
        if self.tensors:
            out += b"\0" * (-len(out) % self.alignment)
            for i, nbytes in enumerate(sizes):
                # small deterministic non-zero data
                out += bytes((i * 7 + j) % 251 for j in range(nbytes))
                out += b"\0" * (-nbytes % self.alignment)
        return out


def every_type(version):
    g = Gguf(version)
    g.add("general.architecture", STR, "llama")
    g.add("general.name", STR, "fuzz seed")
    g.add("t.u8", U8, 200).add("t.i8", I8, -5).add("t.u16", U16, 60000)
    g.add("t.i16", I16, -30000).add("t.u32", U32, 4000000000).add("t.i32", I32, -2)
    g.add("t.f32", F32, 1.5).add("t.bool", BOOL, 1).add("t.u64", U64, 1 << 40)
    g.add("t.i64", I64, -(1 << 40)).add("t.f64", F64, -0.25)
    g.add("t.str.empty", STR, "").add("t.str.nul", STR, b"a\0b")
    g.add("t.str.utf8", STR, "caf\u00e9 \u2581\U0001F600")
    for et, vals in ((U8, [0, 1, 255]), (I8, [-1, 2]), (U16, [7]), (I16, [-7, 7]),
                     (U32, [1, 2, 3]), (I32, [-1]), (F32, [0.5, -2.0]), (BOOL, [0, 1]),
                     (U64, [9]), (I64, [-9]), (F64, [3.25]), (STR, ["x", "", "yz"])):
        g.add("a.%d" % et, ARR, vals, et)
    g.add("a.empty", ARR, [], U32)
    return g


def with_tensors(version, alignment=32):
    g = Gguf(version, alignment)
    g.add("general.architecture", STR, "llama")
    if alignment != 32:
        g.add("general.alignment", U32, alignment)
    g.tensor("a.weight", T_F32, [4, 2]).tensor("b.weight", T_F16, [8])
    g.tensor("c.weight", T_Q8_0, [32, 1]).tensor("d.weight", T_Q4_0, [32])
    g.tensor("e", T_I32, [1, 1, 1, 3]).tensor("f", T_BF16, [2, 3])
    return g


def spm_vocab(version=3):
    """A SentencePiece vocabulary: specials, byte tokens for a few bytes, pieces."""
    g = Gguf(version)
    g.add("general.architecture", STR, "llama")
    pieces = ["<unk>", "<s>", "</s>"]
    types = [2, 3, 3]
    for b in (0x0A, 0x20, 0x41, 0xC3, 0xA9, 0xE2, 0x96, 0x81):
        pieces.append("<0x%02X>" % b)
        types.append(6)
    for p in ["\u2581", "\u2581t", "he", "\u2581the", "\u2581a", "b", "c", "e", "h", "t",
              "\u2581c", "at", "\u2581cat", "\u00e9", "<|user|>"]:
        pieces.append(p)
        types.append(4 if p.startswith("<|") else 1)
    g.add("tokenizer.ggml.model", STR, "llama")
    g.add("tokenizer.ggml.tokens", ARR, pieces, STR)
    g.add("tokenizer.ggml.scores", ARR, [-float(i) for i in range(len(pieces))], F32)
    g.add("tokenizer.ggml.token_type", ARR, types, I32)
    g.add("tokenizer.ggml.bos_token_id", U32, 1).add("tokenizer.ggml.eos_token_id", U32, 2)
    g.add("tokenizer.ggml.unknown_token_id", U32, 0)
    g.add("tokenizer.ggml.add_bos_token", BOOL, 1)
    g.add("tokenizer.ggml.add_space_prefix", BOOL, 1)
    return g


def byte_unicode():
    """GPT-2's map of bytes to printable code points."""
    keep = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    m, n = {}, 0
    for b in range(256):
        if b in keep:
            m[b] = chr(b)
        else:
            m[b] = chr(256 + n)
            n += 1
    return m


def bpe_vocab(pre):
    """A byte-level BPE vocabulary: all 256 byte symbols, a few merges, specials."""
    g = Gguf(3)
    g.add("general.architecture", STR, "gpt2")
    bu = byte_unicode()
    tokens = [bu[b] for b in range(256)]
    merges = [("\u0120", "t"), ("h", "e"), ("\u0120t", "he"), ("i", "n"), ("\u0120", "a")]
    for a, b in merges:
        tokens.append(a + b)
    tokens += ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    types = [1] * (len(tokens) - 3) + [3, 3, 3]
    g.add("tokenizer.ggml.model", STR, "gpt2")
    if pre is not None:
        g.add("tokenizer.ggml.pre", STR, pre)
    g.add("tokenizer.ggml.tokens", ARR, tokens, STR)
    g.add("tokenizer.ggml.token_type", ARR, types, I32)
    g.add("tokenizer.ggml.merges", ARR, ["%s %s" % m for m in merges], STR)
    eot = len(tokens) - 3
    g.add("tokenizer.ggml.bos_token_id", U32, eot).add("tokenizer.ggml.eos_token_id", U32, eot)
    return g


def gguf_seeds():
    seeds = {
        "v1-types.bin": every_type(1).bytes(),
        "v2-types.bin": every_type(2).bytes(),
        "v3-types.bin": every_type(3).bytes(),
        "v2-tensors.bin": with_tensors(2).bytes(),
        "v3-tensors.bin": with_tensors(3).bytes(),
        "v3-align64.bin": with_tensors(3, 64).bytes(),
        "v3-empty.bin": Gguf(3).bytes(),
        "spm-v3.bin": spm_vocab(3).bytes(),
        "spm-v1.bin": spm_vocab(1).bytes(),
        "bpe-gpt2.bin": bpe_vocab("gpt-2").bytes(),
        "bpe-llama3.bin": bpe_vocab("llama3").bytes(),
        "bpe-smollm.bin": bpe_vocab("smollm").bytes(),
    }
    full = with_tensors(3).bytes()
    seeds["truncated.bin"] = full[: len(full) // 2]
    seeds["bad-magic.bin"] = b"GGUG" + full[4:64]
    return seeds


# fuzz_tokenizer: byte 0 bit 0 picks the vocabulary (0: SentencePiece,
# 1: GPT-2 BPE), bits 1-2 add_special and parse_special; the rest is text.
TEXTS = [
    b"Hello world",
    b"Once upon a time, there was a little cat.",
    "caf\u00e9 na\u00efve \u00fcber \u65e5\u672c\u8a9e \U0001F600\U0001F44D\U0001F3FD".encode(),
    b"  leading and  double  spaces\n\nnew lines\ttabs\r\n",
    b"I'm sure they'll say we've done it, isn't it? 'S 'T",
    b"12345 3.14159 1,000,000 0x1F",
    b"<s>special</s> <unk> <|endoftext|><|im_start|>user\nhi<|im_end|>",
    b"\xff\xfe invalid \xc3 utf8 \xe2\x82 cut \xf0\x9f\x98",
    b"\x00nul\x00bytes\x00",
    b"",
]


def tokenizer_seeds():
    seeds = {}
    for i, text in enumerate(TEXTS):
        for sel in (0, 1, 6, 7):
            seeds["text%02d-%d.bin" % (i, sel)] = bytes([sel]) + text
    return seeds


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus")
    for target, seeds in (("gguf", gguf_seeds()), ("tokenizer", tokenizer_seeds())):
        d = os.path.join(out, target)
        os.makedirs(d, exist_ok=True)
        for name, data in sorted(seeds.items()):
            assert len(data) < 4096, (name, len(data))
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)


if __name__ == "__main__":
    main()
