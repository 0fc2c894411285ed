"""What a GPU's own counters say about the course's traffic counts: Nsight Compute's figures, read and compared.

``scripts/ncu_traffic.py`` runs on a GPU machine: it launches the course's Triton kernels once each under
Nsight Compute (``ncu``, which flushes the caches before each kernel it measures), reads their DRAM and L2
byte counters, and puts beside them what the interpreter counts for the same launch
(:mod:`dlperf.kernels.traffic`) or what the book's models predict (:func:`dlperf.kernels.grouped.hbm_bytes`,
:func:`dlperf.kernels.flash.flash_bytes`).  A run's report is committed as
``book/_gpu_reference/ncu/ncu-traffic.json`` with ncu's own output beside it (``ncu-raw.csv``).

This module parses ncu's CSV (:func:`parse`), loads a committed report (:func:`load`) and computes the
comparisons the pages state (:func:`findings`), so that every figure on a page comes from the report.
"""

from __future__ import annotations

import csv
import html
import io
import json
from pathlib import Path
from typing import Any

__all__ = ["COMMITTED", "DRAM_READ", "DRAM_WRITE", "FA_BLOCK", "FA_SHAPE", "L2_READ", "L2_WRITE", "LN_SHAPE",
           "HEADER", "MM_BK", "MM_GROUPS", "MM_N", "MM_TILE", "N_ADD", "N_GATHER", "STRIDES", "TIME", "findings", "flops",
           "html_table", "load", "parse", "roofline_points", "source", "table"]

COMMITTED = Path(__file__).resolve().parents[2] / "book" / "_gpu_reference" / "ncu" / "ncu-traffic.json"
DRAM_READ, DRAM_WRITE = "dram__bytes_read.sum", "dram__bytes_write.sum"
L2_READ, L2_WRITE = "lts__t_sectors_srcunit_tex_op_read.sum", "lts__t_sectors_srcunit_tex_op_write.sum"
TIME = "gpu__time_duration.sum"
SECTOR = 32

# the launches of scripts/ncu_traffic.py (one home: the script launches them, the pages compute from them)
STRIDES = (1, 2, 4, 8, 16, 32)
N_ADD, N_GATHER, LN_SHAPE = 2**24, 2**20, (4096, 4096)        # float32
MM_N, MM_TILE, MM_BK, MM_GROUPS = 8192, 128, 64, (1, 8)       # bfloat16, dlperf.kernels.grouped.matmul
FA_SHAPE, FA_BLOCK = (4, 16, 4096, 64), 64                    # float16 (batch, heads, tokens, head dim)


def flops(label: str) -> tuple[float, str] | None:
    """The FLOPs of a launch of the script and the dtype whose roof bounds it; None for the gathers and the
    LayerNorm (no product or sum to count: data movement only, or a count that depends on conventions)."""
    if label == "add":
        return float(N_ADD), "float32"
    if label.startswith("matmul_group_"):
        return 2.0 * MM_N**3, "bfloat16"
    if label.startswith("flash_"):
        b, h, n, d = FA_SHAPE
        return 4.0 * b * h * n * n * d / (2 if label.endswith("causal") else 1), "float16"
    return None


def roofline_points(report: dict) -> list[tuple[str, float, float, str]]:
    """``(label, intensity, FLOP/s, dtype)`` of each launch with FLOPs, every figure measured by ncu: the
    intensity against the bytes between HBM and the L2 (read and written), the rate over the kernel's time."""
    points = []
    for row in report["launches"]:
        counted = flops(row["label"])
        m = row["metrics"]
        if counted is None or not m.get(TIME):
            continue
        moved = (m.get(DRAM_READ) or 0.0) + (m.get(DRAM_WRITE) or 0.0)
        points.append((row["label"], counted[0] / moved, counted[0] / (m[TIME] * 1e-9), counted[1]))
    return points


def parse(text: str) -> list[dict]:
    """ncu's ``--csv`` output -> one dict per profiled launch, in launch order: ``{"kernel", "metrics"}``.

    Values are numbers (ncu prints thousands separators: ``"134,225,152"``); lines before the header (ncu's
    ``==PROF==`` messages) are skipped."""
    start = text.find('"ID"')
    if start < 0:
        return []
    launches: dict[int, dict] = {}
    for row in csv.DictReader(io.StringIO(text[start:])):
        try:
            key = int(row["ID"])
        except (KeyError, TypeError, ValueError):
            continue
        entry = launches.setdefault(key, {"kernel": row.get("Kernel Name", ""), "metrics": {}})
        value = (row.get("Metric Value") or "").replace(",", "")
        try:
            entry["metrics"][row["Metric Name"]] = float(value)
        except (KeyError, ValueError):
            continue
    return [launches[k] for k in sorted(launches)]


def load(path: Path | None = None) -> dict | None:
    """The committed report (or ``path``'s), or None where there is none."""
    path = COMMITTED if path is None else Path(path)
    return json.loads(path.read_text()) if path.is_file() else None


def source(report: dict) -> str:
    """Where the report's figures come from, in one line."""
    return (f"Nsight Compute ({report.get('ncu', 'ncu')}) on an {report['device']}, torch {report['torch']}, "
            f"{report['date'][:10]}, commit {report.get('commit') or 'unknown'}; scripts/ncu_traffic.py, "
            "committed as book/_gpu_reference/ncu/")


def _by_label(report: dict) -> dict[str, dict]:
    return {row["label"]: row for row in report["launches"]}


def findings(report: dict) -> dict[str, Any]:
    """The comparisons a page states, each computed from the report.

    * ``sector_ratio``: the L2's sector requests over the interpreter's sector count, lowest and highest over
      the launches that reuse no data (the add and the gathers; 1.0: the model of sectors is the hardware's);
    * ``gather_dram``: DRAM bytes read per gathered element at each stride; ``gather_l2``: L2 bytes asked
      per element (sectors x 32);
    * ``add_read``/``add_write``: DRAM bytes over the counted ones for the vector add (writes can stay in the
      L2 when the kernel ends);
    * ``ln_*``: the LayerNorm's counted reads, its DRAM reads and the bytes of ``x`` alone;
    * ``mm_*``: the 8192-square product's DRAM reads in row-major and grouped order, measured and modelled,
      and its times;
    * ``fa_*``: FlashAttention's DRAM reads against its inputs' size, the model's asked-for bytes and the
      standard attention's traffic.
    """
    rows = _by_label(report)
    out: dict[str, Any] = {}
    ratios = []
    for label, row in rows.items():          # the launches that reuse nothing: what no cache can catch
        if label != "add" and not label.startswith("gather_stride_"):
            continue
        counted = (row.get("interpreter") or {}).get("sector_bytes")
        m = row["metrics"]
        if counted and m.get(L2_READ) is not None and m.get(L2_WRITE) is not None:
            ratios.append((m[L2_READ] + m[L2_WRITE]) * SECTOR / counted)
    out["sector_ratio"] = (min(ratios), max(ratios)) if ratios else None
    gathers = {int(label.rsplit("_", 1)[1]): row for label, row in rows.items() if label.startswith("gather_stride_")}
    n = {s: row["interpreter"]["stored"] / 4 for s, row in gathers.items() if row.get("interpreter")}
    out["gather_dram"] = {s: gathers[s]["metrics"][DRAM_READ] / n[s] for s in sorted(n)}
    out["gather_l2"] = {s: gathers[s]["metrics"][L2_READ] * SECTOR / n[s] for s in sorted(n)}
    out["gather_us"] = {s: gathers[s]["metrics"][TIME] / 1e3 for s in sorted(n)}
    if "add" in rows and rows["add"].get("interpreter"):
        add = rows["add"]
        out["add_read"] = add["metrics"][DRAM_READ] / add["interpreter"]["loaded"]
        out["add_write"] = add["metrics"][DRAM_WRITE] / add["interpreter"]["stored"]
    if "layer_norm" in rows and rows["layer_norm"].get("interpreter"):
        ln = rows["layer_norm"]
        out["ln_counted_read"] = ln["interpreter"]["loaded"]
        out["ln_dram_read"] = ln["metrics"][DRAM_READ]
        out["ln_x_bytes"] = ln["interpreter"]["stored"]          # x has the shape and dtype of y
        out["ln_counted_sectors"] = ln["interpreter"]["sector_bytes"]
        out["ln_l2_sectors"] = (ln["metrics"][L2_READ] + ln["metrics"][L2_WRITE]) * SECTOR
    g1, g8 = rows.get("matmul_group_1"), rows.get("matmul_group_8")
    if g1 and g8:
        out.update(mm_read_1=g1["metrics"][DRAM_READ], mm_read_8=g8["metrics"][DRAM_READ],
                   mm_model_1=g1["model"]["model_hbm_read"], mm_model_8=g8["model"]["model_hbm_read"],
                   mm_least=g1["model"]["least_read"], mm_asked=g1["model"]["asked_read"],
                   mm_us_1=g1["metrics"][TIME] / 1e3, mm_us_8=g8["metrics"][TIME] / 1e3)
        out["mm_gain"] = out["mm_read_1"] / out["mm_read_8"]
        out["mm_model_gain"] = out["mm_model_1"] / out["mm_model_8"]
    for kind in ("full", "causal"):
        fa = rows.get(f"flash_{kind}")
        if fa:
            out[f"fa_{kind}"] = {"dram_read": fa["metrics"][DRAM_READ], "least": fa["model"]["least_read"],
                                 "asked": fa["model"]["loaded"], "standard": fa["model"]["standard_bytes"],
                                 "us": fa["metrics"][TIME] / 1e3}
    return out


HEADER = ("launch", "read, counted (MB)", "read, DRAM (MB)", "written, counted (MB)", "written, DRAM (MB)",
          "sectors x 32, counted (MB)", "sectors x 32, L2 (MB)", "time (us)")


def _cells(rows: list[dict]) -> list[list[str]]:
    """Per launch, the cells under :data:`HEADER`: bytes read and written, counted (or modelled) beside ncu's,
    and sectors: the interpreter's (loads and stores) beside the L2's (read and write requests from the SMs)."""
    def mb(x: float | None) -> str:
        return "" if x is None else f"{x / 1e6:,.1f}"

    out = []
    for r in rows:
        m = r.get("metrics", {})
        rd, wr = m.get(L2_READ), m.get(L2_WRITE)
        t = m.get(TIME)
        out.append([f"{r['label']}{' (model)' if 'model' in r else ''}", mb(r.get("expected_read")),
                    mb(m.get(DRAM_READ)), mb(r.get("expected_write")), mb(m.get(DRAM_WRITE)),
                    mb((r.get("interpreter") or {}).get("sector_bytes")),
                    mb(None if rd is None or wr is None else (rd + wr) * SECTOR),
                    "" if t is None else f"{t / 1e3:,.1f}"])
    return out


def table(rows: list[dict]) -> str:
    """The launches as a Markdown table (the script's ``ncu-traffic.md``)."""
    lines = ["| " + " | ".join(HEADER) + " |", "| --- |" + " ---: |" * (len(HEADER) - 1)]
    return "\n".join(lines + ["| " + " | ".join(cells) + " |" for cells in _cells(rows)])


def html_table(rows: list[dict]) -> str:
    """The launches as an HTML table (what a page shows; Markdown tables are not rendered from outputs)."""
    right = ' style="text-align:right"'
    head = "".join(f"<th>{html.escape(c)}</th>" for c in HEADER)
    body = "".join("<tr>" + "".join(f"<td{'' if i == 0 else right}>{html.escape(c)}</td>" for i, c in enumerate(cells))
                   + "</tr>" for cells in _cells(rows))
    return f'<table class="dlperf-table"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
