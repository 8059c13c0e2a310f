"""Grammar IRs written out by hand for the pushdown-engine tests (independent of the front ends)."""

from ananke_jax._src.ir import grammar

ARITHMETIC = grammar(
    [("e", ["e", "PLUS", "t"]), ("e", ["t"]), ("t", ["t", "STAR", "f"]), ("t", ["f"]), ("f", ["LP", "e", "RP"]), ("f", ["NUM"])],
    {"PLUS": r"\+", "STAR": r"\*", "LP": r"\(", "RP": r"\)", "NUM": "[0-9]+", "WS": " +"},
    "e",
    ignore=["WS"],
)
# A toy vocabulary for ARITHMETIC with bridge tokens across terminals and ignored spaces.
ARITHMETIC_TOKENS = (
    [b"<eos>"]
    + [bytes([c]) for c in b"0123456789+*() "]
    + [
        b"12",
        b"+(",
        b")*",
        b"1+",
        b"(1",
        b"))",
        b" +",
        b"+ ",
        b"2)",
        b"1 2",
        b"((",
        b"2+3",
        b"3 *",
        b"0)+(",
    ]
)

JSON = grammar(
    [
        ("value", ["object"]),
        ("value", ["array"]),
        ("value", ["STRING"]),
        ("value", ["NUMBER"]),
        ("value", ["TRUE"]),
        ("value", ["FALSE"]),
        ("value", ["NULL"]),
        ("object", ["LBRACE", "RBRACE"]),
        ("object", ["LBRACE", "members", "RBRACE"]),
        ("members", ["pair"]),
        ("members", ["members", "COMMA", "pair"]),
        ("pair", ["STRING", "COLON", "value"]),
        ("array", ["LBRACK", "RBRACK"]),
        ("array", ["LBRACK", "elements", "RBRACK"]),
        ("elements", ["value"]),
        ("elements", ["elements", "COMMA", "value"]),
    ],
    {
        "LBRACE": r"\{",
        "RBRACE": r"\}",
        "LBRACK": r"\[",
        "RBRACK": r"\]",
        "COMMA": ",",
        "COLON": ":",
        "TRUE": "true",
        "FALSE": "false",
        "NULL": "null",
        "STRING": r'"([^"\\\x00-\x1f]|\\(["\\/bfnrt]|u[0-9a-fA-F]{4}))*"',
        "NUMBER": r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?",
        "WS": r"[ \t\n\r]+",
    },
    "value",
    ignore=["WS"],
)
JSON_EXAMPLES = [
    '{"name": "Ada Lovelace", "tags": ["math", "poet"], "age": 36, "ok": true, "x": -1.5e3}',
    '[1, 2.5, {"a": null}, [], {}, "\\u00e9\\n"]',
    '"just a string"',
    '{"nested": {"deeper": [[[0]]]}, "empty": ""}',
]

# Lexing ambiguity without separators: a word list where words are runs of letters, and a
# keyword that is also a word. Several configurations must be kept.
WORDS = grammar(
    [("s", ["item"]), ("s", ["s", "item"]), ("item", ["WORD"]), ("item", ["END", "BANG"])],
    {"WORD": "[a-z]+", "END": "end", "BANG": "!"},
    "s",
)
WORDS_TOKENS = [b"<eos>", b"a", b"e", b"n", b"d", b"!", b"en", b"end", b"end!", b"nd!", b"ab", b"d!a", b"!!"]

# Terminals that share a prefix but never meet in one place: a date at the top, quoted words in a
# list. A token may close one string and open the next (`","`), or end the list (`"]`).
DATES = grammar(
    [("s", ["DATE"]), ("s", ["LB", "items", "RB"]), ("items", ["WORD"]), ("items", ["items", "COMMA", "WORD"])],
    {"DATE": r'"[0-9]{2}-[0-9]{2}"', "WORD": r'"[a-z0-9-]*"', "LB": r"\[", "RB": r"\]", "COMMA": ","},
    "s",
)
DATES_TOKENS = [
    b"<eos>",
    *[bytes([c]) for c in b'"-0129ab[],'],
    b'"1',
    b"12",
    b"2-",
    b'-0"',
    b'","',
    b'"]',
    b'["',
    b"a-",
    b'0"',
    b'["1',
    b'9-9"',
]

# Grammars with LR conflicts, their terminals one character each: an ambiguous operator, the
# dangling else, optional spaces on both sides of a rule's end (LR(2), as llama.cpp's arithmetic
# grammar with `ws ::= [ \t\n]?`) and a list whose separators are optional.
AMBIGUOUS = grammar([("e", ["e", "PLUS", "e"]), ("e", ["NUM"])], {"PLUS": r"\+", "NUM": "n"}, "e")
DANGLING_ELSE = grammar([("s", ["IF", "s"]), ("s", ["IF", "s", "ELSE", "s"]), ("s", ["X"])], {"IF": "i", "ELSE": "e", "X": "x"}, "s")
OPTIONAL_SPACES = grammar(
    [
        ("e", ["t", "ws", "sums"]),
        ("sums", []),
        ("sums", ["sums", "PLUS", "ws", "t"]),
        ("t", ["f", "ws", "products"]),
        ("products", []),
        ("products", ["products", "STAR", "ws", "f"]),
        ("f", ["NUM"]),
        ("f", ["LP", "ws", "e", "ws", "RP"]),
        ("ws", []),
        ("ws", ["SP"]),
    ],
    {"PLUS": r"\+", "STAR": r"\*", "NUM": "n", "LP": r"\(", "RP": r"\)", "SP": " "},
    "e",
)
OPTIONAL_SEPARATORS = grammar(
    [
        ("l", ["LB", "items", "RB"]),
        ("items", []),
        ("items", ["item"]),
        ("items", ["item", "sep", "items"]),
        ("sep", []),
        ("sep", ["COMMA"]),
        ("item", ["X"]),
        ("item", ["l"]),
    ],
    {"LB": r"\[", "RB": r"\]", "COMMA": ",", "X": "x"},
    "l",
)
