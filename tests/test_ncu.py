"""Nsight Compute's output read and compared (dlperf.kernels.ncu), and the committed run the GPU chapter shows."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from dlperf.kernels import ncu

ROOT = Path(__file__).resolve().parents[1]

RAW = """==PROF== Connected to process 1020 (/usr/bin/python3.12)
==PROF== Disconnected from process 1020
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","1020","python3.12","h","add_kernel","1","7","(128, 1, 1)","(16, 1, 1)","0","9.0","m","dram__bytes_read.sum","byte","134,225,152"
"0","1020","python3.12","h","add_kernel","1","7","(128, 1, 1)","(16, 1, 1)","0","9.0","m","gpu__time_duration.sum","ns","45,120"
"1","1020","python3.12","h","strided_load_kernel","1","7","(128, 1, 1)","(16, 1, 1)","0","9.0","m","dram__bytes_read.sum","byte","n/a"
"1","1020","python3.12","h","strided_load_kernel","1","7","(128, 1, 1)","(16, 1, 1)","0","9.0","m","lts__t_sectors_srcunit_tex_op_read.sum","sector","131,072"
"""


def test_parse_reads_each_launch_in_order_with_thousands_separators_and_skips_unreadable_values():
    launches = ncu.parse(RAW)
    assert [launch["kernel"] for launch in launches] == ["add_kernel", "strided_load_kernel"]
    assert launches[0]["metrics"] == {ncu.DRAM_READ: 134225152.0, ncu.TIME: 45120.0}
    assert launches[1]["metrics"] == {ncu.L2_READ: 131072.0}
    assert ncu.parse("==PROF== no kernel matched\n") == []


def _row(label, dram_read, dram_write, l2_read, l2_write, us, interpreter=None, model=None):
    row = {"label": label, "kernel": "k", "metrics": {ncu.DRAM_READ: dram_read, ncu.DRAM_WRITE: dram_write,
                                                      ncu.L2_READ: l2_read, ncu.L2_WRITE: l2_write, ncu.TIME: us * 1e3}}
    if interpreter:
        row["interpreter"] = interpreter
    if model:
        row["model"] = model
    return row


def test_findings_are_computed_from_the_report():
    n = 1000
    report = {"launches": [
        _row("add", 8 * n, 2 * n, 8 * n / 32, 4 * n / 32, 1.0,
             interpreter={"loaded": 8 * n, "stored": 4 * n, "sector_bytes": 12 * n}),
        _row("gather_stride_1", 4 * n, 0, 4 * n / 32, 4 * n / 32, 1.0,
             interpreter={"loaded": 4 * n, "stored": 4 * n, "sector_bytes": 8 * n}),
        _row("gather_stride_16", 64 * n, 0, 32 * n / 32, 4 * n / 32, 4.0,
             interpreter={"loaded": 4 * n, "stored": 4 * n, "sector_bytes": 18 * n}),
        _row("layer_norm", 3 * n, 3 * n, 4 * n / 32, 3 * n / 32, 1.0,
             interpreter={"loaded": 9 * n, "stored": 3 * n, "sector_bytes": 12 * n}),
        _row("matmul_group_1", 30 * n, n, 0, 0, 10.0,
             model={"model_hbm_read": 40 * n, "least_read": 2 * n, "asked_read": 100 * n, "stored": n}),
        _row("matmul_group_8", 10 * n, n, 0, 0, 8.0,
             model={"model_hbm_read": 20 * n, "least_read": 2 * n, "asked_read": 100 * n, "stored": n}),
    ]}
    got = ncu.findings(report)
    assert got["sector_ratio"] == (1.0, 2.0)       # the add, the gathers; not the LayerNorm (it reuses)
    assert got["gather_dram"] == {1: 4.0, 16: 64.0} and got["gather_l2"] == {1: 4.0, 16: 32.0}
    assert got["add_read"] == 1.0 and got["add_write"] == 0.5
    assert got["ln_dram_read"] == 3 * n and got["ln_l2_sectors"] == 7 * n and got["ln_counted_sectors"] == 12 * n
    assert got["mm_gain"] == 3.0 and got["mm_model_gain"] == 2.0 and got["mm_us_1"] == 10.0
    assert "fa_full" not in got


def test_the_committed_run_holds_every_launch_with_its_counters_and_ncus_own_output():
    report = ncu.load()
    assert report is not None, "book/_gpu_reference/ncu/ncu-traffic.json is missing"
    assert report["exit"] == 0 and not report["unmatched_labels"]
    labels = [row["label"] for row in report["launches"]]
    assert labels[0] == "add" and "layer_norm" in labels and "matmul_group_8" in labels and "flash_causal" in labels
    raw = (ncu.COMMITTED.parent / "ncu-raw.csv").read_text()
    again = ncu.parse(raw)        # the report's figures are ncu's own, launch by launch
    assert [launch["metrics"] for launch in again] == [row["metrics"] for row in report["launches"]]
    assert "source" not in ncu.findings(report) and "H200" in ncu.source(report)


def test_the_script_says_it_needs_a_gpu_and_ncu_and_exits_2_here(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "ncu_traffic.py"), "--out", str(tmp_path)],
                          capture_output=True, text=True, env={"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 2, done.stderr
    assert "needs a CUDA device and Nsight Compute" in done.stdout


def test_roofline_points_take_flops_from_the_launch_and_bytes_and_time_from_the_counters():
    report = {"launches": [_row("add", 8e6, 4e6, 0, 0, 10.0), _row("gather_stride_1", 1e6, 1e6, 0, 0, 1.0),
                           _row("flash_causal", 1e8, 2e7, 0, 0, 500.0)]}
    points = {p[0]: p for p in ncu.roofline_points(report)}
    assert sorted(points) == ["add", "flash_causal"]            # a gather computes nothing
    assert points["add"][1:] == (ncu.N_ADD / 12e6, ncu.N_ADD / 10e-6, "float32")
    b, h, n, d = ncu.FA_SHAPE
    assert points["flash_causal"][2] == 2.0 * b * h * n * n * d / 500e-6 and points["flash_causal"][3] == "float16"


def test_the_html_table_has_the_markdown_tables_cells():
    rows = [_row("add", 8e6, 4e6, 2.5e5, 1.25e5, 10.0, interpreter={"loaded": 8e6, "stored": 4e6, "sector_bytes": 12e6})]
    page = ncu.html_table(rows)
    assert page.startswith('<table class="dlperf-table">') and page.count("<tr>") == 2
    assert "<th>launch</th>" in page and ">8.0</td>" in page and ">12.0</td>" in page and "---" not in page
