"""A key-value store with push/pull semantics, over torch.distributed point-to-point messages.

This is the parameter server of the "Parameter servers" chapter, small enough
to read in one sitting.  Every process of the group is a *worker*; some (by
default all) are also *servers*.  Each key (a parameter's name) lives on one
server, or, when it is large, is split into equal parts that live on all the
servers.  Workers talk to the store with two operations:

* ``push(keys, values)`` -- every worker sends its value of each key (its
  gradient) to the key's server, which **sums** the values of all workers; if
  the store has an ``updater`` (e.g. :func:`sgd`), the server then applies it
  to the stored value (the weights); otherwise the sum becomes the stored
  value;
* ``pull(keys)`` -- every worker receives the stored value of each key from
  its server.

The protocol
------------
The store is *SPMD*: every rank calls :meth:`KVStore.init`, :meth:`~KVStore.push`
and :meth:`~KVStore.pull` with the same keys, in the same order, as the ranks of
a data-parallel job do anyway.  So every rank knows, without asking, which
messages the others will send, and the protocol needs no request headers and
no server thread:

* ``init``: one check that all ranks agree on keys, shapes, dtypes and options
  (each rank sends a fingerprint to rank 0, which answers ok or not), then rank
  0 sends each part's initial value to the part's owner (the other ranks'
  values only give shapes and dtypes);
* ``push``: for every part, each non-owner *posts* an ``isend`` of its piece to
  the owner, and the owner posts one ``irecv`` per other rank; then everybody
  waits for all its requests at once.  The owner sums the pieces **in rank
  order** (so the result does not depend on which message arrived first) and
  updates;
* ``pull``: the owner posts one ``isend`` per other rank, the others one
  ``irecv`` each; all wait.

Every message carries a tag made of the part's number and the operation, so a
message can never be taken for another (the tags of two stores overlap: use
several stores one after the other, not interleaved; every call returns only
when its own messages are done, so sequential use is safe).  Posting everything before waiting
lets all servers receive at the same time, which is the point of sharding.
Messages are CPU tensors, so this needs the ``gloo`` backend (NCCL moves CUDA
tensors and ignores tags); values on another device are copied to the CPU and
pulled values are CPU tensors.

Placement (:func:`place_keys`): a key with at least ``split_numel`` elements is
cut with ``flatten().tensor_split(k)`` into one part per server; the other keys
go whole, largest first, to the server that holds the fewest elements so far.
With ``split_numel=None`` nothing is split, and one large key can make its
server the bottleneck (the chapter measures this).

Traffic: for a part of ``b`` bytes owned by ``o``, a push costs every other rank
``b`` bytes sent and ``o`` ``(n-1) b`` received; a pull the reverse.  So a rank
that owns ``s`` of the ``S`` bytes sends ``S - s + (n-1) s`` per push + pull;
with ``s = S/n`` that is ``2(n-1)/n * S``, the same as a ring allreduce.
:attr:`KVStore.traffic` counts what was really sent, and :func:`expected_traffic`
predicts it.

Failures: a rank that pushes a different key or shape than the others makes
the group fail (size mismatch) or wait until the process group's timeout;
:func:`dlperf.launch.launch` then reports it.  Python's ``hash()`` of a string
differs between processes, so placement never uses it.

The rest of the module is the chapter's training demo: data, model, the
single-process reference (:func:`train_single`) and the data-parallel worker
(:func:`train_data_parallel`), which must agree to rounding.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from .bench import Stopwatch

__all__ = [
    "KVStore",
    "Part",
    "Traffic",
    "Updater",
    "chapter_worker",
    "expected_traffic",
    "make_data",
    "make_model",
    "place_keys",
    "push_pull_demo",
    "sgd",
    "train_data_parallel",
    "train_single",
]

Updater = Callable[[str, torch.Tensor, torch.Tensor], None]
"""``updater(key, summed, stored)``: change ``stored`` in place, given the sum of the pushed values."""

_PUSH, _PULL, _INIT, _OPS = 0, 1, 2, 3  # tag = part number * _OPS + operation


def sgd(lr: float) -> Updater:
    """A server-side SGD step: ``stored -= lr * summed`` (summed = the gradient of the whole batch)."""

    def update(key: str, summed: torch.Tensor, stored: torch.Tensor) -> None:
        stored.add_(summed, alpha=-lr)

    return update


@dataclass(frozen=True)
class Part:
    """A piece of a key that lives on one server: elements ``start:stop`` of the flattened value."""

    key: str
    index: int
    owner: int
    start: int
    stop: int

    @property
    def numel(self) -> int:
        """Number of elements in this part."""
        return self.stop - self.start


def place_keys(
    sizes: Mapping[str, int], servers: Sequence[int], *, split_numel: int | None = None
) -> dict[str, list[Part]]:
    """Assign every key (name -> number of elements) to servers; returns each key's parts.

    Keys with at least ``split_numel`` elements are split into ``len(servers)``
    parts (``tensor_split`` sizes), part ``j`` on ``servers[j]``.  The other keys
    are placed whole, largest first (ties: by name), each on the server with
    the fewest elements so far (ties: the first in ``servers``).  Deterministic:
    every process computes the same placement.
    """
    servers = list(servers)
    if not servers or len(set(servers)) != len(servers):
        raise ValueError(f"servers must be distinct ranks, got {servers}")
    load = {s: 0 for s in servers}
    parts: dict[str, list[Part]] = {}
    whole = []
    for key in sizes:
        numel = int(sizes[key])
        if numel < 0:
            raise ValueError(f"key {key!r} has a negative size")
        if split_numel is not None and numel >= split_numel and len(servers) > 1:
            bounds = [len(c) for c in torch.empty(numel, device="meta").tensor_split(len(servers))]
            start, row = 0, []
            for j, (server, count) in enumerate(zip(servers, bounds)):
                row.append(Part(key, j, server, start, start + count))
                load[server] += count
                start += count
            parts[key] = row
        else:
            whole.append((key, numel))
    for key, numel in sorted(whole, key=lambda kv: (-kv[1], kv[0])):
        server = min(servers, key=lambda s: (load[s], servers.index(s)))
        parts[key] = [Part(key, 0, server, 0, numel)]
        load[server] += numel
    return {key: parts[key] for key in sizes}  # in the caller's key order


@dataclass
class Traffic:
    """Bytes and messages one rank has sent and received through the store."""

    bytes_sent: int = 0
    bytes_received: int = 0
    messages_sent: int = 0
    messages_received: int = 0

    def as_dict(self) -> dict[str, int]:
        """The four counters as a plain dict (picklable, printable)."""
        return dict(bytes_sent=self.bytes_sent, bytes_received=self.bytes_received,
                    messages_sent=self.messages_sent, messages_received=self.messages_received)


def expected_traffic(
    placement: Mapping[str, Sequence[Part]], element_size: int, world_size: int
) -> list[dict[str, int]]:
    """Bytes and messages each rank sends and receives in one push plus one pull (the protocol above)."""
    out = [dict(bytes_sent=0, bytes_received=0, messages_sent=0, messages_received=0) for _ in range(world_size)]
    for parts in placement.values():
        for part in parts:
            b = part.numel * element_size
            for r in range(world_size):
                if r == part.owner:
                    for direction in ("sent", "received"):  # receive n-1 pushes, send n-1 pulls
                        out[r][f"bytes_{direction}"] += (world_size - 1) * b
                        out[r][f"messages_{direction}"] += world_size - 1
                else:
                    for direction in ("sent", "received"):  # send 1 push, receive 1 pull
                        out[r][f"bytes_{direction}"] += b
                        out[r][f"messages_{direction}"] += 1
    return out


class KVStore:
    """A sharded key-value store over the default process group (see the module docstring).

    ``servers``: the ranks that hold values (default: every rank).  ``updater``:
    applied by a key's server after each push (default: none, the stored value
    becomes the sum of the pushes).  ``split_numel``: keys with at least this
    many elements are split over all servers (default: never).  All ranks must
    construct the store with the same arguments and call :meth:`init`,
    :meth:`push` and :meth:`pull` with the same keys in the same order.
    """

    def __init__(
        self,
        servers: Sequence[int] | None = None,
        *,
        updater: Updater | None = None,
        split_numel: int | None = None,
    ):
        if not dist.is_initialized():
            raise RuntimeError("KVStore needs a process group: run it in workers started by dlperf.launch.launch")
        if dist.get_backend() != "gloo":
            raise RuntimeError(f"KVStore sends CPU tensors with tags: it needs the gloo backend, not {dist.get_backend()}")
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self.servers = tuple(range(self.world_size)) if servers is None else tuple(servers)
        if any(not 0 <= s < self.world_size for s in self.servers):
            raise ValueError(f"servers {self.servers} are not all ranks of this {self.world_size}-rank group")
        self.updater = updater
        self.split_numel = split_numel
        self.traffic = Traffic()
        self.placement: dict[str, list[Part]] = {}
        self._shape: dict[str, torch.Size] = {}
        self._dtype: dict[str, torch.dtype] = {}
        self._id: dict[tuple[str, int], int] = {}
        self._stored: dict[tuple[str, int], torch.Tensor] = {}  # the parts this rank owns

    # -- helpers ---------------------------------------------------------------------------------
    def _isend(self, tensor: torch.Tensor, dst: int, tag: int) -> Any:
        self.traffic.bytes_sent += tensor.numel() * tensor.element_size()
        self.traffic.messages_sent += 1
        return dist.isend(tensor, dst, tag=tag)

    def _irecv(self, tensor: torch.Tensor, src: int, tag: int) -> Any:
        self.traffic.bytes_received += tensor.numel() * tensor.element_size()
        self.traffic.messages_received += 1
        return dist.irecv(tensor, src, tag=tag)

    def _tag(self, part: Part, op: int) -> int:
        return self._id[(part.key, part.index)] * _OPS + op

    def _flat(self, key: str, value: torch.Tensor) -> torch.Tensor:
        if key not in self.placement:
            raise KeyError(f"key {key!r} was not initialised (keys: {sorted(self.placement)})")
        if tuple(value.shape) != tuple(self._shape[key]):
            raise ValueError(f"key {key!r}: shape {tuple(value.shape)}, the store holds {tuple(self._shape[key])}")
        return value.detach().to("cpu", self._dtype[key]).reshape(-1).contiguous()

    def _empty(self, part: Part) -> torch.Tensor:
        return torch.empty(part.numel, dtype=self._dtype[part.key])

    @staticmethod
    def _as_lists(keys: str | Sequence[str], values: Any = None) -> tuple[list[str], list[Any], bool]:
        if isinstance(keys, str):
            return [keys], [values], True
        keys = list(keys)
        vals = [None] * len(keys) if values is None else list(values)
        if len(vals) != len(keys):
            raise ValueError(f"{len(keys)} keys and {len(vals)} values")
        return keys, vals, False

    def _fingerprint(self) -> int:
        desc = repr([(k, tuple(self._shape[k]), str(self._dtype[k])) for k in self.placement]
                    + [self.servers, self.split_numel, self.updater is not None])
        return zlib.crc32(desc.encode())

    # -- public API ------------------------------------------------------------------------------
    def owner(self, key: str) -> tuple[int, ...]:
        """The server rank(s) holding ``key``: one rank, or one per part for a split key."""
        return tuple(p.owner for p in self.placement[key])

    def init(self, values: Mapping[str, torch.Tensor]) -> None:
        """Create the keys (collective).  Rank 0's values become the stored values.

        The other ranks' values give shapes and dtypes only.  Raises on every
        rank if the ranks disagree on keys, shapes, dtypes or store options.
        """
        if self.placement:
            raise RuntimeError("init was already called on this store")
        for key, value in values.items():
            self._shape[key] = value.shape
            self._dtype[key] = value.dtype
        self.placement = place_keys({k: v.numel() for k, v in values.items()}, self.servers,
                                    split_numel=self.split_numel)
        for key, parts in self.placement.items():
            for part in parts:
                self._id[(key, part.index)] = len(self._id)
        # 1. do all ranks agree?  Fingerprints to rank 0, verdicts back (tag -1 / -2 are outside the part tags).
        mine = torch.tensor([self._fingerprint()], dtype=torch.int64)
        if self.rank == 0:
            prints = [torch.empty(1, dtype=torch.int64) for _ in range(self.world_size)]
            for src in range(1, self.world_size):
                dist.recv(prints[src], src, tag=2**30)
            bad = [src for src in range(1, self.world_size) if int(prints[src]) != int(mine)]
            verdict = torch.tensor([len(bad)], dtype=torch.int64)
            for dst in range(1, self.world_size):
                dist.send(verdict, dst, tag=2**30 + 1)
            if bad:
                raise RuntimeError(f"KVStore.init: ranks {bad} disagree with rank 0 on keys, shapes, dtypes or options")
        else:
            dist.send(mine, 0, tag=2**30)
            verdict = torch.empty(1, dtype=torch.int64)
            dist.recv(verdict, 0, tag=2**30 + 1)
            if int(verdict):
                raise RuntimeError("KVStore.init: the ranks disagree on keys, shapes, dtypes or options (see rank 0)")
        # 2. rank 0's values to the owners.
        works, inbox = [], []
        for key, parts in self.placement.items():
            flat = self._flat(key, values[key])
            for part in parts:
                if part.owner == self.rank == 0:
                    self._stored[(key, part.index)] = flat[part.start:part.stop].clone()
                elif self.rank == 0:
                    works.append(self._isend(flat[part.start:part.stop].clone(), part.owner, self._tag(part, _INIT)))
                elif part.owner == self.rank:
                    buf = self._empty(part)
                    works.append(self._irecv(buf, 0, self._tag(part, _INIT)))
                    inbox.append((part, buf))
        for w in works:
            w.wait()
        for part, buf in inbox:
            self._stored[(part.key, part.index)] = buf

    def push(self, keys: str | Sequence[str], values: torch.Tensor | Sequence[torch.Tensor]) -> None:
        """Send this worker's value of each key to its server; servers sum over all workers and update.

        Collective: every rank pushes the same keys.  Returns when this rank's
        messages are done (a server: when it has summed and updated).
        """
        keys, vals, _ = self._as_lists(keys, values)
        works, inbox = [], []
        for key, value in zip(keys, vals):
            flat = self._flat(key, value)
            for part in self.placement[key]:
                piece = flat[part.start:part.stop]
                tag = self._tag(part, _PUSH)
                if part.owner == self.rank:
                    pieces: list[torch.Tensor | None] = [None] * self.world_size
                    pieces[self.rank] = piece
                    for src in range(self.world_size):
                        if src != self.rank:
                            pieces[src] = self._empty(part)
                            works.append(self._irecv(pieces[src], src, tag))
                    inbox.append((part, pieces))
                else:
                    works.append(self._isend(piece.clone(), part.owner, tag))
        for w in works:
            w.wait()
        for part, pieces in inbox:
            total = pieces[0].clone()
            for piece in pieces[1:]:  # rank order: the same sum whatever the arrival order
                total += piece
            stored = self._stored[(part.key, part.index)]
            if self.updater is None:
                stored.copy_(total)
            else:
                self.updater(part.key, total, stored)

    def pull(self, keys: str | Sequence[str]) -> torch.Tensor | list[torch.Tensor]:
        """The stored value of each key, on every rank (collective; CPU tensors shaped like the key).

        A single key gives a tensor, a list of keys a list.
        """
        keys, _, single = self._as_lists(keys)
        works, out = [], []
        for key in keys:
            if key not in self.placement:
                raise KeyError(f"key {key!r} was not initialised (keys: {sorted(self.placement)})")
            pieces = []
            for part in self.placement[key]:
                tag = self._tag(part, _PULL)
                if part.owner == self.rank:
                    stored = self._stored[(key, part.index)]
                    for dst in range(self.world_size):
                        if dst != self.rank:
                            works.append(self._isend(stored, dst, tag))
                    pieces.append(stored.clone())
                else:
                    buf = self._empty(part)
                    works.append(self._irecv(buf, part.owner, tag))
                    pieces.append(buf)
            out.append((key, pieces))
        for w in works:
            w.wait()
        result = [torch.cat(pieces).reshape(self._shape[key]) for key, pieces in out]
        return result[0] if single else result

    def local_keys(self) -> list[str]:
        """The keys (or parts of keys) stored on this rank, as ``key`` or ``key[part]``."""
        return [k if len(self.placement[k]) == 1 else f"{k}[{i}]" for (k, i) in self._stored]


# ------------------------------------------------------------------------------------------------
# The chapter's demo: data, model, single-process reference, data-parallel workers
# ------------------------------------------------------------------------------------------------


def make_data(samples: int = 96, features: int = 16, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A regression problem: ``y = sin(X w) + 0.1 noise``, ``X`` of shape ``(samples, features)``."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(samples, features, generator=g)
    w = torch.randn(features, 1, generator=g) / features**0.5
    y = torch.sin(X @ w) + 0.1 * torch.randn(samples, 1, generator=g)
    return X, y


def make_model(features: int = 16, hidden: int = 32, seed: int = 1) -> nn.Sequential:
    """A small MLP, ``Linear -> Tanh -> Linear``, initialised from ``seed`` (the same in every process)."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(features, hidden), nn.Tanh(), nn.Linear(hidden, 1))


def _loss(model: nn.Module, X: torch.Tensor, y: torch.Tensor, total: int) -> torch.Tensor:
    """Squared error *summed* over ``X``'s rows and divided by the whole batch size ``total``.

    The workers' losses (and gradients) then add up to the full-batch mean loss (and its gradient).
    """
    return ((model(X) - y) ** 2).sum() / total


def train_single(steps: int = 50, lr: float = 0.1, *, samples: int = 96, seed: int = 0) -> dict[str, Any]:
    """Full-batch gradient descent in one process: the reference for :func:`train_data_parallel`."""
    X, y = make_data(samples, seed=seed)
    model = make_model()
    update = sgd(lr)
    losses = []
    for _ in range(steps):
        loss = _loss(model, X, y, samples)
        grads = torch.autograd.grad(loss, list(model.parameters()))
        with torch.no_grad():
            for (name, p), g in zip(model.named_parameters(), grads):
                update(name, g, p)
        losses.append(loss.item())
    return {"params": {k: v.detach().clone() for k, v in model.named_parameters()}, "losses": losses}


def train_data_parallel(
    steps: int = 50,
    lr: float = 0.1,
    *,
    samples: int = 96,
    seed: int = 0,
    split_numel: int | None = None,
    servers: Sequence[int] | None = None,
) -> dict[str, Any]:
    """Worker: data-parallel training through a :class:`KVStore` with a server-side SGD updater.

    Each rank takes every ``world``-th sample, computes the gradient of its
    share of the full-batch loss, pushes it and pulls the updated weights.
    Returns this rank's final weights, local losses, traffic per step,
    placement, and the seconds per training step (``Stopwatch``, CPU).
    """
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)  # several processes share the cores
    X, y = make_data(samples, seed=seed)
    Xr, yr = X[rank::world], y[rank::world]
    model = make_model()
    names = [name for name, _ in model.named_parameters()]
    params = [p for _, p in model.named_parameters()]
    kv = KVStore(servers, updater=sgd(lr), split_numel=split_numel)
    kv.init(dict(model.named_parameters()))
    with torch.no_grad():  # start from the stored weights (rank 0's), whatever this rank initialised
        for p, new in zip(params, kv.pull(names)):
            p.copy_(new)
    start = Traffic(**kv.traffic.as_dict())
    losses = []
    with Stopwatch() as watch:
        for _ in range(steps):
            loss = _loss(model, Xr, yr, samples)
            grads = torch.autograd.grad(loss, params)
            kv.push(names, grads)
            with torch.no_grad():
                for p, new in zip(params, kv.pull(names)):
                    p.copy_(new)
            losses.append(loss.item())
    t = kv.traffic
    per_step = {k: (v - getattr(start, k)) // steps for k, v in t.as_dict().items()}
    return {
        "rank": rank,
        "params": {k: v.detach().clone() for k, v in model.named_parameters()},
        "losses": losses,
        "traffic_per_step": per_step,
        "owners": {k: kv.owner(k) for k in names},
        "numel": {k: p.numel() for k, p in zip(names, params)},
        "local_keys": kv.local_keys(),
        "seconds_per_step": watch.seconds / max(steps, 1),
    }


def push_pull_demo(
    sizes: Mapping[str, int], servers: Sequence[int] | None = None, split_numel: int | None = None
) -> dict[str, Any]:
    """Worker: rank ``r`` pushes ``(r + 1) * (1, 2, 3, ...)`` for every key, then pulls.

    Keys are stored as zeros by :meth:`KVStore.init`, and there is no updater:
    the pulled value of a key of ``m`` elements must be
    ``(1 + 2 + ... + world) * (1, ..., m)`` on every rank.  Returns the pulled
    values, the owners, the keys stored on this rank and the traffic of the
    push and the pull (``init`` excluded).
    """
    rank = dist.get_rank()
    kv = KVStore(servers, split_numel=split_numel)
    kv.init({k: torch.zeros(m) for k, m in sizes.items()})
    keys = list(sizes)
    before = kv.traffic.as_dict()
    kv.push(keys, [(rank + 1) * torch.arange(1.0, sizes[k] + 1) for k in keys])
    pulled = kv.pull(keys)
    traffic = {k: v - before[k] for k, v in kv.traffic.as_dict().items()}
    return {"rank": rank, "pulled": dict(zip(keys, pulled)), "owners": {k: kv.owner(k) for k in keys},
            "local_keys": kv.local_keys(), "traffic": traffic}


def chapter_worker(sizes: Mapping[str, int], steps: int, lr: float, split_numel: int) -> dict[str, Any]:
    """Worker for the chapter (one process group for everything): the demo, then training twice.

    Training runs once with whole keys and once with keys of at least
    ``split_numel`` elements split over all servers.  ``work_s``: the seconds
    this rank spent in all of it (process start-up excluded).
    """
    with Stopwatch() as watch:
        out = {
            "demo": push_pull_demo(sizes),
            "whole": train_data_parallel(steps, lr),
            "split": train_data_parallel(steps, lr, split_numel=split_numel),
        }
    return {**out, "work_s": watch.seconds}
