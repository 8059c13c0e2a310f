"""Front ends: grammar languages (GBNF, Lark) to the grammar IR."""

from ananke_jax._src.frontends.gbnf import gbnf_to_ir as gbnf_to_ir
from ananke_jax._src.frontends.lark_frontend import lark_to_ir as lark_to_ir
