"""The one way a name becomes a file name: study names, run ids, analysis names, plugin files, figure titles.

Names arrive from places resbench does not control: a study file's ``name``, a row of a results folder someone
sent, a plugin's variant names (which end up in run ids), a ``--study`` or ``--name`` on the command line. Every
path built from one goes through :func:`file_name` (the name must already be safe: a name that is an identity, such
as a run id or a study's name, is refused rather than changed, so two names never share a file) or :func:`slug`
(a label turned into a safe name, for figure and page files whose names only need to be distinct and readable).

A safe name is one path component on every platform: letters, digits, ``.``, ``_``, ``-`` and ``+`` only (so no ``/``,
``\\``, NUL or drive letter), not empty, not starting with ``.`` (``..``, hidden files) or ``-`` (an option on a
command line), not ending with ``.``, at most :data:`MAX_LENGTH` characters, and not a device name Windows
reserves (``CON``, ``NUL``, ``COM1`` ... with or without an extension).

This module imports nothing but the standard library.
"""

from __future__ import annotations

import hashlib
import re

MAX_LENGTH = 200  # leaves room under the usual 255-byte limit for a prefix and suffix (REPORT-, .json.<tmp>.tmp)
_SAFE = re.compile(r"[A-Za-z0-9._+-]+")
_UNSAFE_RUN = re.compile(r"[^A-Za-z0-9._+-]+")
# Device names Windows reserves in every folder, with any extension (nul.txt is NUL).
RESERVED = frozenset({"CON", "PRN", "AUX", "NUL", *(f"{port}{i}" for port in ("COM", "LPT") for i in range(1, 10))})
# What sweeps keep beside a study file in a results folder's studies/: the content hashes of its plugins
# (bench.analysis.studyfile.manifest_path) and, for a study run --until-decided, its looks
# (bench.analysis.sequential.looks_file). Any other file there that is not a study file is a plugin's.
PLUGIN_HASHES_SUFFIX = ".plugins.json"
LOOKS_SUFFIX = ".looks.json"
RULE = (f"a file name holds only letters, digits, '.', '_', '-' and '+' (at most {MAX_LENGTH}), does not start "
        "with '.' or '-' nor end with '.', and is not a device name Windows reserves (CON, PRN, AUX, NUL, COM1-9, "
        "LPT1-9)")


def versioned(stem: str, data: bytes, suffix: str) -> str:
    """``<stem>-<sha12><suffix>``: the file name of one version of a file kept beside others (an earlier study file in
    ``studies/previous/``, a failed rerun's run JSON in ``runs/failed/``), by the sha256 of its bytes, so that two
    versions never share a name."""
    return f"{stem}-{hashlib.sha256(data).hexdigest()[:12]}{suffix}"


def problem(name: object) -> str | None:
    """Why ``name`` is not a safe file name, in words; None when it is one."""
    if not isinstance(name, str):
        return f"is a {type(name).__name__}, not text"
    if not name:
        return "is empty"
    if "\x00" in name:
        return "holds a NUL character"
    if "/" in name or "\\" in name:
        return "holds a path separator"
    if not _SAFE.fullmatch(name):
        bad = sorted(set(_UNSAFE_RUN.findall(name)[0]))
        return f"holds {''.join(bad)!r}"
    if name[0] in ".-":
        return f"starts with {name[0]!r}"
    if name.endswith("."):
        return "ends with '.'"
    if len(name) > MAX_LENGTH:
        return f"is {len(name)} characters long"
    if name.split(".")[0].upper() in RESERVED:
        return "is a device name Windows reserves"
    return None


def file_name(name: object, what: str) -> str:
    """``name`` itself when it is a safe file name (module docstring); ValueError naming ``what``, why, and the rule
    otherwise."""
    why = problem(name)
    if why is not None:
        raise ValueError(f"{what} {name!r} cannot be a file name: it {why}; {RULE}")
    assert isinstance(name, str)
    return name


def slug(text: str) -> str:
    """A safe file name made from the label ``text``: every run of other characters becomes ``_``, a leading ``.``
    or ``-``, a trailing ``.`` and a reserved device name get a ``_``, and an overlong one is cut and given a hash of
    the whole, so distinct long labels stay distinct."""
    out = _UNSAFE_RUN.sub("_", text) or "_"
    if out[0] in ".-":
        out = "_" + out[1:]
    if out.endswith("."):
        out = out[:-1] + "_"
    if out.split(".")[0].upper() in RESERVED:
        out = "_" + out
    if len(out) > MAX_LENGTH:
        out = f"{out[:MAX_LENGTH - 9]}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"
    return file_name(out, "slug")
