"""Vocabulary loaders checked against the upstream tokenizers as oracles."""

import json
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ananke_jax._src.errors import VocabularyError
from ananke_jax._src.vocab import Vocabulary

SAMPLE_TEXTS = [
    "Hello, world! The quick brown fox.",
    "café déjà vu",
    "日本語のテキスト",
    "🎉👍🏽",
    '{"a": [1, 2.5e-3, null], "b": "x\\"y"}',
    "line one\nline two\n\tindented   three spaces\r\n",
    "\x00\x01\x7f ᚠᛇᚻ ꙮ 𓀀 ⅷ",  # control chars and rare scripts: mostly byte fallback
]

# SentencePiece encodes a space as '▁', so a literal '▁' in the text decodes as a space.
sp_texts = st.text(st.characters(codec="utf-8", exclude_characters="\u2581"), min_size=1, max_size=40)


def concat(vocab: Vocabulary, ids) -> bytes:
    return b"".join(vocab.token_bytes(i) for i in ids)


# --------------------------------------------------------------------------- SentencePiece


@pytest.fixture(scope="module")
def sp_processor(sentencepiece_model_path):
    sentencepiece = pytest.importorskip("sentencepiece")
    return sentencepiece.SentencePieceProcessor(model_file=sentencepiece_model_path)


@pytest.mark.parametrize("text", SAMPLE_TEXTS)
def test_sentencepiece_roundtrip(sentencepiece_vocab, sp_processor, text):
    # add_dummy_prefix: the encoded bytes are the text with a space prepended.
    assert concat(sentencepiece_vocab, sp_processor.encode(text)) == b" " + text.encode()


@settings(max_examples=50, deadline=None)
@given(text=sp_texts)
def test_sentencepiece_roundtrip_random(sentencepiece_vocab, sp_processor, text):
    assert concat(sentencepiece_vocab, sp_processor.encode(text)) == b" " + text.encode()


def test_sentencepiece_v1_layout(sentencepiece_vocab):
    vocab = sentencepiece_vocab
    assert len(vocab) == 32000 and vocab.logits_width == 32000
    assert vocab.eos_token_ids == (2,)
    assert vocab.special_token_ids == {0, 1, 2}
    assert vocab.tokens[:3] == (b"<unk>", b"<s>", b"</s>")
    assert vocab.token_bytes(3 + 0x0A) == b"\n"  # piece <0x0A>
    assert repr(vocab) == "Vocabulary(size=32000, logits_width=32000, eos=(2,), special=3)"


@pytest.mark.parametrize(
    "name",
    [
        "tokenizer.model.v1",
        "mistral_instruct_tokenizer_240216.model.v2",
        "mistral_instruct_tokenizer_240323.model.v3",
        "mistral_instruct_tokenizer_241114.model.v7",
    ],
)
def test_sentencepiece_piece_kinds_match_upstream(sentencepiece_model_path, name):
    sentencepiece = pytest.importorskip("sentencepiece")
    path = os.path.join(os.path.dirname(sentencepiece_model_path), name)
    sp = sentencepiece.SentencePieceProcessor(model_file=path)
    vocab = Vocabulary.from_sentencepiece(path)
    assert len(vocab) == sp.get_piece_size()
    assert vocab.eos_token_ids == (sp.eos_id(),)
    expected_special = {i for i in range(len(vocab)) if sp.is_control(i) or sp.is_unknown(i) or sp.is_unused(i)}
    assert vocab.special_token_ids == expected_special
    for i in range(len(vocab)):
        piece = sp.id_to_piece(i)
        if sp.is_byte(i):
            assert vocab.tokens[i] == bytes([int(piece[3:5], 16)])
        else:
            assert vocab.tokens[i] == piece.replace("\u2581", " ").encode()


# --------------------------------------------------------------------------- Tekken


@pytest.fixture(scope="module")
def tekkenizer(tekken_path):
    tekken = pytest.importorskip("mistral_common.tokens.tokenizers.tekken")
    return tekken.Tekkenizer.from_file(tekken_path)


@pytest.mark.parametrize("text", SAMPLE_TEXTS)
def test_tekken_roundtrip(tekken_vocab, tekkenizer, text):
    ids = tekkenizer.encode(text, bos=False, eos=False)
    assert concat(tekken_vocab, ids) == text.encode()


@settings(max_examples=50, deadline=None)
@given(text=st.text(st.characters(codec="utf-8"), max_size=40))
def test_tekken_roundtrip_random(tekken_vocab, tekkenizer, text):
    ids = tekkenizer.encode(text, bos=False, eos=False)
    assert concat(tekken_vocab, ids) == text.encode()


def test_tekken_layout(tekken_vocab, tekkenizer):
    vocab = tekken_vocab
    assert len(vocab) == 131072 == tekkenizer.n_words
    assert vocab.eos_token_ids == (tekkenizer.eos_id,)
    assert vocab.special_token_ids == set(range(1000))
    assert vocab.token_bytes(tekkenizer.bos_id) == b"<s>"
    assert vocab.token_bytes(999) == b"<SPECIAL_999>"
    for b in range(256):
        assert vocab.token_bytes(1000 + b) == bytes([b])
    for i in range(1000, len(vocab), 997):
        assert vocab.token_bytes(i) == tekkenizer.id_to_byte_piece(i)


def test_tekken_listed_special_tokens(tmp_path, tekken_path):
    with open(tekken_path, "rb") as f:
        data = json.load(f)
    data["config"]["default_vocab_size"] = 1300
    data["vocab"] = data["vocab"][:400]
    data["special_tokens"] = [
        {"rank": 0, "token_str": "<unk>", "is_control": True},
        {"rank": 1, "token_str": "<s>", "is_control": True},
        {"rank": 2, "token_str": "[INST]", "is_control": True},
        {"rank": 3, "token_str": "</s>", "is_control": True},
    ]
    path = tmp_path / "tekken_small.json"
    path.write_text(json.dumps(data))
    vocab = Vocabulary.from_tekken(path)
    assert len(vocab) == 1300
    assert vocab.eos_token_ids == (3,)
    assert vocab.tokens[:5] == (b"<unk>", b"<s>", b"[INST]", b"</s>", b"<SPECIAL_4>")
    assert vocab.token_bytes(1000 + ord("a")) == b"a"


# --------------------------------------------------------------------------- tokenizer.json

BYTE_LEVEL_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "café déjà vu, naïve façade",
    "日本語のテキスト 🎉👍🏽",
    '{"a": [1, 2.5e-3, null], "b": "x"}',
] * 10
ASCII_CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "hello world, hello there; json: {a: [1, 2]}",
] * 10


@pytest.fixture(scope="module")
def tokenizers_lib():
    return pytest.importorskip("tokenizers")


@pytest.fixture
def byte_level_bpe(tokenizers_lib, tmp_path):
    tok = tokenizers_lib.ByteLevelBPETokenizer()
    tok.train_from_iterator(BYTE_LEVEL_CORPUS, vocab_size=400, special_tokens=["<|endoftext|>", "<|im_end|>"])
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    return tok, path


@pytest.mark.parametrize(
    "text",
    ["The lazy dog.", "café déjà vu", "日本語 🎉 unseen ✓ ß", "x\n\t  y<|endoftext|>", "\x00ÿ"],
)
def test_tokenizer_json_byte_level(byte_level_bpe, text):
    tok, path = byte_level_bpe
    vocab = Vocabulary.from_tokenizer_json(path)
    assert concat(vocab, tok.encode(text).ids) == text.encode()
    assert len(vocab) == tok.get_vocab_size()
    assert vocab.special_token_ids == {0, 1}
    assert vocab.eos_token_ids == (0,)  # <|endoftext|>: no tokenizer_config.json here


def test_tokenizer_json_eos_sources(byte_level_bpe):
    _, path = byte_level_bpe
    assert Vocabulary.from_tokenizer_json(path, eos_token_ids=[5, 1]).eos_token_ids == (1, 5)
    assert Vocabulary.from_tokenizer_json(path, eos_token_ids=7).special_token_ids == {0, 1, 7}
    config = path.parent / "tokenizer_config.json"
    config.write_text(json.dumps({"eos_token": "<|im_end|>"}))
    assert Vocabulary.from_tokenizer_json(path).eos_token_ids == (1,)
    config.write_text(json.dumps({"eos_token": {"content": "<|endoftext|>", "special": True}}))
    assert Vocabulary.from_tokenizer_json(path).eos_token_ids == (0,)
    config.write_text(json.dumps({"eos_token": "<nope>"}))
    with pytest.raises(VocabularyError, match="<nope>"):
        Vocabulary.from_tokenizer_json(path)


def test_tokenizer_json_no_eos(tokenizers_lib, tmp_path):
    tok = tokenizers_lib.ByteLevelBPETokenizer()
    tok.train_from_iterator(ASCII_CORPUS, vocab_size=300)
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    with pytest.raises(VocabularyError, match="eos_token_ids"):
        Vocabulary.from_tokenizer_json(path)


def _llama_style_bpe(tokenizers_lib):
    """A BPE over '▁'-escaped text with byte fallback and the Llama decoder chain."""
    from tokenizers import decoders, models, normalizers, trainers

    tok = tokenizers_lib.Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tok.decoder = decoders.Sequence(
        [
            decoders.Replace("\u2581", " "),
            decoders.ByteFallback(),
            decoders.Fuse(),
            decoders.Strip(" ", 1, 0),
        ]
    )
    trainer = trainers.BpeTrainer(vocab_size=200, special_tokens=["<unk>", "<s>", "</s>"])
    tok.train_from_iterator(ASCII_CORPUS, trainer)
    # The trainer knows nothing of byte fallback; add the <0xNN> pieces to the model vocab.
    data = json.loads(tok.to_str())
    model_vocab = data["model"]["vocab"]
    for b in range(256):
        model_vocab[f"<0x{b:02X}>"] = len(model_vocab)
    return tokenizers_lib.Tokenizer.from_str(json.dumps(data))


def _sentencepiece_bpe(tokenizers_lib):
    tok = tokenizers_lib.SentencePieceBPETokenizer()
    tok.train_from_iterator(ASCII_CORPUS, vocab_size=200, special_tokens=["<unk>", "</s>"])
    return tok


def _sentencepiece_unigram(tokenizers_lib):
    tok = tokenizers_lib.SentencePieceUnigramTokenizer()
    tok.train_from_iterator(ASCII_CORPUS, vocab_size=100, special_tokens=["<unk>", "</s>"], unk_token="<unk>")
    return tok


@pytest.mark.parametrize("make", [_llama_style_bpe, _sentencepiece_bpe, _sentencepiece_unigram])
def test_tokenizer_json_metaspace(tokenizers_lib, tmp_path, make):
    tok = make(tokenizers_lib)
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    vocab = Vocabulary.from_tokenizer_json(path)
    assert vocab.tokens[vocab.eos_token_ids[0]] == b"</s>"
    assert b"<unk>" in [vocab.tokens[i] for i in vocab.special_token_ids]
    for text in ["hello world", "the lazy fox, json: {a: [1, 2]}", "over the dog"]:
        # The tokenizer prepends '▁' to its input, which the vocabulary reads as a space.
        assert concat(vocab, tok.encode(text).ids) == b" " + text.encode()


@pytest.mark.parametrize("text", ["café déjà vu", "日本語 🎉", "tab\there\nnew  line"])
def test_tokenizer_json_byte_fallback(tokenizers_lib, tmp_path, text):
    tok = _llama_style_bpe(tokenizers_lib)
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    vocab = Vocabulary.from_tokenizer_json(path)
    ids = tok.encode(text).ids
    assert any(vocab.tokens[i] in (b"\xc3", b"\xe6", b"\t") for i in ids)  # via byte fallback
    assert concat(vocab, ids) == b" " + text.encode()


def test_tokenizer_json_unsupported_decoder(tokenizers_lib, tmp_path):
    tok = tokenizers_lib.BertWordPieceTokenizer()
    tok.train_from_iterator(ASCII_CORPUS, vocab_size=100)
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    with pytest.raises(VocabularyError, match="WordPiece"):
        Vocabulary.from_tokenizer_json(path, eos_token_ids=0)


def test_tokenizer_json_gaps_and_non_special_added(tmp_path):
    data = {
        "model": {"type": "BPE", "vocab": {"a": 0, "\u2581b": 1}, "merges": []},
        "decoder": {"type": "Metaspace", "replacement": "\u2581"},
        "added_tokens": [
            {"id": 4, "content": "</s>", "special": True},
            {"id": 5, "content": "<tool\u2581call>", "special": False},
        ],
    }
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(data))
    vocab = Vocabulary.from_tokenizer_json(path)
    assert vocab.tokens == (b"a", b" b", b"", b"", b"</s>", "<tool\u2581call>".encode())
    assert vocab.special_token_ids == {2, 3, 4}
    assert vocab.eos_token_ids == (4,)


# --------------------------------------------------------------------------- from_tokens


def test_from_tokens():
    vocab = Vocabulary.from_tokens(["a", b"b", "é", "</s>"], eos_token_ids=[3], special_token_ids={3})
    assert vocab.tokens == (b"a", b"b", "é".encode(), b"</s>")
    assert len(vocab) == 4 and vocab.logits_width == 4
    assert vocab.eos_token_ids == (3,) and vocab.special_token_ids == {3}
    padded = Vocabulary.from_tokens(["a", "b"], eos_token_ids=1, logits_width=128)
    assert len(padded) == 2 and padded.logits_width == 128
    assert padded.special_token_ids == {1}  # eos ids are always special
    with pytest.raises(IndexError):
        padded.token_bytes(2)
    with pytest.raises(IndexError):
        padded.token_bytes(-1)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(eos_token_ids=[]), "EOS"),
        (dict(eos_token_ids=[3]), "EOS token id 3 is out of range"),
        (dict(eos_token_ids=[-1]), "out of range"),
        (dict(eos_token_ids=[0], special_token_ids=[7]), "special token id 7"),
        (dict(eos_token_ids=[0], logits_width=2), "logits_width 2"),
        (dict(eos_token_ids=["0"]), "int"),
    ],
)
def test_from_tokens_validation(kwargs, message):
    with pytest.raises(VocabularyError, match=message):
        Vocabulary.from_tokens(["a", "b", "c"], **kwargs)


def test_init_requires_bytes():
    with pytest.raises(VocabularyError, match="from_tokens"):
        Vocabulary(["a"], eos_token_ids=[0])


# --------------------------------------------------------------------------- bad files


def test_missing_files(tmp_path):
    missing = tmp_path / "nope.model"
    loaders = [
        Vocabulary.from_sentencepiece,
        Vocabulary.from_tekken,
        Vocabulary.from_tokenizer_json,
    ]
    for load in loaders:
        with pytest.raises(VocabularyError, match=r"nope\.model"):
            load(missing)


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int32s are sign-extended to 64 bits
    out = bytearray()
    while True:
        out.append(value & 0x7F | (0x80 if value > 0x7F else 0))
        value >>= 7
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _varint_field(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)


def _piece(text: str, piece_type: int | None = None) -> bytes:
    score = b"\x15" + bytes(4)  # field 2, fixed32 0.0
    kind = b"" if piece_type is None else _varint_field(3, piece_type)
    return _field(1, _field(1, text.encode()) + score + kind)


def test_sentencepiece_hand_written_model(tmp_path):
    pieces = [("<pad>", 3), ("</s>", 3), ("\u2581a\u2581b", None), ("<0xFF>", 6), ("<tool>", 4)]
    pieces.append(("<x>", 5))

    def model(eos_id: int) -> bytes:
        # unk_id (40) = -1, eos_id (42), pad_id (43) = 0, plus an unrelated string field.
        trainer = _varint_field(40, -1) + _varint_field(42, eos_id) + _varint_field(43, 0)
        trainer += _field(2, b"prefix")
        normalizer = _varint_field(3, 1)
        header = _field(2, trainer) + _field(3, normalizer)
        return b"".join(_piece(p, t) for p, t in pieces) + header

    path = tmp_path / "tiny.model"
    path.write_bytes(model(1))
    vocab = Vocabulary.from_sentencepiece(path, logits_width=8)
    assert vocab.tokens == (b"<pad>", b"</s>", b" a b", b"\xff", b"<tool>", b"<x>")
    assert vocab.eos_token_ids == (1,)
    assert vocab.special_token_ids == {0, 1, 5}
    assert vocab.logits_width == 8
    path.write_bytes(model(-1))
    with pytest.raises(VocabularyError, match="no EOS"):
        Vocabulary.from_sentencepiece(path)


def test_corrupt_sentencepiece(tmp_path, sentencepiece_model_path):
    with open(sentencepiece_model_path, "rb") as f:
        data = f.read()
    cases = {
        "garbage.model": b"this is not a sentencepiece model\xff\xfe",
        "truncated.model": data[: len(data) // 2],
        "empty.model": b"",
        "no_trainer_spec.model": _piece("<unk>", 2),
        "bad_byte_piece.model": _piece("<0xZZ>", 6) + _field(2, b""),
        "wrong_wire_type.model": _varint_field(1, 5) + _field(2, b""),
    }
    for name, content in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        with pytest.raises(VocabularyError, match=name):
            Vocabulary.from_sentencepiece(path)


def _tekken_json(num_special: int, vocab_size: int, vocab: list) -> str:
    config = {"default_vocab_size": vocab_size, "default_num_special_tokens": num_special}
    return json.dumps({"config": config, "vocab": vocab})


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        "[1, 2, 3]",
        '{"config": {}, "vocab": []}',
        _tekken_json(20, 25, []),  # too few ordinary tokens
        _tekken_json(2, 3, [{"rank": 0, "token_bytes": "AA=="}]),  # default specials need 20
        _tekken_json(20, 21, [{"rank": 0, "token_bytes": "!!!"}]),  # bad base64
        _tekken_json(20, 21, [{"rank": 3, "token_bytes": "AA=="}]),
        _tekken_json(20, 21, [{"rank": 0}]),
    ],
)
def test_corrupt_tekken(tmp_path, content):
    path = tmp_path / "bad_tekken.json"
    path.write_text(content)
    with pytest.raises(VocabularyError, match=r"bad_tekken\.json"):
        Vocabulary.from_tekken(path)


@pytest.mark.parametrize(
    "content",
    [
        b"\xff\xfe not utf-8",
        b'{"model": {"vocab": {}}}',
        b'{"model": {"vocab": {"a": "zero"}}}',
        b'{"model": {"vocab": {"a": 0, "b": 0}}}',
        b'{"model": {"vocab": {"a": 0}}, "added_tokens": [{"content": "</s>"}]}',
        b'{"model": {"vocab": {"a": 0}}, "decoder": {"type": "Replace", "pattern": {"Regex": "x"}, "content": ""}}',
    ],
)
def test_corrupt_tokenizer_json(tmp_path, content):
    path = tmp_path / "bad_tokenizer.json"
    path.write_bytes(content)
    with pytest.raises(VocabularyError, match=r"bad_tokenizer\.json"):
        Vocabulary.from_tokenizer_json(path, eos_token_ids=0)


# --------------------------------------------------------------------------- fingerprint


def test_fingerprint(sentencepiece_vocab, sentencepiece_model_path, tekken_vocab):
    again = Vocabulary.from_sentencepiece(sentencepiece_model_path)
    assert again.fingerprint == sentencepiece_vocab.fingerprint
    assert again == sentencepiece_vocab and hash(again) == hash(sentencepiece_vocab)
    assert len(again.fingerprint) == 64
    wider = Vocabulary.from_sentencepiece(sentencepiece_model_path, logits_width=32768)
    assert wider.fingerprint != sentencepiece_vocab.fingerprint
    assert tekken_vocab.fingerprint != sentencepiece_vocab.fingerprint

    base = Vocabulary.from_tokens(["ab", "c"], eos_token_ids=[1])
    variants = [
        Vocabulary.from_tokens(["a", "bc"], eos_token_ids=[1]),  # same concatenation
        Vocabulary.from_tokens(["ab", "c"], eos_token_ids=[0]),
        Vocabulary.from_tokens(["ab", "c"], eos_token_ids=[1], special_token_ids=[0]),
        Vocabulary.from_tokens(["ab", "c"], eos_token_ids=[1], logits_width=3),
    ]
    assert len({base.fingerprint, *(v.fingerprint for v in variants)}) == 5
    assert base == Vocabulary.from_tokens([b"ab", b"c"], eos_token_ids=1)
    assert base != variants[0] and base != "not a vocabulary"


@settings(max_examples=50, deadline=None)
@given(text=st.text(st.characters(codec="utf-8"), max_size=40))
def test_decode_is_the_tokenizers_own_decode_and_skips_specials_and_padding(tekken_vocab, tekkenizer, text):
    ids = tekkenizer.encode(text, bos=True, eos=True)  # BOS and EOS are special: they spell nothing
    assert tekken_vocab.decode([*ids, -1, -1]) == tekkenizer.decode(ids) == text
    assert tekken_vocab.decode(np.asarray([ids], np.int32)) == text
