"""Tool calls and reasoning: random outputs in every style parse back with `parse_tool_calls` and
validate with `jsonschema`; tool_choice and parallel_tool_calls hold; real tokenizations of
canonical calls are accepted; SmolLM2 writes calls that validate; bad tools name their pointer."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ananke_jax as aj

jsonschema = pytest.importorskip("jsonschema")

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 4}, "unit": {"enum": ["c", "f"]}},
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "add",
            "parameters": {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99}}, "required": ["a"]},
        },
    },
]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
STYLES = ["hermes", "llama3", "mistral", "smollm2"]
NAMED = {"type": "function", "function": {"name": "add"}}

# Bytes and a few multi-byte tokens (one spells a whole trigger); EOS 0; [TOOL_CALLS] special.
TOKENS = (
    [b"<eos>", b"[TOOL_CALLS]", b"\n"]
    + [bytes([c]) for c in range(32, 127)]
    + [b"<tool_call>", b'{"name": ', b'"arguments": ', b"</tool_call>", b"get_weather", b"add"]
)
VOCAB = aj.Vocabulary.from_tokens(TOKENS, eos_token_ids=[0], special_token_ids=[1])


def _sample(constraint, vocab: aj.Vocabulary, *, rows: int, steps: int, seed: int = 0) -> list[tuple[list[int], bool]]:
    """Random-logit outputs of one jitted `lax.scan` per row (vmapped): tokens, and whether EOS ended them."""
    eos = vocab.eos_token_ids[0]
    params = aj.SamplingParams(temperature=1.0)

    def row(key):
        def body(carry, t):
            state, done = carry
            k1, k2 = jax.random.split(jax.random.fold_in(key, t))
            logits = jax.random.normal(k1, (vocab.logits_width,)).at[eos].add(2.0)
            token, new = aj.constrained_step(constraint, state, logits, k2, params)
            new = jax.tree_util.tree_map(lambda a, b: jnp.where(done, a, b), state, new)
            return (new, done | (token == eos)), jnp.where(done, -1, token)

        (_, done), tokens = jax.lax.scan(body, (constraint.init_state(), jnp.bool_(False)), jnp.arange(steps))
        return tokens, done

    tokens, done = jax.jit(jax.vmap(row))(jax.random.split(jax.random.key(seed), rows))
    return [([t for t in r.tolist() if t >= 0 and t != eos], bool(d)) for r, d in zip(np.asarray(tokens), np.asarray(done))]


def _text(vocab: aj.Vocabulary, tokens: list[int]) -> str:
    return vocab.decode(tokens)  # special tokens spell nothing


def _check_calls(calls, *, at_least: int, at_most: int | None, names=None) -> None:
    assert at_least <= len(calls) and (at_most is None or len(calls) <= at_most), calls
    for name, arguments in calls:
        assert names is None or name in names
        jsonschema.validate(arguments, SCHEMAS[name])


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("choice", ["required", "named", "one"])
def test_forced_calls_sampled_at_random_parse_and_validate(style, choice):
    tool_choice, parallel = {"required": ("required", True), "named": (NAMED, True), "one": ("required", False)}[choice]
    constraint = aj.tools_constraint(TOOLS, VOCAB, tool_choice, style=style, parallel_tool_calls=parallel)
    finished = [(tokens, _text(VOCAB, tokens)) for tokens, done in _sample(constraint, VOCAB, rows=12, steps=160) if done]
    assert len(finished) >= 6, "most rows finish within the budget"
    for tokens, text in finished:
        calls = aj.parse_tool_calls(text if style != "mistral" else "[TOOL_CALLS]" + text, TOOLS, style)
        if style == "mistral":
            assert tokens[0] == 1, "the special token opens Mistral's calls"
        one = choice != "required"
        _check_calls(calls, at_least=1, at_most=1 if one else None, names={"add"} if choice == "named" else None)
        assert not text.strip() or text.lstrip("\n").startswith(("<tool_call>", '{"name": ', "[")), text


@pytest.mark.parametrize("style", STYLES)
def test_auto_and_none_allow_text_and_calls_as_the_style_says(style):
    auto = aj.tools_constraint(TOOLS, VOCAB, "auto", style=style)
    none = aj.tools_constraint(TOOLS, VOCAB, "none", style=style)
    calls = [("get_weather", {"city": "Oslo"}), ("add", {"a": 7})]
    reply = _reply(style, calls)
    tokens = [1] + _bytes_tokens(reply) if style == "mistral" else _bytes_tokens(reply)
    assert _walk(auto, tokens) == "accepted"
    assert aj.parse_tool_calls(("[TOOL_CALLS]" if style == "mistral" else "") + reply, TOOLS, style) == calls
    assert _walk(none, tokens) == "refused"
    assert _walk(auto, _bytes_tokens("Just text.")) == _walk(none, _bytes_tokens("Just text.")) == "accepted"
    for tokens, _ in _sample(none, VOCAB, rows=8, steps=40):
        assert aj.parse_tool_calls(_text(VOCAB, tokens), TOOLS, style) == []


def _reply(style: str, calls) -> str:
    """The canonical text of ``calls`` in ``style`` (with text before it where the style allows)."""
    dumped = [(json.dumps(n), json.dumps(a)) for n, a in calls]
    if style == "hermes":
        return "Sure. " + "\n".join(f'<tool_call>\n{{"name": {n}, "arguments": {a}}}\n</tool_call>' for n, a in dumped)
    if style == "llama3":
        return "; ".join(f'{{"name": {n}, "parameters": {a}}}' for n, a in dumped)
    if style == "mistral":
        return "[" + ", ".join(f'{{"name": {n}, "arguments": {a}}}' for n, a in dumped) + "]"
    return "Sure. <tool_call>[\n" + ",\n".join(f'{{"name": {n}, "arguments": {a}}}' for n, a in dumped) + "\n]</tool_call>"


def _bytes_tokens(text: str) -> list[int]:
    return [TOKENS.index(bytes([b])) for b in text.encode()]


def _walk(constraint, tokens) -> str:
    state = constraint.init_state()
    for t in tokens:
        if not bool(aj.is_allowed(aj.token_mask(constraint, state), t)):
            return "refused"
        state = aj.advance(constraint, state, t)
    return "accepted" if bool(aj.accepts(constraint, state)) else "unfinished"


@pytest.mark.parametrize("style", ["hermes", "llama3", "smollm2"])
def test_real_tokenizations_of_calls_are_accepted(style, sentencepiece_vocab, sentencepiece_encode):
    constraint = aj.tools_constraint(TOOLS, sentencepiece_vocab, "auto", style=style)
    calls = [("get_weather", {"city": "Rome", "unit": "c"}), ("add", {"a": 42})]
    assert _walk(constraint, sentencepiece_encode(_reply(style, calls))) == "accepted"
    assert _walk(constraint, sentencepiece_encode(_reply(style, [("get_weather", {"city": "Tokyo"})]))) == "refused"  # maxLength 4


def test_mistral_calls_with_the_tekken_special_token(tekken_vocab, tekken_encode):
    constraint = aj.tools_constraint(TOOLS, tekken_vocab, "auto", style="mistral")
    tool_calls = next(i for i in tekken_vocab.special_token_ids if tekken_vocab.tokens[i] == b"[TOOL_CALLS]")
    body = '[{"name": "add", "arguments": {"a": 5}, "id": "abcDEF123"}]'
    assert _walk(constraint, [tool_calls, *tekken_encode(body)]) == "accepted"
    assert _walk(constraint, tekken_encode(body)) == "accepted"  # without the special token: text
    required = aj.tools_constraint(TOOLS, tekken_vocab, "required", style="mistral")
    assert _walk(required, tekken_encode(body)) == "refused"
    assert aj.parse_tool_calls("[TOOL_CALLS]" + body, TOOLS, "mistral") == [("add", {"a": 5})]


@pytest.mark.parametrize("opened", [False, True])
def test_reasoning_budget_forces_the_end_tag(opened):
    spec = aj.reasoning_structural_tag(aj.tools_structural_tag(TOOLS, NAMED, style="hermes"), max_chars=12, opened=opened)
    constraint = aj.compile_structural_tag(spec, VOCAB)
    call = '<tool_call>\n{"name": "add", "arguments": {"a": 3}}\n</tool_call>'
    head = "" if opened else "<think>"
    assert _walk(constraint, _bytes_tokens(f"{head}{'x' * 12}</think>{call}")) == "accepted"
    assert _walk(constraint, _bytes_tokens(f"{head}{'x' * 13}</think>{call}")) == "refused"
    assert _walk(constraint, _bytes_tokens(f"{head}</think>{call}")) == "accepted"
    assert _walk(constraint, _bytes_tokens(f"<think><think>{'x'}</think>{call}")) == "refused"
    # With the budget spent, only the end tag may follow: every allowed token continues "</think>".
    state = constraint.init_state()
    for t in _bytes_tokens(head + "x" * 12):
        state = aj.advance(constraint, state, t)
    allowed = np.flatnonzero(np.asarray(aj.unpack_mask(aj.token_mask(constraint, state), len(VOCAB))))
    assert [VOCAB.tokens[t] for t in allowed] == [b"<"]
    for tokens, done in _sample(constraint, VOCAB, rows=8, steps=200):
        text = _text(VOCAB, tokens)
        if done:
            thinking, _, rest = text.removeprefix(head).partition("</think>")
            assert len(thinking) <= 12 and "<think>" not in thinking
            _check_calls(aj.parse_tool_calls(rest, TOOLS, "hermes"), at_least=1, at_most=1, names={"add"})


def test_bad_tools_are_refused_with_their_pointer():
    with pytest.raises(aj.GrammarError, match="needs at least one tool") as e:
        aj.tools_constraint([], VOCAB, "required")
    assert e.value.pointer == "#/tools"
    broken = [TOOLS[0], {"type": "function", "function": {"name": "x", "parameters": {"properties": {"n": {"type": "bogus"}}}}}]
    with pytest.raises(aj.SchemaError) as e:
        aj.tools_constraint(broken, VOCAB, "auto")
    assert e.value.pointer == "#/tools/1/function/parameters/properties/n", str(e.value)
    with pytest.raises(aj.GrammarError, match="not among the tools"):
        aj.tools_constraint(TOOLS, VOCAB, {"type": "function", "function": {"name": "nope"}})
    with pytest.raises(aj.GrammarError, match="unknown tool-call style"):
        aj.tools_constraint(TOOLS, VOCAB, style="nope")
    with pytest.raises(aj.GrammarError, match="function name") as e:
        aj.tools_constraint([{"type": "function", "function": {"name": "has space"}}], VOCAB)
    assert e.value.pointer == "#/tools/0/function/name"
    with pytest.raises(aj.GrammarError, match="defined twice"):
        aj.tools_constraint([TOOLS[0], TOOLS[0]], VOCAB)
    with pytest.raises(ValueError, match="known tool"):
        aj.parse_tool_calls('<tool_call>\n{"name": "nope", "arguments": {}}\n</tool_call>', TOOLS, "hermes")


@pytest.mark.slow
@pytest.mark.xla_optimized
def test_smollm2_writes_tool_calls_that_validate(smollm2_gguf):
    from ananke_jax.models import chat_prompt, init_cache, load_smollm2, make_step_fn

    config, params, vocab, tokenizer = load_smollm2()
    tools = [
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}}, "required": ["city"]}}},
        {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {"timezone": {"type": "string", "maxLength": 20}}, "required": ["timezone"]}}},
    ]  # fmt: skip
    system = (
        "You are an expert in composing functions. You have access to the following tools:\n"
        f"<tools>{json.dumps(tools)}</tools>\n"
        'Answer with <tool_call>[\n{"name": "func_name", "arguments": {...}}\n]</tool_call>'
    )
    questions = {
        "What is the weather in Paris?": "get_weather",
        "What time is it in Tokyo?": "get_time",
        "Is it raining in Lima?": "get_weather",
    }
    prompts = [tokenizer.encode(chat_prompt(q, system=system)).ids for q in questions]
    width = max(map(len, prompts))
    prompt = np.array([p + [0] * (width - len(p)) for p in prompts])
    # One call each: left free, this small model repeats its calls until the budget runs out.
    constraint = aj.tools_constraint(tools, vocab, "required", style="smollm2", parallel_tool_calls=False)
    new = 64
    result = aj.generate(
        make_step_fn(config), params, prompt, constraint, cache=init_cache(config, len(prompts), width + new),
        max_new_tokens=new, eos_token_ids=vocab.eos_token_ids, key=jax.random.key(0),
        prompt_lengths=np.array(list(map(len, prompts))), sampling=aj.SamplingParams(temperature=0.0),
    )  # fmt: skip
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    for row, n, reason, expected in zip(np.asarray(result.tokens), np.asarray(result.lengths), result.finish_names(), questions.values()):
        text = vocab.decode(row[:n])
        assert reason in ("eos", "grammar_complete"), text
        [(name, arguments)] = aj.parse_tool_calls(text, tools, "smollm2")
        assert name == expected, text
        jsonschema.validate(arguments, schemas[name])


@pytest.mark.parametrize("opened", [False, True])
def test_reasoning_token_budget_closes_the_block_after_its_tokens(opened, sentencepiece_vocab):
    """Against a brute-force reference on random walks: within the budget the mask is the
    unbudgeted one; once the block has taken its tokens, exactly those that continue its end tag
    (then the call) stay allowed."""
    vocab, budget, begin, end = sentencepiece_vocab, 5, b"<think>", b"</think>"
    spec = aj.tools_structural_tag(TOOLS, NAMED, style="hermes")
    free = aj.compile_structural_tag(aj.reasoning_structural_tag(spec, opened=opened), vocab)
    budgeted = aj.reasoning_constraint(spec, vocab, max_tokens=budget, opened=opened)
    step, mask = jax.jit(lambda c, s, t: c.advance(s, t)), jax.jit(lambda c, s: c.token_mask(s))
    rng, forced, closed = np.random.default_rng(0), 0, 0
    for _ in range(6):
        a, b, text, spent = free.init_state(), budgeted.init_state(), b"" if not opened else begin, 0
        for _ in range(30):
            full = np.asarray(aj.unpack_mask(mask(free, a), len(vocab)))
            got = np.asarray(aj.unpack_mask(mask(budgeted, b), len(vocab)))
            inside = text.startswith(begin) and end not in text
            expected = full
            if inside and spent >= budget:
                depth = max(d for d in range(len(end)) if text.endswith(end[:d]))
                rest = end[depth:]
                expected = full & np.array([bool(t) and (rest.startswith(t) or t.startswith(rest)) for t in vocab.tokens])
                forced += 1
            assert (got == expected).all(), (text, spent)
            allowed = np.flatnonzero(got)
            if not len(allowed) or allowed.tolist() == list(vocab.eos_token_ids):
                break
            token = int(rng.choice([t for t in allowed if t not in vocab.eos_token_ids]))
            spent += inside
            text += vocab.tokens[token]
            a, b = step(free, a, token), step(budgeted, b, token)
        assert not bool(aj.is_error(budgeted, b))
        closed += end in text
    assert forced and closed, "the walks reach the spent budget and close the block"


def test_a_token_budget_runs_in_a_vmapped_scan():
    constraint = aj.reasoning_constraint(aj.tools_structural_tag(TOOLS, NAMED, style="hermes"), VOCAB, max_tokens=6)
    finished = [tokens for tokens, done in _sample(constraint, VOCAB, rows=8, steps=200, seed=3) if done]
    assert len(finished) >= 4
    for tokens in finished:
        text = _text(VOCAB, tokens)
        starts = np.cumsum([0] + [len(VOCAB.tokens[t]) for t in tokens[:-1]])  # byte offset of each token
        opened, closing = len("<think>"), text.index("</think>")
        assert text.startswith("<think>") and ((starts >= opened) & (starts < closing)).sum() <= 6, text
        _check_calls(aj.parse_tool_calls(text[closing:], TOOLS, "hermes"), at_least=1, at_most=1, names={"add"})


def test_token_triggered_tags_and_token_dispatch_with_special_tokens(tekken_vocab, tekken_encode):
    """Special tokens as triggers: free text, then a tag opened by the token itself; the same
    bytes written as text are not a trigger, and an ordinary token cannot be excluded."""
    special = {tekken_vocab.tokens[i]: i for i in tekken_vocab.special_token_ids}
    calls, results = special[b"[TOOL_CALLS]"], special[b"[TOOL_RESULTS]"]
    args = {"type": "json_schema", "json_schema": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}
    triggered = {
        "type": "token_triggered_tags",
        "trigger_tokens": ["[TOOL_CALLS]"],
        "tags": [{"type": "tag", "begin": {"type": "token", "token": calls}, "content": args, "end": "."}],
        "exclude_tokens": [results],
    }
    dispatch = {"type": "token_dispatch", "rules": [["[TOOL_CALLS]", args]], "loop": False}
    for spec, after in [(triggered, "."), (dispatch, "")]:
        constraint = aj.compile_structural_tag(spec, tekken_vocab)
        text = tekken_encode("Sure, here it is ")
        call = tekken_encode('{"a": 1}' + after)
        assert _walk(constraint, text) == "accepted"
        assert _walk(constraint, text + [calls] + call) == "accepted"
        assert _walk(constraint, text + tekken_encode("[TOOL_CALLS]") + call) == "accepted"  # plain text, no tag
        assert _walk(constraint, text + [calls] + tekken_encode("hello")) == "refused"
        assert _walk(constraint, text + [results]) == "refused"
    with pytest.raises(aj.GrammarError) as e:
        aj.compile_structural_tag({**triggered, "exclude_tokens": ["hello"]}, tekken_vocab)
    assert e.value.pointer == "#/exclude_tokens/0"
    with pytest.raises(aj.GrammarError) as e:
        aj.compile_structural_tag({**triggered, "trigger_tokens": ["[TOOL_CALLS]", "[TOOL_RESULTS]"]}, tekken_vocab)
    assert e.value.pointer == "#/trigger_tokens/1"


def test_calls_are_read_back_as_the_constraint_writes_them():
    """Trailing text, a closing tag inside an argument, and text that merely looks like calls."""
    tools = [{"type": "function", "function": {"name": "say", "parameters": {"type": "object", "properties": {"s": {"type": "string"}}}}}]
    llama = '{"name": "say", "parameters": {"s": "hi"}} and then {"name": "say", "parameters": {}} done.'
    hermes = '<tool_call>\n{"name": "say", "arguments": {"s": "a </tool_call> b"}}\n</tool_call> ok'
    for style, text, calls in [
        ("llama3", llama, [("say", {"s": "hi"}), ("say", {})]),
        ("hermes", hermes, [("say", {"s": "a </tool_call> b"})]),
        ("mistral", "[1] is a footnote.", []),
        ("mistral", '[{"name": "say", "arguments": {}}]', [("say", {})]),
        (
            "smollm2",
            'Sure. <tool_call>[\n{"name": "say", "arguments": {"s": "]</tool_call>"}}\n]</tool_call>',
            [("say", {"s": "]</tool_call>"})],
        ),
    ]:
        constraint = aj.tools_constraint(tools, VOCAB, "auto", style=style)
        prefix = [1] if style == "mistral" and calls else []
        assert _walk(constraint, prefix + _bytes_tokens(text)) == "accepted", (style, text)
        assert aj.parse_tool_calls(text, tools, style) == calls, (style, text)


def test_options_and_pointers_through_every_path():
    broken = [TOOLS[0], {"type": "function", "function": {"name": "x", "parameters": {"properties": {"n": {"type": "bogus"}}}}}]
    with pytest.raises(aj.SchemaError) as e:
        aj.tools_constraint(broken, VOCAB, "auto", reasoning={"max_chars": 10})
    assert e.value.pointer == "#/tools/1/function/parameters/properties/n", str(e.value)
    with pytest.raises(aj.GrammarError, match="'whitespace' is not an option"):
        aj.tools_constraint(TOOLS, VOCAB, whitespace="compact")
    lark = aj.compile_structural_tag({"type": "grammar", "grammar": 'start: "a" "b"+'}, VOCAB)  # lark's own start rule
    assert _walk(lark, _bytes_tokens("abb")) == "accepted" and _walk(lark, _bytes_tokens("ba")) == "refused"
    assert set(aj.TOOL_CALL_STYLES) == {"hermes", "qwen", "llama3", "mistral", "smollm2"}
