#!/usr/bin/env python3
"""Writes the seed corpora under fuzz/corpus/<target>/ (docs/fuzzing.md).

Seeds are small, hand-picked inputs that reach each parser's main paths:
valid files plus a few typical malformations. Rerunning the script rewrites
them byte for byte; libFuzzer's own discoveries never go into the repository.
"""
import json
import os
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "fuzz", "corpus")


def write(target, name, data):
    folder = os.path.join(CORPUS, target)
    os.makedirs(folder, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


# ---------------------------------------------------------------------------
# json

def json_seeds():
    for src, name in [("models/featuregate-s1/config.json", "config_featuregate.json"),
                      ("tests/data/muddpythia-tiny-fp32/config.json", "config_muddpythia.json")]:
        with open(os.path.join(ROOT, src), "rb") as f:
            write("json", name, f.read())
    index = {"metadata": {"total_size": 877988},
             "weight_map": {"embed.weight": "model-00001-of-00002.safetensors",
                            "lm_head.weight": "model-00002-of-00002.safetensors"}}
    write("json", "index.json", json.dumps(index, indent=2))
    write("json", "manifest.json", json.dumps({
        "models": ["featuregate-s1", "dense"], "denseTwin": "dense",
        "evalDataset": "fortunes", "interventions": ["ablate", "shuffle"],
        "windowLength": "128", "seed": "18446744073709551615", "ciLevel": 0.95,
        "allowOverlap": False, "label": "caf\u00e9 \u2603"}, indent=2, ensure_ascii=False))
    write("json", "escapes.json",
          r'["\"\\\/\b\f\n\r\t", "\u0000\u001f\u00e9\u20ac", "\ud83d\ude00", "raw é € 😀"]')
    write("json", "numbers.json",
          "[0, -0, 1, -1, 0.5, -0.0, 1e308, 1E-320, 2.5e+3, 9223372036854775807, "
          "-9223372036854775808, 9223372036854775808, 123456789012345678901234567890, "
          "4.9406564584124654e-324, 1.7976931348623157e308]")
    write("json", "literals.json", '{"t": true, "f": false, "n": null, "e": {}, "a": []}')
    write("json", "nested.json", "[" * 20 + '{"deep": 1}' + "]" * 20)
    write("json", "whitespace.json", ' \t\r\n{ "a" : [ 1 , 2 ] , "b" : "c" } \n')
    write("json", "dup_key.json", '{"a": 1, "b": 2, "a": 3}')
    write("json", "truncated.json", '{"vocab": {"a": 1, "b": [1, 2, {"c": "\\u12')
    write("json", "trailing.json", '{"a": 1} x')
    write("json", "bad_utf8.json", b'["\xc3\x28", "\xed\xa0\x80"]')
    write("json", "many_keys.json",
          json.dumps({"k%d" % i: i for i in range(40)}))


# ---------------------------------------------------------------------------
# safetensors

def safetensors_bytes(tensors, metadata=None, pad=True):
    """tensors: [(name, dtype, shape, bytes)], written in order."""
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    offset = 0
    data = b""
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def raw_file(header_text, data=b""):
    header_text = header_text.encode() if isinstance(header_text, str) else header_text
    return struct.pack("<Q", len(header_text)) + header_text + data


def safetensors_seeds():
    tensors = [
        ("a.f32", "F32", [2, 3], struct.pack("<6f", 1.5, -2, 3, 4.25, 0, -0.0)),
        ("b.bf16", "BF16", [4], struct.pack("<4H", 0x3F80, 0xC000, 0x7F80, 1)),
        ("c.f16", "F16", [2, 2], struct.pack("<4H", 0x3C00, 0x4000, 0xFBFF, 0x8001)),
        ("d.i64", "I64", [3], struct.pack("<3q", -1, 9007199254740993, -2**63)),
        ("e.i32", "I32", [1, 2, 1], struct.pack("<2i", 7, -7)),
        ("f.f64", "F64", [1], struct.pack("<d", 3.25)),
        ("g.i16", "I16", [2], struct.pack("<2h", -3, 3)),
        ("h.i8", "I8", [], b"\x80"),
        ("i.u8", "U8", [0, 5], b""),
        ("j.bool", "BOOL", [2], b"\x00\x01"),
    ]
    write("safetensors", "all_dtypes.safetensors",
          safetensors_bytes(tensors, {"format": "pt", "note": "caf\u00e9"}))
    write("safetensors", "one_tensor.safetensors",
          safetensors_bytes([("w", "F32", [2], struct.pack("<2f", 1, 2))]))
    write("safetensors", "metadata_only.safetensors", safetensors_bytes([], {"k": "v"}))
    write("safetensors", "empty_header.safetensors", raw_file("{}"))
    write("safetensors", "unpadded.safetensors",
          safetensors_bytes([("x", "U8", [3], b"abc")], pad=False))
    write("safetensors", "too_short.safetensors", b"\x08\x00\x00")
    write("safetensors", "length_beyond_file.safetensors",
          struct.pack("<Q", 1 << 40) + b'{"a":1}')
    write("safetensors", "bad_json.safetensors", raw_file('{"a": {"dtype": "F32",'))
    write("safetensors", "not_object.safetensors", raw_file("[1, 2]"))
    write("safetensors", "overlap.safetensors", raw_file(
        '{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},'
        '"b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}}', b"abcd"))
    write("safetensors", "size_mismatch.safetensors", raw_file(
        '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}', b"abcd"))
    write("safetensors", "huge_dims.safetensors", raw_file(
        '{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]},'
        '"b":{"dtype":"U8","shape":[0,9223372036854775807],"data_offsets":[0,0]}}'))
    write("safetensors", "bad_dtype.safetensors", raw_file(
        '{"a":{"dtype":"F8","shape":[1],"data_offsets":[0,1]}}', b"x"))
    write("safetensors", "bad_metadata.safetensors", raw_file('{"__metadata__":{"k":1}}'))
    write("safetensors", "empty_name.safetensors", raw_file(
        '{"":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}'))
    write("safetensors", "negative.safetensors", raw_file(
        '{"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}}', b"x"))


def index_seeds():
    first, second = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
    valid = {"metadata": {"total_size": 16}, "weight_map": {"a": first, "b": first, "c": second}}
    write("safetensors_index", "valid.json", json.dumps(valid, indent=2))
    write("safetensors_index", "one_shard.json",
          json.dumps({"weight_map": {"c": second}}))
    write("safetensors_index", "traversal.json",
          json.dumps({"weight_map": {"a": "../" + first, "b": first, "c": second}}))
    write("safetensors_index", "missing_tensor.json",
          json.dumps({"weight_map": {"a": first, "c": second}}))
    write("safetensors_index", "wrong_shard.json",
          json.dumps({"weight_map": {"a": second, "b": first, "c": second}}))
    write("safetensors_index", "unknown_tensor.json",
          json.dumps({"weight_map": {"a": first, "b": first, "c": second, "d": second}}))
    write("safetensors_index", "missing_file.json",
          json.dumps({"weight_map": {"a": "model-00003-of-00003.safetensors"}}))
    write("safetensors_index", "bad_metadata.json",
          json.dumps({"metadata": [], "weight_map": {}}))
    write("safetensors_index", "empty.json", "")


# ---------------------------------------------------------------------------
# tokenizer_json and bpe_encode

def trimmed_tokenizer(max_vocab=400, max_merges=150):
    """The real GPT-NeoX tokenizer.json cut down to its first ids and the
    merges among them: same structure, a few KB."""
    with open(os.path.join(ROOT, "tests/data/tokenizer/tokenizer.json"), encoding="utf-8") as f:
        full = json.load(f)
    vocab = {t: i for t, i in full["model"]["vocab"].items() if i < max_vocab}
    merges = []
    for m in full["model"]["merges"]:
        a, b = m.split(" ") if isinstance(m, str) else m
        if a in vocab and b in vocab and a + b in vocab:
            merges.append(m)
        if len(merges) == max_merges:
            break
    full["model"]["vocab"] = vocab
    full["model"]["merges"] = merges
    added = [t for t in full["added_tokens"] if t["id"] < 2]
    added.append(dict(full["added_tokens"][2], id=max_vocab))  # a run of spaces
    full["added_tokens"] = added
    return full


def small_tokenizer(**overrides):
    """A hand-written byte-level BPE over a few letters."""
    letters = ["a", "b", "c", "\u0120", "\u00e9", "d"]
    vocab = {t: i for i, t in enumerate(letters)}
    for m in ["a b", "\u0120 a", "ab c", "\u0120a b"]:
        vocab.setdefault(m.replace(" ", ""), len(vocab))
    tok = {
        "version": "1.0",
        "added_tokens": [
            {"id": 100, "content": "<s>", "special": True, "single_word": False,
             "lstrip": False, "rstrip": False, "normalized": False},
            {"id": 101, "content": "\u00e9t\u00e9", "special": False, "single_word": True,
             "lstrip": True, "rstrip": True, "normalized": True},
        ],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": True, "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel"},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "fuse_unk": False,
                  "vocab": vocab, "merges": ["a b", "\u0120 a", ["ab", "c"], "\u0120a b"]},
    }
    for path, value in overrides.items():
        node = tok
        keys = path.split(".")
        for k in keys[:-1]:
            node = node[k]
        node[keys[-1]] = value
    return tok


def dumps(obj):
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def tokenizer_seeds():
    write("tokenizer_json", "neox_trimmed.json", json.dumps(trimmed_tokenizer(), ensure_ascii=False))
    write("tokenizer_json", "small.json", dumps(small_tokenizer()))
    write("tokenizer_json", "small_with_text.bin",
          dumps(small_tokenizer()).encode() + b"\0abc \xc3\xa9t\xc3\xa9 <s>ab c\xcc\x81")
    vocab = small_tokenizer()["model"]["vocab"]
    write("tokenizer_json", "small_unk.json", dumps(small_tokenizer(**{
        "model.vocab": dict(vocab, **{"[UNK]": 50}), "model.unk_token": "[UNK]",
        "model.fuse_unk": True, "normalizer": None})))
    write("tokenizer_json", "small_ignore_merges.json", dumps(small_tokenizer(**{
        "model.ignore_merges": True, "pre_tokenizer.use_regex": False,
        "pre_tokenizer.add_prefix_space": False})))
    write("tokenizer_json", "small_pairs.json", dumps(small_tokenizer(**{
        "model.merges": [["a", "b"], ["\u0120", "a"], "#version: 0.2"]})))
    strip = {"id": 102, "content": " ", "special": False, "lstrip": True, "rstrip": True,
             "normalized": False}
    write("tokenizer_json", "small_strip_space.bin",
          dumps(small_tokenizer(**{"added_tokens": [strip]})).encode() + b"\0a   b \t c  ")
    write("tokenizer_json", "bad_model.json", dumps(small_tokenizer(**{"model.type": "WordPiece"})))
    write("tokenizer_json", "bad_merge.json", dumps(small_tokenizer(**{"model.merges": ["a z"]})))
    write("tokenizer_json", "big_id.json", dumps(small_tokenizer(**{
        "added_tokens": [{"id": 65535, "content": "x", "special": True}]})))


def text_samples():
    samples = []
    with open(os.path.join(ROOT, "tests/data/tokenizer/cases.jsonl"), encoding="utf-8") as f:
        for line in f:
            if line.strip():
                samples.append(json.loads(line)["text"].encode("utf-8"))
    samples += [
        b"\xc3\x28 invalid continuation",
        b"\xe0\x80\xaf overlong slash",
        b"\xed\xa0\x80 surrogate",
        b"\xf4\x90\x80\x80 above U+10FFFF",
        b"truncated \xe2\x82",
        b"\xff\xfe bytes never in UTF-8",
        "e\u0301\u0323\u0307 o\u031b\u0323 \u1100\u1161\u11a8 \u0958 \u2126".encode(),
        "\u0300 leading mark, \u0f73\u0f75 tibetan, \U0001d15e music".encode(),
        b"\x00 NUL and \x7f DEL",
    ]
    return samples


def text_seeds():
    for target in ("bpe_encode", "unicode"):
        for i, sample in enumerate(text_samples()):
            write(target, "text_%02d.txt" % i, sample)


# ---------------------------------------------------------------------------
# model_config: config.json of the dense/featuregate, torchscript and MoE families

def model_config_seeds():
    for src, name in [("models/featuregate-s1/config.json", "featuregate.json"),
                      ("models/dense/config.json", "dense.json"),
                      ("examples/models/featuregate-s1-ts/config.json", "torchscript_fg.json"),
                      ("examples/models/moe-tiny/config.json", "torchscript_moe.json"),
                      ("tests/data/olmoe-tiny/config.json", "olmoe.json"),
                      ("tests/data/qwen2-moe-tiny/config.json", "qwen2_moe.json")]:
        with open(os.path.join(ROOT, src), "rb") as f:
            write("model_config", name, f.read())
    site = {"name": "g.0", "family": "g", "layer": 0, "channels": 4}
    base = {"model_type": "torchscript", "vocab_size": 8, "max_seq_len": 8, "num_layers": 1,
            "dtype": "float32", "sites": [site]}
    write("model_config", "ts_duplicate_site.json", dumps(dict(base, sites=[site, site])))
    write("model_config", "ts_bad_layer.json", dumps(dict(base, sites=[dict(site, layer=3)])))
    write("model_config", "ts_blocks.json", dumps(dict(base, blocks_per_token=5)))
    moe = {"model_type": "olmoe", "vocab_size": 8, "hidden_size": 4, "num_hidden_layers": 1,
           "num_attention_heads": 2, "max_position_embeddings": 8, "num_experts": 2,
           "num_experts_per_tok": 1, "intermediate_size": 2, "rms_norm_eps": 1e-5}
    write("model_config", "olmoe_topk_too_large.json", dumps(dict(moe, num_experts_per_tok=3)))
    write("model_config", "olmoe_clip_null_kv.json",
          dumps(dict(moe, clip_qkv=8.0, num_key_value_heads=None, rope_scaling=None)))


def main():
    json_seeds()
    model_config_seeds()
    safetensors_seeds()
    index_seeds()
    tokenizer_seeds()
    text_seeds()
    total = sum(os.path.getsize(os.path.join(d, f))
                for d, _, files in os.walk(CORPUS) for f in files)
    print("fuzz corpus: %d bytes" % total, file=sys.stderr)


if __name__ == "__main__":
    main()
