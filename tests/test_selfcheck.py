"""The visible self-check tables of the exercises (dlperf.grading.SelfCheck)."""

from __future__ import annotations

import pytest
import torch

from dlperf.grading import SelfCheck


def test_self_check_prints_a_table_and_raises_on_the_first_failure(capsys):
    check = SelfCheck("double")
    check.row("x=2", 4, 4, ok=True)
    check.run("x=3", lambda: (7, 6, False), hint="2 * x")
    check.run("stub", lambda: (_ for _ in ()).throw(NotImplementedError()))
    with pytest.raises(AssertionError, match="2 of 3 cases fail .first: x=3"):
        check.done()
    out = capsys.readouterr().out
    assert "Self-check: double" in out and "hint (x=3): 2 * x" in out and "the stub is still there" in out
    assert out.count("NO") == 2 and "1 of 3 cases pass." in out


def test_self_check_passes_quietly_apart_from_its_table(capsys):
    check = SelfCheck("t")
    check.row("tensor", torch.arange(10.0), torch.arange(10.0), ok=True)
    check.done()
    assert "tensor(10,) float32 [0, 1, 2, ...]" in capsys.readouterr().out
