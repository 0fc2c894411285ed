"""List every torch / triton / numpy attribute path the project uses and check that each resolves here.

The GPU image ships other versions of torch, triton and numpy than the machine the
course is written on; a name new in one version (``torch.distributed.all_gather_single``
is new in 2.13) fails there only when the line runs.  This script reads the sources
(dlperf/, autograder/, scripts/, the book's code cells, the solutions' code cells),
collects with ``ast`` each import of a module under torch, triton or numpy and each
pure attribute chain rooted at such an import's name (``dist.all_gather_single`` with
``import torch.distributed as dist`` is ``torch.distributed.all_gather_single``), and
resolves each path in the running interpreter: the longest importable module prefix,
then ``getattr`` for the rest.

A use is *guarded* where the code expects the name may be absent: the chain is an
argument of ``hasattr`` or of ``getattr`` with a default, ``getattr(x, "name", None)``
and ``hasattr(x, "name")`` themselves, the body of an ``if`` whose test probes the
name that way, and the body of a ``try`` whose handlers catch AttributeError or
ImportError.  A path that does not resolve and is used only guarded is reported as
guarded, not as a failure.

Usage: ``python scripts/api_names.py [--root DIR] [--json FILE] [--strict]``
(standard library plus the checked packages only; exit 1 with --strict on a failure).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import re
import sys
from pathlib import Path

ROOTS = ("torch", "triton", "numpy")
GUARD_ERRORS = {"AttributeError", "ImportError", "ModuleNotFoundError"}
CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def clean(code: str) -> str:
    """A notebook cell as Python: MyST options, front matter and IPython magics become blank / pass lines."""
    lines = code.split("\n")
    if lines and lines[0].strip() == "---":  # MyST YAML options block
        end = next((i for i in range(1, len(lines)) if lines[i].strip() == "---"), 0)
        lines[: end + 1] = [""] * (end + 1)
    out = []
    for i, line in enumerate(lines):
        stripped = line.lstrip()
        if stripped.startswith(("%", "!")):
            line = line[: len(line) - len(stripped)] + "pass"
        elif stripped.startswith(":") and all(not x.strip() or x.lstrip().startswith(":") for x in lines[:i]):
            line = ""  # ':tags: [...]' option lines at the top of a cell
        out.append(line)
    return "\n".join(out)


def sources(root: Path):
    """(file, [(where, first line, code), ...]) for every Python text the project runs: files and notebooks."""
    for pattern in ("dlperf/**/*.py", "autograder/**/*.py", "scripts/*.py"):
        for path in sorted(root.glob(pattern)):
            name = str(path.relative_to(root))
            yield name, [(name, 1, path.read_text(encoding="utf-8", errors="replace"))]
    for path in sorted(root.glob("book/*.md")):
        text, name = path.read_text(encoding="utf-8", errors="replace"), str(path.relative_to(root))
        yield name, [(name, text.count("\n", 0, m.start(1)) + 1, clean(m.group(1))) for m in CELL.finditer(text)]
    for path in sorted(root.glob("solutions/**/*.ipynb")):
        try:
            cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        except (ValueError, KeyError):
            continue
        name, found = str(path.relative_to(root)), []
        for n, cell in enumerate(cells):
            if cell.get("cell_type") == "code":
                src = cell.get("source", "")
                found.append((f"{name}:cell{n}", 1, clean("".join(src) if isinstance(src, list) else src)))
        yield name, found


def chain(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """The dotted path of a pure attribute chain (or name) rooted at an alias; None otherwise."""
    attrs = []
    while isinstance(node, ast.Attribute):
        attrs.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id in aliases:
        return ".".join([aliases[node.id], *reversed(attrs)])
    return None


def probe(call: ast.AST, aliases: dict[str, str]) -> tuple[str | None, bool]:
    """For hasattr(x, "n") / getattr(x, "n"[, default]): the path x.n and whether the call expects it absent."""
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in ("hasattr", "getattr")):
        return None, False
    if len(call.args) < 2 or not (isinstance(call.args[1], ast.Constant) and isinstance(call.args[1].value, str)):
        return None, False
    base = chain(call.args[0], aliases)
    guarded = call.func.id == "hasattr" or len(call.args) > 2
    return (f"{base}.{call.args[1].value}" if base else None), guarded


def catches_missing(handler: ast.ExceptHandler) -> bool:
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(t, ast.Name) and t.id in GUARD_ERRORS for t in types)


def is_guarded(node: ast.AST, path: str, parents: dict, aliases: dict[str, str]) -> bool:
    child, parent = node, parents.get(node)
    while parent is not None:
        if isinstance(parent, ast.Call) and child in parent.args and probe(parent, aliases)[1]:
            return True
        if isinstance(parent, (ast.Try, getattr(ast, "TryStar", ast.Try))) and child in parent.body:
            if any(catches_missing(h) for h in parent.handlers):
                return True
        if isinstance(parent, (ast.If, ast.IfExp)) and (child in parent.body if isinstance(parent, ast.If) else child is parent.body):
            probed = [probe(c, aliases) for c in ast.walk(parent.test)]
            if any(p and g and (path == p or path.startswith(p + ".")) for p, g in probed):
                return True
        child, parent = parent, parents.get(parent)
    return False


def aliases_of(tree: ast.AST, aliases: dict[str, str]) -> list[tuple[ast.AST, str]]:
    """Add the names bound by imports under ROOTS to aliases; return (node, imported path) per import."""
    imports = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in ROOTS:
                    aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
                    imports.append((node, a.name))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.split(".")[0] in ROOTS:
            imports.append((node, node.module))
            for a in node.names:
                if a.name != "*":
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
                    imports.append((node, f"{node.module}.{a.name}"))
    return imports


def collect(texts: list[tuple[str, int, str]], found: dict, skipped: list) -> None:
    """Add {path: [(use, guarded), ...]} for one file (a notebook's cells share their imports)."""
    trees, aliases = [], {}
    for where, first, code in texts:
        try:
            trees.append((where, first, ast.parse(code)))
        except (SyntaxError, ValueError):
            skipped.append(f"{where}:{first}")
    imports = {id(t): aliases_of(t, aliases) for _, _, t in trees}
    for where, first, tree in trees:
        parents = {c: p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
        uses = [(node, path, False) for node, path in imports[id(tree)]]
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and not isinstance(parents.get(node), ast.Attribute):
                target = node.value if isinstance(node.ctx, (ast.Store, ast.Del)) else node  # torch.x = ... sets x
                path = chain(target, aliases)
                if path:
                    uses.append((node, path, False))
            elif isinstance(node, ast.Call):
                path, expects_absent = probe(node, aliases)
                if path:
                    uses.append((node, path, expects_absent))
        for node, path, expects_absent in uses:
            guarded = expects_absent or is_guarded(node, path, parents, aliases)
            found.setdefault(path, []).append((f"{where}:{first + node.lineno - 1}", guarded))


def resolve(path: str, cache: dict = {}) -> str | None:
    """None if the path resolves here; else the prefix where it first fails."""
    parts = path.split(".")
    obj, i = None, len(parts)
    while i > 0:
        name = ".".join(parts[:i])
        if name not in cache:
            try:
                cache[name] = importlib.import_module(name)
            except Exception:  # not a module (or one that does not import here)
                cache[name] = None
        if cache[name] is not None:
            obj = cache[name]
            break
        i -= 1
    if obj is None:
        return parts[0]
    for j in range(i, len(parts)):
        try:
            obj = getattr(obj, parts[j])
        except Exception:
            return ".".join(parts[: j + 1])
    return None


def versions() -> dict[str, str]:
    found = {"python": sys.version.split()[0]}
    for name in ROOTS:
        try:
            found[name] = importlib.import_module(name).__version__
        except Exception as error:
            found[name] = f"not importable ({type(error).__name__})"
    return found


def check(root: Path) -> dict:
    found: dict[str, list] = {}
    skipped = []
    for _, texts in sources(root):
        collect(texts, found, skipped)
    have = versions()
    paths = {}
    for path in sorted(found):
        checkable = not have[path.split(".")[0]].startswith("not importable")
        fails_at = resolve(path) if checkable else None
        uses = found[path]
        paths[path] = {
            "resolves": checkable and fails_at is None,
            "checked": checkable,
            "fails_at": fails_at,
            "guarded": all(g for _, g in uses),
            "uses": [u + (" (guarded)" if g else "") for u, g in uses],
        }
    return {"versions": have, "skipped": skipped, "paths": paths}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--json", type=Path, help="write {versions, paths: {path: {resolves, uses, ...}}} here")
    parser.add_argument("--strict", action="store_true", help="exit 1 if any unguarded path does not resolve (here, "
                        "or on the GPU image by --image)")
    parser.add_argument("--image", type=Path, default=IMAGE_RECORD,
                        help="what a run on the GPU image found (default scripts/gpu_image_api.json): a path it lacked "
                        "and used here without a guard is reported, without a GPU")
    parser.add_argument("--record-image", nargs=2, type=Path, metavar=("REPORT", "OUT"),
                        help="turn a --json report made on the GPU image into the record --image reads, and stop")
    args = parser.parse_args(argv)
    if args.record_image:
        made = json.loads(args.record_image[0].read_text())
        record = {"versions": made["versions"],
                  "resolved": sorted(p for p, e in made["paths"].items() if e["checked"] and e["resolves"]),
                  "absent": {p: e["fails_at"] for p, e in made["paths"].items() if e["checked"] and not e["resolves"]}}
        args.record_image[1].write_text(json.dumps(record, indent=1) + "\n")
        print(f"recorded {len(record['resolved'])} names the image has and {len(record['absent'])} it lacks "
              f"({', '.join(f'{k} {v}' for k, v in record['versions'].items())}) in {args.record_image[1]}")
        return 0
    report = check(args.root)
    paths = report["paths"]
    print("versions:", ", ".join(f"{k} {v}" for k, v in report["versions"].items()))
    unchecked = [p for p, e in paths.items() if not e["checked"]]
    print(f"{len(paths)} paths checked ({len(unchecked)} unchecked: package not importable); "
          f"{len(report['skipped'])} cells/files skipped (not Python)")
    bad = {p: e for p, e in paths.items() if e["checked"] and not e["resolves"]}
    failing = {p: e for p, e in bad.items() if not e["guarded"]}
    for title, group in (("DOES NOT RESOLVE", failing), ("guarded (absent here, every use expects that)", {p: e for p, e in bad.items() if e["guarded"]})):
        print(f"{title}: {len(group)}")
        for path, entry in group.items():
            print(f"  {path}  (fails at {entry['fails_at']})")
            for use in entry["uses"]:
                print(f"      {use}")
    drift = image_drift(paths, args.image)
    if drift is not None:
        missing, unconfirmed, seen = drift
        print(f"on the GPU image ({seen}): {len(missing)} path(s) it lacks used without a guard; "
              f"{len(unconfirmed)} used here that no run there has checked yet")
        for path in missing:
            print(f"  LACKING ON THE GPU IMAGE: {path}")
            for use in paths[path]["uses"]:
                print(f"      {use}")
        failing = {**failing, **{p: paths[p] for p in missing}}
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 1 if args.strict and failing else 0


IMAGE_RECORD = Path(__file__).resolve().parent / "gpu_image_api.json"


def image_drift(paths: dict, record_path: Path | None) -> tuple[list[str], list[str], str] | None:
    """Against a record of the GPU image (``--record-image``): the paths used here, unguarded, that the image
    lacks; and the paths used here that no run on the image has checked.  None without a record."""
    if record_path is None or not record_path.is_file():
        return None
    record = json.loads(record_path.read_text())
    absent, resolved = set(record["absent"]), set(record["resolved"])
    missing = sorted(p for p, e in paths.items() if p in absent and not e["guarded"])
    unconfirmed = sorted(p for p in paths if p not in absent and p not in resolved)
    seen = ", ".join(f"{k} {v}" for k, v in record["versions"].items())
    return missing, unconfirmed, seen


if __name__ == "__main__":
    sys.exit(main())
