"""``python -m ananke_jax``: the command line (see `ananke_jax._src.cli`)."""

import sys

from ananke_jax._src.cli import main

if __name__ == "__main__":
    sys.exit(main())
