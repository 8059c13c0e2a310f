"""Generated tokens to the reply's parts: text decoded incrementally, cut at stop strings, and
split into the reasoning block, the content and the tool-call text.

While a reply streams, `Reply.split` keeps back what may still change meaning: the start of a
stop string, of the reasoning block's end tag, or of the tool-call marker. So every part only
grows, and a stream's deltas add up to the final message.
"""

from __future__ import annotations

import codecs
from typing import NamedTuple

from ananke_jax._src.server.specs import THINK


class Detokenizer:
    """Token ids to text, a multi-byte character split across tokens waiting for its last byte."""

    def __init__(self, vocab):
        self.vocab, self.text = vocab, ""
        self._eos = set(vocab.eos_token_ids)
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def add(self, tokens: list[int], final: bool = False) -> str:
        self.text += self._decoder.decode(b"".join(self.vocab.token_bytes(t) for t in tokens if t not in self._eos), final=final)
        return self.text


class Parts(NamedTuple):
    reasoning: str | None  # None: the request has no reasoning block
    content: str
    calls: str  # the text from the tool-call marker on ("" when none)
    stopped: bool  # a stop string ended the reply


def _partial(text: str, marker: str) -> int:
    """The length of the longest proper prefix of ``marker`` that ``text`` ends with."""
    return next((n for n in range(min(len(marker) - 1, len(text)), 0, -1) if text.endswith(marker[:n])), 0)


class Reply:
    """How one request's text splits (`split`).

    Args:
      stops: stop strings (the reply ends before the first one met).
      reasoning: whether the reply opens with a ``<think>`` block.
      marker: where tool calls begin in the text (None: no tools).
    """

    def __init__(self, stops: list[str], reasoning: bool, marker: str | None):
        self.stops, self.reasoning, self.marker = [s for s in stops if s], reasoning, marker

    def split(self, text: str, final: bool) -> Parts:
        """The parts of ``text``; unless ``final``, only what no later token can change."""
        found = [i for i in (text.find(s) for s in self.stops) if i >= 0]
        if found:
            text, final = text[: min(found)], True
        elif not final:
            text = text[: len(text) - max((_partial(text, s) for s in self.stops), default=0)]
        reasoning, rest = None, text
        if self.reasoning:
            begin, end = THINK
            if not text.startswith(begin):
                return Parts("", text if final else "", "", bool(found))
            close = text.find(end, len(begin))
            if close < 0:
                reasoning, rest = text[len(begin) : len(text) - (0 if final else _partial(text, end))], ""
            else:
                reasoning, rest = text[len(begin) : close], text[close + len(end) :]
        calls = ""
        if self.marker:
            at = rest.find(self.marker)
            if at >= 0:
                rest, calls = rest[:at], rest[at:]
            elif not final:
                rest = rest[: len(rest) - _partial(rest, self.marker)]
        return Parts(reasoning, rest, calls, bool(found))
