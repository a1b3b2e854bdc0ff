"""tox's inline plugin for this project: an environment whose Python is missing fails, and says how to get it.

tox reports a missing interpreter as "could not find python interpreter matching any of the specs py313" and,
with ``skip_missing_interpreters = false`` (tox.ini), fails: a test command never passes without testing. This
adds the line a contributor needs, before tox's own, for each environment asked for whose Python is not on PATH.
"""

from __future__ import annotations

import re
import shutil
import sys
from typing import Any

from tox.plugin import impl


def _executable(spec: str) -> str:
    """``python3.13`` for the specs ``py313``, ``python3.13`` or ``3.13``; a path or any other name as it is."""
    found = re.fullmatch(r"(?:py|python)?(3)\.?(\d+)", spec)
    return f"python{found.group(1)}.{found.group(2)}" if found else spec


@impl
def tox_add_env_config(env_conf: Any, state: Any) -> None:
    asked = str(getattr(state.conf.options, "env", "") or "").split(",")
    if env_conf.env_name not in asked:
        return
    specs = [str(s) for s in env_conf["base_python"]]
    if specs and not any(shutil.which(_executable(s)) for s in specs):
        wanted = _executable(specs[0])
        print(f"{env_conf.env_name}: needs {wanted}, which is not on PATH; install it (pyenv install "
              f"{wanted.removeprefix('python')}, then put its bin/ on PATH; or your system's {wanted} package), or "
              f"run `tox -e py`, the suite on the Python you have", file=sys.stderr, flush=True)
