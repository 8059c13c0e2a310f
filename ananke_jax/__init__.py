"""ananke_jax: grammars compiled to device tables, and a pure, jit-able constrained decode step.

The two engines a grammar compiles to:

- `RegularGrammar` (regexes, choices, non-recursive JSON Schemas): a token DFA; a step is one
  mask-row gather and one transition gather.
- `PushdownGrammar` (GBNF, Lark, recursive JSON Schemas): a bounded-stack LR pushdown automaton.

Both, and the composites of `ananke_jax.fusion`, run through the same pure functions:
`init_state`, `token_mask`, `advance`, `accepts`, `is_error`, `masked_logits`,
`constrained_step`. Reference models live in `ananke_jax.models`.
"""

import warnings as _warnings

from ananke_jax import fusion as fusion
from ananke_jax._src.bank import pad_grammar as pad_grammar
from ananke_jax._src.bank import stack_grammars as stack_grammars
from ananke_jax._src.compile.budget import CompileBudget as CompileBudget
from ananke_jax._src.compile.context_free import compile_grammar as compile_grammar
from ananke_jax._src.compile.regular import compile_choices as compile_choices
from ananke_jax._src.compile.regular import compile_regex as compile_regex
from ananke_jax._src.compile.regular import unconstrained as unconstrained
from ananke_jax._src.drafts import DraftTables as DraftTables
from ananke_jax._src.drafts import draft_tables as draft_tables
from ananke_jax._src.engines.masks import apply_mask as apply_mask
from ananke_jax._src.engines.masks import is_allowed as is_allowed
from ananke_jax._src.engines.masks import unpack_mask as unpack_mask
from ananke_jax._src.engines.pushdown import PushdownGrammar as PushdownGrammar
from ananke_jax._src.engines.pushdown import PushdownState as PushdownState
from ananke_jax._src.engines.regular import RegularGrammar as RegularGrammar
from ananke_jax._src.engines.regular import RegularState as RegularState
from ananke_jax._src.errors import AnankeError as AnankeError
from ananke_jax._src.errors import BudgetError as BudgetError
from ananke_jax._src.errors import FusionError as FusionError
from ananke_jax._src.errors import GrammarError as GrammarError
from ananke_jax._src.errors import SchemaError as SchemaError
from ananke_jax._src.errors import VocabularyError as VocabularyError
from ananke_jax._src.errors import WeightsError as WeightsError
from ananke_jax._src.frontends.api import compile_gbnf as compile_gbnf
from ananke_jax._src.frontends.api import compile_lark as compile_lark
from ananke_jax._src.frontends.gbnf import gbnf_to_ir as gbnf_to_ir
from ananke_jax._src.frontends.lark_frontend import lark_to_ir as lark_to_ir
from ananke_jax._src.fusion.domains import allowed_tokens as allowed_tokens
from ananke_jax._src.generate import ACCELERATIONS as ACCELERATIONS
from ananke_jax._src.generate import FINISH_REASONS as FINISH_REASONS
from ananke_jax._src.generate import GenerationResult as GenerationResult
from ananke_jax._src.generate import generate as generate
from ananke_jax._src.ir import Grammar as Grammar
from ananke_jax._src.ir import Rule as Rule
from ananke_jax._src.ir import TerminalDef as TerminalDef
from ananke_jax._src.ir import TokenRef as TokenRef
from ananke_jax._src.json_schema.api import compile_json_schema as compile_json_schema
from ananke_jax._src.json_schema.api import json_schema_to_gbnf as json_schema_to_gbnf
from ananke_jax._src.json_schema.api import json_schema_to_grammar as json_schema_to_grammar
from ananke_jax._src.json_schema.api import json_schema_to_lark as json_schema_to_lark
from ananke_jax._src.matcher import Matcher as Matcher
from ananke_jax._src.matcher import allocate_token_bitmask as allocate_token_bitmask
from ananke_jax._src.matcher import apply_token_bitmask as apply_token_bitmask
from ananke_jax._src.matcher import fill_bitmasks as fill_bitmasks
from ananke_jax._src.runtime.constraint import accepts as accepts
from ananke_jax._src.runtime.constraint import advance as advance
from ananke_jax._src.runtime.constraint import init_state as init_state
from ananke_jax._src.runtime.constraint import is_error as is_error
from ananke_jax._src.runtime.constraint import masked_logits as masked_logits
from ananke_jax._src.runtime.constraint import token_mask as token_mask
from ananke_jax._src.runtime.sampling import SamplingParams as SamplingParams
from ananke_jax._src.runtime.sampling import sample as sample
from ananke_jax._src.runtime.step import constrained_step as constrained_step
from ananke_jax._src.serialize import load_constraint as load_constraint
from ananke_jax._src.serialize import save_constraint as save_constraint
from ananke_jax._src.structural.api import compile_structural_tag as compile_structural_tag
from ananke_jax._src.structural.api import reasoning_constraint as reasoning_constraint
from ananke_jax._src.structural.api import reasoning_structural_tag as reasoning_structural_tag
from ananke_jax._src.structural.api import tools_constraint as tools_constraint
from ananke_jax._src.structural.tools import STYLE_NAMES as TOOL_CALL_STYLES
from ananke_jax._src.structural.tools import format_tool_calls as format_tool_calls
from ananke_jax._src.structural.tools import parse_tool_calls as parse_tool_calls
from ananke_jax._src.structural.tools import tools_structural_tag as tools_structural_tag
from ananke_jax._src.vocab import Vocabulary as Vocabulary

__version__ = "0.1.0"

__all__ = [
    # vocabularies and compilation
    "Vocabulary",
    "compile_regex",
    "CompileBudget",
    "compile_choices",
    "compile_json_schema",
    "compile_gbnf",
    "compile_lark",
    "compile_grammar",
    "compile_structural_tag",
    "unconstrained",
    # agentic formats
    "tools_constraint",
    "tools_structural_tag",
    "reasoning_structural_tag",
    "reasoning_constraint",
    "parse_tool_calls",
    "format_tool_calls",
    "TOOL_CALL_STYLES",
    "draft_tables",
    # the engines' tables and states
    "RegularGrammar",
    "RegularState",
    "PushdownGrammar",
    "PushdownState",
    "DraftTables",
    # the pure run-time functions
    "init_state",
    "token_mask",
    "advance",
    "accepts",
    "is_error",
    "masked_logits",
    "constrained_step",
    "SamplingParams",
    "sample",
    "apply_mask",
    "is_allowed",
    "unpack_mask",
    "allowed_tokens",
    # batches of grammars
    "pad_grammar",
    "stack_grammars",
    # generation
    "generate",
    "GenerationResult",
    "ACCELERATIONS",
    "FINISH_REASONS",
    # host-driven serving loops
    "Matcher",
    "allocate_token_bitmask",
    "apply_token_bitmask",
    "fill_bitmasks",
    # grammar IR and front ends, for inspection
    "Grammar",
    "Rule",
    "TerminalDef",
    "TokenRef",
    "gbnf_to_ir",
    "lark_to_ir",
    "json_schema_to_grammar",
    "json_schema_to_gbnf",
    "json_schema_to_lark",
    # files
    "save_constraint",
    "load_constraint",
    # errors
    "AnankeError",
    "GrammarError",
    "BudgetError",
    "SchemaError",
    "VocabularyError",
    "FusionError",
    "WeightsError",
    # submodules
    "fusion",
]

# Names that did not say which engine they belong to; kept so old code runs, with a warning.
_DEPRECATED_ALIASES = {
    "CompiledGrammar": "RegularGrammar",
    "GrammarState": "RegularState",
    "CompiledCFG": "PushdownGrammar",
    "CFGState": "PushdownState",
}


def __getattr__(name: str):
    if name in _DEPRECATED_ALIASES:
        new = _DEPRECATED_ALIASES[name]
        _warnings.warn(f"ananke_jax.{name} is deprecated; use ananke_jax.{new}", DeprecationWarning, stacklevel=2)
        return globals()[new]
    raise AttributeError(f"module 'ananke_jax' has no attribute {name!r}")
