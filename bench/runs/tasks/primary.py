"""Each task's primary metric: moved to :mod:`bench.runs.primary` (outside this package, whose import loads torch,
so the commands that only read results never load it); its names are here too for code that imports them here."""

from bench.runs.primary import ERROR, LOSS, PRIMARY, Primary, primaries, primary  # noqa: F401
