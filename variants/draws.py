"""Common random numbers: every initial value of a model is a function of (the seed, the tensor's qualified name).

A model drawn from one global stream after ``torch.manual_seed(seed)`` gives a layer whichever numbers come next:
a design that draws one extra tensor shifts every draw after it, so two designs that share a layer start it from
different values at the same seed, and a paired-by-seed comparison carries the noise of two unrelated draws. Here
each parameter and buffer draws from a stream of its own, seeded by (seed, qualified name), the way JAX/Flax fold
a module's path into its key (Bradbury et al. 2018, "JAX: composable transformations of Python+NumPy programs";
Heek et al. 2020, "Flax"): adding, removing or reordering a layer changes no other layer's initial values, and two
designs that share a layer (same name, same shape, same init) start it equal.

Nothing about *how* a layer is initialised changes: the model's own constructors and init functions run as they
are (He's fan-out normal, the zero-init of a branch's last norm, gate biases, Fixup's and DeepNorm's scalings, a
timm model's own init), only the random numbers they read are different ones. The build runs twice:

1. :class:`_Record` runs it once and follows every seeded random op (``normal_``, ``uniform_``, ``randn`` ...) to
   the parameters and buffers its values end up in (through any arithmetic, copies and views in between);
2. :class:`_Replay` runs it again and hands each of those ops the stream of the tensor it feeds (the first such
   name in sorted order where one draw feeds several, e.g. weights tied at init); a draw that feeds no parameter
   or buffer reads a stream of its own (``""``).

A draw given its own ``torch.Generator`` is left alone (it is seeded already), and the global stream is the same
after the build as before it: the model's draws take nothing from the data order, augmentation or dropout streams.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

UNNAMED = ""  # the stream of draws that feed no parameter or buffer


def stream_seed(seed: int, name: str) -> int:
    """The seed of tensor ``name``'s stream in a model drawn at ``seed``: a 63-bit hash of both, the same on every
    machine and Python (not ``hash()``, which is salted per process)."""
    digest = hashlib.blake2b(f"{int(seed)}\x00{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def _seeded(func: Any, kwargs: dict[str, Any]) -> bool:
    """Whether ``func`` draws from the global stream (a seeded random op given no generator of its own)."""
    return torch.Tag.nondeterministic_seeded in func.tags and kwargs.get("generator") is None


def _key(t: torch.Tensor) -> int:
    """The storage a tensor's values live in (a view's is its base's); 0 for one without storage."""
    try:
        return int(t.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):
        return 0


def _tensors(tree: Any) -> Iterator[torch.Tensor]:
    return (t for t in pytree.tree_leaves(tree) if isinstance(t, torch.Tensor))


class _Record(TorchDispatchMode):
    """Every seeded draw of a build, in order, and the draws each storage's values derive from."""

    def __init__(self) -> None:
        super().__init__()
        self.draws: list[str] = []  # the op of each draw, in order
        self.sources: dict[int, set[int]] = {}  # storage -> indices of the draws its values derive from
        self.alive: list[torch.Tensor] = []  # every storage followed, kept alive so no other tensor reuses it

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        sources: set[int] = set()
        for t in _tensors((args, kwargs)):
            sources |= self.sources.get(_key(t), set())
        if _seeded(func, kwargs):
            sources.add(len(self.draws))
            self.draws.append(str(func))
        if sources:
            written = list(_tensors(out))
            written += [a for a, spec in zip(args, func._schema.arguments, strict=False)
                        if isinstance(a, torch.Tensor) and spec.alias_info is not None and spec.alias_info.is_write]
            for t in written:
                if (key := _key(t)) != 0:
                    self.sources.setdefault(key, set()).update(sources)
                    self.alive.append(t)
        return out


class _Replay(TorchDispatchMode):
    """The same build again, each seeded draw reading the stream of the tensor it feeds."""

    def __init__(self, seed: int, plan: list[tuple[str, str]], what: str) -> None:
        super().__init__()
        self.seed, self.plan, self.what = seed, plan, what
        self.states: dict[str, torch.Tensor] = {}  # stream name -> its generator state after its last draw
        self.done = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if not _seeded(func, kwargs):
            return func(*args, **kwargs)
        op = str(func)
        if self.done >= len(self.plan) or self.plan[self.done][0] != op:
            expected = self.plan[self.done][0] if self.done < len(self.plan) else "no more draws"
            raise RuntimeError(f"building {self.what} twice drew differently (draw {self.done}: {op}, the first "
                               f"build had {expected}): its construction must not depend on random values")
        name = self.plan[self.done][1]
        self.done += 1
        if name not in self.states:
            self.states[name] = torch.Generator().manual_seed(stream_seed(self.seed, name)).get_state()
        torch.default_generator.set_state(self.states[name])
        out = func(*args, **kwargs)
        self.states[name] = torch.default_generator.get_state()
        return out


def named_tensors(model: nn.Module) -> list[tuple[str, torch.Tensor]]:
    """Every parameter and buffer of ``model`` by its qualified name (a tensor registered twice: its first name)."""
    return [*model.named_parameters(), *model.named_buffers()]


def _attribute(record: _Record, model: nn.Module) -> list[tuple[str, str]]:
    """Each draw of ``record``: (its op, the stream it reads): the first name, sorted, of the tensors it feeds."""
    feeds: dict[int, str] = {}
    for name, tensor in sorted(named_tensors(model)):
        for draw in record.sources.get(_key(tensor), ()):
            feeds.setdefault(draw, name)
    return [(op, feeds.get(i, UNNAMED)) for i, op in enumerate(record.draws)]


def _on_meta() -> bool:
    return torch.empty(()).device.type == "meta"


def build(make: Callable[[], nn.Module], seed: int, what: str = "the model") -> nn.Module:
    """``make()``'s model with every initial value drawn from the stream of (``seed``, its qualified name).

    ``make`` is called twice and must build the same model both times; the global random state is as it was
    before (nothing is taken from it). On the meta device (no values are drawn) ``make()`` is called once."""
    if _on_meta():
        return make()
    with torch.random.fork_rng(devices=[]):
        record = _Record()
        with record:
            first = make()
        plan = _attribute(record, first)
        del first, record
        replay = _Replay(int(seed), plan, what)
        with replay:
            model = make()
    if replay.done != len(plan):
        raise RuntimeError(f"building {what} twice drew differently (the first build drew {len(plan)} times, the "
                           f"second {replay.done}): its construction must not depend on random values")
    return model
