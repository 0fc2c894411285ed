"""The allow-list reading of solution cells (dlperf.grading.reading), on snippets written by hand.

Each refused snippet is a way a hostile or careless solution reached something an exercise's rules
do not name (several were attacks that got full marks against the deny-list readings it replaced);
each accepted one is ordinary code a correct solution writes.
"""

from __future__ import annotations

import textwrap

import pytest

from dlperf.grading.reading import STANDARD_LIBRARY, Rules, cells_of, read, reading_case

KERNEL = Rules(what="the kernel", imports={"triton", "triton.language"}, names={"triton.language.*"},
               builtins={"range", "float", "int", "min", "max"}, classes=False)
LAUNCHER = Rules(
    what="softmax_kernel and softmax", imports={"torch", "triton", "triton.language", "math"},
    names={"torch.empty_like", "torch.empty", "torch.float32", "triton.cdiv", "triton.next_power_of_2", "math.*"},
    attributes={"shape", "stride", "dim", "is_contiguous", "dtype", "device", "size", "numel"},
    decorators=set(), classes=False, within={"triton.jit": KERNEL},
    explain={"torch.softmax": "the softmax is the kernel's work"})
LOOP = Rules(what="train_epoch", imports={"torch", "torch.distributed", "math"},
             names={"torch.*", "torch.distributed.all_reduce", "math.*"}).extended(**STANDARD_LIBRARY)


def found(rules: Rules, *cells: str) -> list[str]:
    return read([(f"<cell {i}>", textwrap.dedent(c)) for i, c in enumerate(cells)], rules)


GOOD_KERNEL = """
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, stride_x, stride_out, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride_x + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
    num = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * stride_out + cols, (num / tl.sum(num, axis=0)).to(out_ptr.dtype.element_ty),
             mask=cols < n_cols)
"""
GOOD_LAUNCHER = """
import torch
import triton


def softmax(x):
    if x.dim() != 2 or not x.is_contiguous():
        raise ValueError("a contiguous 2-D tensor")
    y = torch.empty_like(x)
    softmax_kernel[(x.shape[0],)](x, y, x.shape[1], x.stride(0), y.stride(0), BLOCK=triton.next_power_of_2(x.shape[1]))
    return y
"""


def test_a_correct_kernel_and_launcher_are_not_refused():
    assert found(LAUNCHER, GOOD_KERNEL, GOOD_LAUNCHER) == []


@pytest.mark.parametrize("launcher, words", [
    ("def softmax(x):\n    return torch.softmax(x, 1)\n", "the softmax is the kernel's work"),
    ("def softmax(x):\n    return x.softmax(1)\n", "uses .softmax"),                          # a method chain
    ("def softmax(x):\n    return torch.empty_like(x).copy_(x.exp())\n", "uses .copy_"),
    ("def softmax(x):\n    return getattr(torch, 'soft' + 'max')(x, 1)\n", "getattr() (never allowed"),
    ("import operator\ndef softmax(x):\n    return operator.attrgetter('softmax')(torch)(x, 1)\n", "imports operator"),
    ("import importlib\n", "imports importlib"),
    ("def softmax(x):\n    t = torch\n    return t.softmax(x, 1)\n", "uses the module torch as a value"),
    ("from torch import softmax\n", "uses torch.softmax"),
    ("import torch.nn.functional as F\n", "imports torch.nn.functional"),
    ("def softmax(x):\n    return x.__class__\n", "special attribute .__class__"),
    ("def softmax(x):\n    return x._values()\n", "private attribute ._values"),
    ("def softmax(x):\n    return torch._softmax(x, 1, False)\n", "a private name of the library"),
    ("def softmax(x):\n    torch.empty_like = None\n", "assigns to torch.empty_like"),
    ("def softmax(x):\n    return helper(x)\n", "which these cells do not define"),    # a helper of another cell
    ("def softmax(x):\n    return eval('x')\n", "eval() (never allowed"),
    ("def softmax(x):\n    return __builtins__\n", "special names"),
    ("class K:\n    pass\n", "defines the class K"),
    ("async def softmax(x):\n    pass\n", "AsyncFunctionDef"),
    ("from . import x\n", "relative import"),
    ("from triton import *\n", "star import"),
    ("import torch as triton\n", "binds triton to two different things"),
])
def test_launcher_constructs_outside_the_rules_are_refused(launcher, words):
    got = found(LAUNCHER, GOOD_KERNEL, "import torch\nimport triton\n" + launcher)
    if words:
        assert any(words in f for f in got), got
    for sentence in got:
        assert sentence.startswith("cell ") and ", line " in sentence   # names the cell and the line


def test_a_kernel_body_is_read_with_the_kernels_rules():
    body = GOOD_KERNEL.replace("row = tl.program_id(0)", "row = tl.program_id(0)\n    y = torch.softmax")
    got = found(LAUNCHER, body, GOOD_LAUNCHER)
    assert got == ["cell 1, line 9 (`y = torch.softmax`): uses torch.softmax, which is not among the names the "
                   "rules of the kernel allow"], got
    tricky = GOOD_KERNEL.replace("num = tl.exp(", "num = tl.extra.cuda.libdevice.exp(")
    assert found(LAUNCHER, tricky, GOOD_LAUNCHER) == []        # below triton.language, resolved there
    outside = GOOD_KERNEL.replace("num = tl.exp(", "num = tl.math.triton.runtime.driver(")
    assert found(LAUNCHER, outside, GOOD_LAUNCHER), "a module reached through another is not below it"


def test_a_wildcard_never_covers_a_module_reached_through_an_attribute():
    rules = Rules(imports={"torch", "torch.nn.functional"}, names={"torch.nn.functional.*"})
    assert found(rules, "import torch.nn.functional as F\ny = F.relu\n") == []
    got = found(rules, "import torch.nn.functional as F\ny = F.torch.ops.aten.softmax\n")
    assert got and "not among the names" in got[0]
    assert found(rules, "import torch.nn.functional as F\ny = F._canonical_mask\n")


SELF_CLASS = """
import torch
import torch.distributed as dist


class Bucketed:
    def __init__(self, module):
        super().__init__()
        self._pending = []
        self.module = module

    def _launch(self, flat):
        self._pending.append(dist.all_reduce(flat, async_op=True))

    def finish(self):
        for work in self._pending:
            work.wait()
        self._pending.clear()
        self._launch(None)
"""


def test_private_attributes_only_on_self_and_only_the_classes_own():
    assert found(LOOP, SELF_CLASS) == []
    hidden = SELF_CLASS.replace("self._pending.clear()", "self.module._parameters.clear()")
    assert any("._parameters" in f for f in found(LOOP, hidden))
    mark = SELF_CLASS + "\nself = dist.group.WORLD\nself._mark('grad 0')\n"        # not a method's own object
    assert any("._mark" in f for f in found(LOOP, mark))
    rebinding = SELF_CLASS.replace("        self._pending.clear()", "        self = dist.group.WORLD\n"
                                   "        self._mark('backward')")
    got = found(LOOP, rebinding)
    assert any("re-binds self" in f for f in got) and any("._mark" in f for f in got)
    other = SELF_CLASS.replace("for work in self._pending:", "for work in dist.group.WORLD._pending:")
    assert any("private name" in f or "_pending" in f for f in found(LOOP, other))


def test_plain_python_on_numbers_and_the_safe_standard_library_are_allowed():
    code = """
    import functools
    import itertools
    import math

    import torch


    def train_epoch(model, batches):
        width = (len(batches) - 1).bit_length()
        total = functools.reduce(lambda a, b: a + b, [torch.zeros(()) for _ in itertools.repeat(None, 2)])
        return width, total, math.ceil(2.5)
    """
    assert found(LOOP, code) == []
    assert found(LOOP, "import functools\nf = functools.partial\n") == []
    assert any("functools.update_wrapper" in f for f in found(LOOP, "import functools\nf = functools.update_wrapper\n"))
    assert any("operator.attrgetter" in f for f in found(LOOP, "import operator\nf = operator.attrgetter('x')\n"))


def test_a_cell_that_does_not_parse_is_one_finding():
    assert found(LOOP, "def f(:\n") == ["your cell does not parse: invalid syntax (line 1)"]
    assert found(LOOP, "x = 1\n", "def f(:\n") == ["cell 2 does not parse: invalid syntax (line 1)"]


def test_reading_case_reads_the_cells_that_define_the_objects(tmp_path, capsys):
    import linecache

    source = "import torch\n\n\ndef softmax(x):\n    return x.softmax(1)\n"
    name = "<ipython-input-reading-test>"
    linecache.cache[name] = (len(source), None, source.splitlines(True), name)
    namespace: dict = {}
    exec(compile(source, name, "exec"), namespace)
    assert cells_of(namespace["softmax"]) == [(name, source)]
    got, want, ok = reading_case(LAUNCHER, namespace["softmax"])()
    assert not ok and "refused" in got and "uses .softmax" in capsys.readouterr().out
    fine = "import torch\n\n\ndef softmax(x):\n    return torch.empty_like(x)\n"
    linecache.cache[name] = (len(fine), None, fine.splitlines(True), name)
    exec(compile(fine, name, "exec"), namespace)
    assert reading_case(LAUNCHER, namespace["softmax"])() == ("nothing refused", "nothing refused", True)


def test_frames_code_and_tracebacks_are_never_reachable_whatever_the_rules():
    """With any attribute of values allowed, a generator's frame led to its caller's globals (the host's,
    importlib among them): those attributes are refused whatever an exercise allows."""
    walk = """
    def g():
        yield 1

    def peek():
        gen = g()
        return gen.gi_frame.f_back.f_globals["importlib"]
    """
    got = found(LOOP, walk)
    assert any(".gi_frame" in f and "never allowed" in f for f in got), got
    for attr in ("f_back", "f_globals", "tb_frame", "co_consts"):
        assert found(LOOP, f"def f(e):\n    return e.{attr}\n"), attr


def test_typing_offers_its_type_names_not_the_evaluator_of_annotations():
    assert found(LOOP, "import typing\nx: typing.Optional[int] = None\n") == []
    got = found(LOOP, "import typing\ndef h(x: 'print(1)'):\n    pass\ntyping.get_type_hints(h)\n")
    assert any("typing.get_type_hints" in f for f in got), got


def test_a_lambda_in_a_method_keeps_the_methods_own_object():
    code = SELF_CLASS.replace("        self._launch(None)", "        hook = lambda p: self._launch(p)\n        hook(None)")
    assert found(LOOP, code) == []
    other = SELF_CLASS.replace("        self._launch(None)", "        hook = lambda self: self._launch(None)")
    assert any("._launch" in f for f in found(LOOP, other))      # a lambda's own parameter named self is not it
