"""The README's quick-start snippets run as they are, and their outputs are checked."""

import json
import pathlib
import re

import pytest

README = pathlib.Path(__file__).parents[1] / "README.md"
SNIPPETS = re.findall(r"^```python\n(.*?)^```", README.read_text(encoding="utf-8"), re.MULTILINE | re.DOTALL)


@pytest.fixture(scope="module", autouse=True)
def _smollm2(smollm2_gguf):
    """The snippets read SmolLM2's tokenizer (and one runs the model)."""


def _run(snippet: str) -> dict:
    namespace: dict = {}
    exec(compile(snippet, str(README), "exec"), namespace)
    return namespace


def test_the_readme_has_the_quick_starts():
    assert len(SNIPPETS) == 5


def test_the_jitted_loop_writes_a_prefix_of_the_schema():
    ns = _run(SNIPPETS[0])
    aj, cg, state, tokens = ns["aj"], ns["cg"], ns["state"], ns["tokens"]
    assert not aj.is_error(cg, state) and ns["vocab"].decode(tokens).startswith("{")


@pytest.mark.slow
def test_generate_writes_a_valid_record():
    import jsonschema

    ns = _run(SNIPPETS[1])
    result, vocab = ns["result"], ns["vocab"]
    text = vocab.decode(result.tokens[0, : result.lengths[0]])
    assert result.finish_names()[0] in ("eos", "grammar_complete")
    jsonschema.validate(json.loads(text), ns["schema"])


def test_the_matcher_loop_ends_on_a_full_match():
    ns = _run(SNIPPETS[2])
    matcher, _vocab = ns["matcher"], ns["vocab"]
    assert matcher.is_terminated() and matcher.is_completed()


@pytest.mark.slow
def test_the_engine_serves_every_request_validly_without_compiling():
    import jsonschema

    ns = _run(SNIPPETS[3])
    replies, asked, vocab = ns["replies"], ns["asked"], ns["vocab"]
    assert ns["engine"].compilations == 0
    text = {asked[rid]: vocab.decode(tokens) for rid, tokens in replies.items()}
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", text["Give me a date."])
    assert text["Pick a colour."] in ("red", "green", "blue")
    jsonschema.validate(json.loads(text["Name a city, as JSON."]), ns["city"])


def test_the_tool_call_reply_is_accepted_and_parsed_back():
    ns = _run(SNIPPETS[4])
    matcher, aj = ns["matcher"], ns["aj"]
    assert matcher.is_completed()
    assert aj.parse_tool_calls(ns["reply"], ns["tools"], "hermes") == [("get_weather", {"city": "Oslo"})]
    refused = aj.Matcher(ns["tc"], ns["vocab"])
    assert not refused.accept_string(ns["reply"].replace('"Oslo"', "42"))  # the schema wants a string
