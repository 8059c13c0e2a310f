"""JSON Schema entry points: compile against a vocabulary, or print the grammar."""

from __future__ import annotations

import decimal
import functools
import json
import math
import warnings
from collections.abc import Callable, Collection

from ananke_jax._src.compile import regex_ast as rx
from ananke_jax._src.compile.automaton import DEAD, ByteDFA, pausing_gc
from ananke_jax._src.compile.budget import CompileBudget, PastCap, budget_now, charge_states, dfas_capped, metered, within_states
from ananke_jax._src.compile.context_free import DEFAULT_MAX_CONFIGS, compile_grammar
from ananke_jax._src.compile.regular import compile_dfa
from ananke_jax._src.compile.unit_loops import UnitLoops, expand_unit_loops
from ananke_jax._src.engines.pushdown import PushdownGrammar
from ananke_jax._src.engines.regular import RegularGrammar
from ananke_jax._src.errors import BudgetError, ConflictError, GrammarError, SchemaError
from ananke_jax._src.grammar_text import to_gbnf, to_lark
from ananke_jax._src.ir import Grammar
from ananke_jax._src.json_schema import strings
from ananke_jax._src.json_schema.assemble import MAX_TERMINAL_STATES, inline, recursive_rules, to_grammar
from ananke_jax._src.json_schema.compiler import SchemaCompiler
from ananke_jax._src.json_schema.gaps import MAX_WHITESPACE_RUN, expand_gaps
from ananke_jax._src.json_schema.keywords import implied_type
from ananke_jax._src.json_schema.layout import is_count
from ananke_jax._src.json_schema.rules import Rules
from ananke_jax._src.vocab import Vocabulary

DEFAULT_MAX_DEPTH = 32
DEFAULT_MAX_DIGITS = 20  # digits of int64 and of a double's shortest round trip, with room


@pausing_gc
def json_schema_rules(
    schema,
    *,
    whitespace="flexible",
    strict: bool = True,
    allow_additional: bool = False,
    any_order: bool = False,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_whitespace: int = MAX_WHITESPACE_RUN,
    max_digits: int | None = DEFAULT_MAX_DIGITS,
    max_string_length: int | None = None,
    placeholder_gaps: bool = False,
) -> Rules:
    """Translate ``schema`` (a dict, bool or JSON text) into rules; options as `compile_json_schema`
    (``placeholder_gaps``: flexible whitespace as `gaps.GAP`)."""
    if isinstance(schema, (str, bytes)):
        try:
            schema = json.loads(schema, parse_float=decimal.Decimal)
        except json.JSONDecodeError as e:
            raise SchemaError(f"invalid JSON: {e.msg} at line {e.lineno}, column {e.colno}") from None
    if not (is_count(max_depth) and max_depth >= 1):
        raise SchemaError(f"max_depth must be a positive integer, got {max_depth!r}")
    if max_digits is not None and not (is_count(max_digits) and max_digits >= 1):
        raise SchemaError(f"max_digits must be a positive integer or None, got {max_digits!r}")
    if max_string_length is not None and not is_count(max_string_length):
        raise SchemaError(f"max_string_length must be a non-negative integer or None, got {max_string_length!r}")
    if not isinstance(any_order, bool):
        raise SchemaError(f"any_order must be True or False, got {any_order!r}")
    if not strict and isinstance(schema, dict) and (implied := implied_type(schema)) is not None:
        warnings.warn(
            f"the root schema has no 'type' and only {implied} keywords: it is compiled as type {implied!r}, "
            "as XGrammar does (strict=True: values of every type, as JSON Schema says)",
            stacklevel=3,
        )
        schema = {**schema, "type": implied}
    compiler = SchemaCompiler(
        schema,
        whitespace=whitespace,
        strict=strict,
        allow_additional=allow_additional,
        any_order=any_order,
        max_depth=max_depth,
        max_whitespace=max_whitespace,
        max_digits=max_digits,
        max_string_length=max_string_length,
        placeholder_gaps=placeholder_gaps,
    )
    if strict:
        compiler.screen(schema)
    start = compiler.rule("#", 0)
    rules = Rules(start.name, compiler.bodies)
    if rules.bodies[rules.start] == rx.NOTHING:
        raise SchemaError("the schema accepts no JSON value")
    return rules


def json_schema_to_grammar(schema, *, printable: bool = False, **options) -> Grammar:
    """The grammar IR of ``schema``: recursive rules as nonterminals, the rest as terminals
    (each with its DFA; with regex text for every terminal only when ``printable``)."""
    rules = json_schema_rules(schema, **options)
    return to_grammar(rules, recursive_rules(rules), printable=printable)


def json_schema_to_lark(schema, **options) -> str:
    """Lark grammar text of ``schema`` (start rule ``root``), for inspection and debugging."""
    return to_lark(json_schema_to_grammar(schema, printable=True, **options))


def json_schema_to_gbnf(schema, **options) -> str:
    """GBNF grammar text of ``schema`` (root rule ``root``), for inspection and debugging."""
    return to_gbnf(json_schema_to_grammar(schema, printable=True, **options))


def compile_json_schema(
    schema,
    vocab: Vocabulary,
    *,
    whitespace: str | int = "flexible",
    strict: bool = True,
    allow_additional: bool = False,
    any_order: bool = False,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_whitespace: int = MAX_WHITESPACE_RUN,
    max_digits: int | None = DEFAULT_MAX_DIGITS,
    max_string_length: int | None = None,
    max_configs: int = DEFAULT_MAX_CONFIGS,
    engine: str = "auto",
    budget: CompileBudget | None = None,
) -> RegularGrammar | PushdownGrammar:
    """Compile a JSON Schema (draft 2020-12) into a constraint for ``vocab``.

    Args:
      schema: the schema, as a dict, a bool, or JSON text.
      vocab: the vocabulary.
      whitespace: ``"flexible"`` (any JSON whitespace inside containers, runs of at most
        ``max_whitespace``), ``"compact"`` (none), or an indent width ``n`` (exactly
        ``json.dumps(value, indent=n)``'s layout).
      strict: raise `SchemaError` on keywords that cannot be compiled; False ignores them with a
        warning (the relaxation is named in the message), and compiles a root schema without
        ``type`` that uses the keywords of one type only (``properties``, say) as that type, as
        XGrammar does (JSON Schema allows values of every type there); a string's ``minLength``
        and ``maxLength`` whose automaton is over the budget's ``max_states``, or that take more
        than 1,024 states with a ``pattern`` or ``format`` (their product), are
        dropped with a warning, the string then bounded by ``max_string_length`` alone (XGrammar
        drops them next to any ``pattern``); a pattern's ``\\A`` and ``\\Z`` (Python's, not
        ECMA-262's) are read as ``^`` and ``$`` with a warning. Either way, a ``oneOf`` whose branches
        overlap where their difference cannot be compiled exactly (see docs/guide.md, JSON Schema) is compiled as
        ``anyOf`` for those JSON types, with a warning.
      allow_additional: objects that describe their keys (``properties``, ``patternProperties``
        or ``required``) but not ``additionalProperties``, and arrays with ``prefixItems`` but no
        ``items``, allow further members as the specification says (any value). The default,
        False, allows only what the schema describes, like XGrammar's strict mode.
      any_order: every object's properties may come in any order, each at most once (the
        required ones exactly once), other allowed members among them. The constraint tracks
        which were written, so its size doubles with each property: `SchemaError` beyond
        `objects.MAX_ANY_ORDER_PROPERTIES` in one object (costs in docs/guide.md).
      max_depth: nesting bound where it matters: the pushdown stack of a recursive schema gets
        room for about this many levels; with an indent layout, deeper recursion is not written.
      max_whitespace: the longest run of flexible whitespace (0: none).
      max_digits: the most digits in the integer part, the fraction and the exponent of a
        number each, so that a model cannot write digits until ``max_tokens`` (None: no bound).
        Where a bound of the schema has more digits, one more than it has.
      max_string_length: the most code points of a string whose schema leaves its length
        unbounded (no ``maxLength``, and an infinite ``pattern`` or ``format`` if any), object
        keys not named by the schema included (None: no bound).
      max_configs: parse configurations kept by the pushdown engine (recursive schemas).
      engine: ``"auto"`` (a token DFA unless the schema recurses, its NFA would be over the
        budget's ``max_states`` or its token DFA too large for ``max_table_bytes``) or ``"pushdown"`` (always the pushdown engine, e.g. to share a
        grammar bank with recursive schemas).
      budget: the compile's `CompileBudget` (None: the defaults). A schema over it gets a
        `SchemaError` naming the limit and, where it was met inside a subschema, its pointer.

    Returns:
      A `RegularGrammar` (one token DFA) when the schema has no recursion, a small enough
      automaton and ``engine`` is ``"auto"``, else a `PushdownGrammar` (the pushdown engine);
      ``repr`` says which.

    Raises:
      SchemaError: malformed or unsatisfiable schemas and unsupported keywords (with the
        keyword and its JSON pointer), or an unknown ``engine``.
    """
    if engine not in ("auto", "pushdown"):
        raise SchemaError(f"engine must be 'auto' or 'pushdown', got {engine!r}")
    placeholders = whitespace == "flexible"
    with metered(budget):
        rules = json_schema_rules(
            schema,
            whitespace=whitespace,
            strict=strict,
            allow_additional=allow_additional,
            any_order=any_order,
            max_depth=max_depth,
            max_whitespace=max_whitespace,
            max_digits=max_digits,
            max_string_length=max_string_length,
            placeholder_gaps=placeholders,
        )
        options = dict(stack_depth=4 * max_depth, max_configs=max_configs, engine=engine, max_whitespace=max_whitespace)
        try:
            return compile_rules(rules, vocab, gaps=placeholders, **options)
        except GrammarError as e:
            raise SchemaError(f"the schema cannot be compiled: {e}") from None


def compile_rules(
    rules: Rules,
    vocab: Vocabulary,
    *,
    gaps: bool,
    stack_depth: int,
    max_configs: int,
    engine: str = "auto",
    max_whitespace: int = MAX_WHITESPACE_RUN,
    max_terminal: int = MAX_TERMINAL_STATES,
) -> RegularGrammar | PushdownGrammar:
    """Compile rules over regex trees (JSON Schemas, structural tags) for ``vocab``: one token
    DFA when no rule recurses, the language's NFA is estimated within the compile budget's
    ``max_states``, its token DFA fits `_capped`'s cap (or the pieces fail), ``engine`` is
    ``"auto"`` and the estimate is at most `PIECES_FIRST_STATES` (or the pieces fail), else
    the pushdown engine, recursive rules as nonterminals and every piece without references
    one terminal (a large one that several runs hold, one of its own; where one is over
    ``max_states``, such pieces are split as below, into terminals of about 16 x
    ``max_terminal`` NFA states).

    ``gaps``: the trees hold placeholder gaps (`gaps.GAP`), made runs of at most
    ``max_whitespace`` whitespace bytes. A language without recursion taken to the pushdown
    engine for its size has its pieces split into terminals of about ``max_terminal`` NFA states
    (`assemble.to_grammar`); where that is over the budget too, the error names both limits met.

    Raises:
      SchemaError: the language is empty. BudgetError: over the budget (both ways, where one token
        DFA was over it, naming both limits). GrammarError: the pushdown engine refuses the rules.
    """
    recursive = recursive_rules(rules)
    options = dict(stack_depth=stack_depth, max_configs=max_configs)
    gap_run = max_whitespace if gaps else None
    if recursive or engine != "auto":
        try:
            return compile_grammar(to_grammar(rules, recursive, compiling=True, gap_run=gap_run), vocab, **options)
        except BudgetError as e:
            if e.budget != "max_states":
                raise
            whole = e  # a piece too large for one terminal (a long array of objects, say)
        try:  # split only such pieces: small terminals are many lexer states to walk (2,000: 3x slower here)
            return compile_in_pieces(rules, vocab, 16 * max_terminal, keep=recursive, gap_run=gap_run, **options)
        except BudgetError as pieces:
            raise BudgetError(f"{whole}; in smaller terminals, {pieces}", budget=pieces.budget) from None
    # One token DFA unless it would be over the budget; then the pushdown engine, in pieces (and
    # those first where the estimate is large).
    root = inline(rules, set())[rules.start]
    regular = functools.partial(_compile_regular, root, vocab, gaps=gaps, max_whitespace=max_whitespace)
    in_pieces = functools.partial(compile_in_pieces, rules, vocab, max_terminal, gap_run=gap_run, **options)
    size = rx.nfa_size(root)
    if size > PIECES_FIRST_STATES and within_states(size):
        return _pieces_first(in_pieces, functools.partial(_capped, vocab, regular), regular)
    try:
        charge_states(size, "a regex's NFA")
        return _capped(vocab, regular)
    except BudgetError as e:
        if e.budget == "max_seconds":
            raise
        whole = e
        if not within_states(size) and not within_states(rx.nfa_size(root, repeated=False)):  # nor could its pieces
            raise
    try:
        return in_pieces()
    except BudgetError as pieces:  # both ways are over the budget: name the limit each met
        raise BudgetError(f"{whole}; in pieces for the pushdown engine, {pieces}", budget=pieces.budget) from None
    except GrammarError as pieces:  # not for their size (LR conflicts, an ambiguous lexer)
        if not isinstance(whole, PastCap):
            raise
        try:  # the cap was only a guess: one token DFA under the budget itself
            return regular()
        except BudgetError as again:
            raise BudgetError(f"{again}; in pieces for the pushdown engine, {pieces}", budget=again.budget) from None


PIECES_FIRST_STATES = 20_000  # the NFA estimate above which a language goes to the pushdown engine in pieces first


def _pieces_first(
    in_pieces: Callable[[], PushdownGrammar], capped: Callable[[], RegularGrammar], regular: Callable[[], RegularGrammar]
) -> RegularGrammar | PushdownGrammar:
    """The pushdown engine in pieces, else one token DFA (capped where the pieces were over the
    budget; where they failed for another reason, under the budget alone). Over
    `PIECES_FIRST_STATES`, a schema's token DFA was mostly refused after seconds of work, or no
    faster than the pieces: of the 10 real-world schemas of `bench/schema_corpus.py` from 20k to
    200k NFA states, 7 token DFAs were refused (0.7-2.8 s lost each), and of the other 3 the
    pieces were faster for 2 (0.8 -> 0.4 s, 2.2 -> 2.1 s) and slower for one (0.4 -> 0.5 s).
    Below 20k, one token DFA was the faster for 11 of 16 from 5k up."""
    try:
        return in_pieces()
    except BudgetError as e:
        if e.budget == "max_seconds":
            raise
        pieces, whole = e, capped
    except GrammarError as e:  # not for their size (LR conflicts, an ambiguous lexer)
        pieces, whole = e, regular
    try:
        return whole()
    except BudgetError as e:
        raise BudgetError(f"{e}; in pieces for the pushdown engine, {pieces}", budget=e.budget) from None


TOKEN_COLUMNS = 768  # the token columns assumed of a schema's token DFA on 131k tokens (about the median)


def _capped(vocab: Vocabulary, regular: Callable[[], RegularGrammar]) -> RegularGrammar:
    """``regular()`` with its deterministic automata capped at the states whose token tables would
    fit ``max_table_bytes`` at `TOKEN_COLUMNS` columns a state on a vocabulary of 131,072 tokens,
    in proportion on others (87,381 states by default on 131k tokens). A schema's token DFA has
    hundreds to thousands of columns on a large vocabulary (real-world schemas over the 131k
    one: 107 to 1,659), so a larger one would mostly be refused for its tables, after seconds
    of work that the pushdown engine's pieces do not need.

    Raises:
      PastCap: past the cap (naming ``max_table_bytes``). BudgetError: the budget.
    """
    limit = budget_now().max_table_bytes
    columns = max(1, TOKEN_COLUMNS * vocab.logits_width // 131_072)
    cap = max(1, limit // (4 * columns))
    with dfas_capped(cap, f"{cap:,}, the most whose token tables fit max_table_bytes={limit:,} at {columns} columns a state"):
        return regular()


def compile_in_pieces(
    rules: Rules, vocab: Vocabulary, max_terminal: int, *, keep: Collection[str] = (), gap_run: int | None = None, **options
) -> PushdownGrammar:
    """The pushdown engine over ``rules``, the ``keep`` rules (the recursive ones) nonterminals and
    the other pieces split into terminals of about ``max_terminal`` NFA states, whose estimates
    together must fit the budget. Pieces split finely can make LR conflicts that larger terminals
    avoid (runs of optional whitespace, say): coarser ones are tried, then whole ones (which fork
    where they conflict, as the parse forks throughout where rules are kept)."""
    for limit in (max_terminal, 16 * max_terminal, math.inf):
        try:
            return compile_grammar(
                to_grammar(rules, set(keep), max_terminal=limit, charge_total=True, compiling=True, gap_run=gap_run),
                vocab,
                forks=bool(keep) or limit == math.inf,  # recursive rules fork where they conflict whole, too
                **options,
            )
        except ConflictError:
            if limit == math.inf:
                raise


def _compile_regular(node: rx.Node, vocab: Vocabulary, *, gaps: bool, max_whitespace: int) -> RegularGrammar:
    dfa, loops = regular_automaton(node, gaps=gaps, max_whitespace=max_whitespace)
    return compile_dfa(dfa, vocab, loops=loops)


def regular_automaton(node: rx.Node, *, gaps: bool, max_whitespace: int = MAX_WHITESPACE_RUN) -> tuple[ByteDFA, UnitLoops | None]:
    """The byte DFA of a regular language ``node`` (a schema's, a structural tag's), its strings'
    characters first as placeholders (`strings.UNIT`, expanded by `expand_unit_loops`, which
    says where they loop) unless a string alternates them with literal characters, and its gaps
    expanded when they are placeholders; `compile_dfa` takes both."""

    def automaton(tree: rx.Node) -> ByteDFA:
        dfa = rx.to_dfa(tree)
        if dfa.start == DEAD:
            raise SchemaError("the schema accepts no JSON value")
        return expand_gaps(dfa, max_whitespace) if gaps else dfa

    expanded = expand_unit_loops(automaton(strings.with_placeholder_units(node)), strings.string_units())
    return (automaton(node), None) if expanded is None else expanded
