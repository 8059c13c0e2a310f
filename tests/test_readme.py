"""The README's quick-start snippets run as they are, and their outputs are checked."""

import json
import pathlib
import re
import subprocess

import pytest

from servers import serve

README = pathlib.Path(__file__).parents[1] / "README.md"
SNIPPETS = re.findall(r"^```python\n(.*?)^```", README.read_text(encoding="utf-8"), re.MULTILINE | re.DOTALL)
[SERVER] = re.findall(
    r"^```bash\n(pip install \".\[serve\]\" && ananke-jax serve.*?)^```", README.read_text(encoding="utf-8"), re.MULTILINE | re.DOTALL
)


@pytest.fixture(scope="module", autouse=True)
def _smollm2(smollm2_gguf):
    """The snippets read SmolLM2's tokenizer (and one runs the model)."""


def _run(snippet: str) -> dict:
    namespace: dict = {}
    exec(compile(snippet, str(README), "exec"), namespace)
    return namespace


def test_the_readme_has_the_quick_starts():
    assert len(SNIPPETS) == 5 and SERVER.startswith('pip install ".[serve]" && ananke-jax serve &')


def test_the_jitted_loop_writes_a_prefix_of_the_schema():
    ns = _run(SNIPPETS[0])
    aj, cg, state, tokens = ns["aj"], ns["cg"], ns["state"], ns["tokens"]
    assert not aj.is_error(cg, state) and ns["vocab"].decode(tokens).startswith("{")


@pytest.mark.slow
@pytest.mark.xla_optimized
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


def test_the_tool_call_reply_is_accepted_and_parsed_back():
    ns = _run(SNIPPETS[3])
    matcher, aj = ns["matcher"], ns["aj"]
    assert matcher.is_completed()
    assert aj.parse_tool_calls(ns["reply"], ns["tools"], "hermes") == [("get_weather", {"city": "Oslo"})]
    refused = aj.Matcher(ns["tc"], ns["vocab"])
    assert not refused.accept_string(ns["reply"].replace('"Oslo"', "42"))  # the schema wants a string


@pytest.fixture(scope="module")
def server():
    """``ananke-jax serve`` as the README starts it, with fewer and shorter slots and one prefill bucket, to warm up sooner."""
    with serve("--slots", "2", "--max-len", "128", "--prefill-buckets", "128") as (_, url):
        yield url.removeprefix("http://")


@pytest.mark.slow
def test_the_curl_command_gets_one_of_the_choices(server):
    curl = SERVER.split("\n", 1)[1].replace("127.0.0.1:8000", server)
    reply = json.loads(subprocess.run(["bash", "-c", curl], capture_output=True, text=True, check=True, timeout=300).stdout)
    assert reply["choices"][0]["message"]["content"] in ("red", "green", "blue"), reply


@pytest.mark.slow
def test_the_openai_client_parses_a_city(server):
    greedy = SNIPPETS[4].replace("response_format=City,", "response_format=City, temperature=0,")  # sampled, a name may be ""
    ns = _run(greedy.replace("127.0.0.1:8000", server))
    city = ns["reply"].choices[0].message.parsed
    assert isinstance(city, ns["City"]) and city.name and city.country
