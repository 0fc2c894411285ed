"""The reading of a solution's cells: an allow-list, the same for the self-check and for the grader.

Some graded properties can only be observed in the process that runs the student's code (a count of
synchronisations, a graph Dynamo captured, the bytes Triton's interpreter saw).  Whatever the
counter, code in that process could reach it, so the grader also *reads* the cells, in a process the
student's code never runs in, and refuses every construct the exercise does not need.  The reading
is an **allow-list** (after RestrictedPython's model, without its run-time half): what is not named
by the exercise's :class:`Rules` is refused, so a spelling nobody thought of is refused too.

What :func:`read` checks, for every node of every cell:

* **node kinds**: ordinary Python only (no ``async``, no ``try/except*``, nothing newer than this
  reading knows);
* **imports**: only modules in ``Rules.imports`` (no relative or star import); ``from m import n``
  also needs ``m.n`` among the allowed names;
* **module-rooted names**: each maximal chain ``a.b.c`` whose root is an imported name is resolved
  through the import aliases (``tl.load`` -> ``triton.language.load``) and must be allowed as a
  whole (``Rules.names``; ``"m.*"`` allows ``m`` and every public name below it, checked by real
  resolution so that ``torch.nn.functional.torch`` does not pass as "below torch.nn"); a module is
  never used as a value (``t = torch`` would make ``t.anything`` an ordinary attribute), nothing is
  assigned to a module, and an imported name is not re-bound;
* **other names**: defined somewhere in the read cells, or an allowed builtin.  The grader loads
  only the cells that define the graded objects, so a helper defined in another cell is refused
  here, not found missing at grading time.  ``getattr``, ``setattr``, ``vars``, ``eval``, ``exec``,
  ``compile``, ``__import__``, ``globals``, ``locals``, ``open``, ``type``, ``object``... are never
  allowed: with them a name can be spelled as a string;
* **attributes of values** (locals, call results, subscripts): never a special name (``__x__``;
  ``super().__init__`` is allowed), never one that reaches frames or code (``gi_frame``, ``f_back``,
  ``f_globals``, ``tb_frame``, ``co_*``: :data:`NEVER_ATTRIBUTES`), never a private one (``_x``) except ``self._x`` inside a method
  of a class the cells define when those classes set or define ``_x``; and, when
  ``Rules.attributes`` is given, only those names and the names the cells' own classes define;
* **definitions**: decorators only from ``Rules.decorators``; classes only if ``Rules.classes``;
  special methods only those in ``Rules.dunders``; the body of a function decorated with a name in
  ``Rules.within`` is read with those rules instead (a Triton kernel's body: ``tl`` only).

Each finding names the cell, the line, the code and the rule.  The rules of an exercise are public
(its probe module), and its self-check runs :func:`reading_case` with the same rules, so a student
who passes the self-check is never refused at grading time.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import linecache
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

__all__ = ["DEFAULT_BUILTINS", "NEVER", "NEVER_ATTRIBUTES", "STANDARD_LIBRARY", "Rules", "cells_of", "findings_case",
           "read", "reading_case"]

# Builtins that spell a name as a string, reach objects' internals or the interpreter: never allowed.
NEVER = frozenset({"getattr", "setattr", "delattr", "hasattr", "vars", "dir", "globals", "locals", "eval", "exec",
                   "compile", "__import__", "open", "breakpoint", "input", "help", "type", "object", "memoryview",
                   "id", "exit", "quit", "classmethod_descriptor", "__build_class__", "__loader__", "__spec__",
                   "__builtins__"})

# Attributes that reach an interpreter's frames, code and tracebacks (RestrictedPython's INSPECT_ATTRIBUTES
# and their kind): from a generator's frame, f_back.f_globals is the globals of whatever called it.  They are
# public names, so an exercise that allows any attribute of values would allow them: never allowed.
NEVER_ATTRIBUTES = frozenset({"gi_frame", "gi_code", "gi_yieldfrom", "gi_running", "cr_frame", "cr_code",
                              "cr_await", "cr_origin", "ag_frame", "ag_code", "ag_await", "f_back", "f_globals",
                              "f_locals", "f_builtins", "f_code", "f_trace", "f_lasti", "tb_frame", "tb_next",
                              "tb_lasti", "func_globals", "func_code", "im_func", "im_self", "mro"})

DEFAULT_BUILTINS = frozenset({
    "abs", "all", "any", "bool", "dict", "divmod", "enumerate", "filter", "float", "frozenset", "int", "isinstance",
    "issubclass", "iter", "len", "list", "map", "max", "min", "next", "pow", "print", "range", "repr", "reversed",
    "round", "set", "slice", "sorted", "str", "sum", "tuple", "zip", "super", "property", "staticmethod",
    "classmethod", "callable", "hash", "format",
    "Exception", "ValueError", "TypeError", "RuntimeError", "AssertionError", "NotImplementedError", "IndexError",
    "KeyError", "ZeroDivisionError", "StopIteration", "ArithmeticError", "LookupError", "OverflowError",
    "NotImplemented", "Ellipsis"})

# Standard modules a solution may reasonably use, with the parts of them that cannot reach a name by its string.
STANDARD_LIBRARY = {
    "imports": frozenset({"math", "itertools", "functools", "collections", "operator", "dataclasses", "typing"}),
    "names": frozenset({"math.*", "itertools.*", "functools.reduce", "functools.partial", "functools.cache",
                        "functools.lru_cache", "functools.wraps", "collections.defaultdict", "collections.deque",
                        "collections.OrderedDict", "collections.Counter", "collections.namedtuple",
                        "operator.add", "operator.mul", "operator.sub", "operator.truediv", "operator.floordiv",
                        "operator.neg", "operator.iadd", "operator.imul", "operator.itemgetter",
                        "dataclasses.dataclass", "dataclasses.field",
                        # typing's type names only: typing.get_type_hints evaluates string annotations
                        *(f"typing.{n}" for n in ("Any", "Optional", "Union", "List", "Dict", "Tuple", "Set",
                                                  "FrozenSet", "Sequence", "Mapping", "Iterable", "Iterator",
                                                  "Callable", "NamedTuple", "Literal", "Deque", "DefaultDict"))}),
    "decorators": frozenset({"functools.cache", "functools.lru_cache", "functools.wraps", "dataclasses.dataclass"}),
}

_PLAIN_NODES = (
    ast.Module, ast.FunctionDef, ast.ClassDef, ast.Return, ast.Delete, ast.Assign, ast.AugAssign, ast.AnnAssign,
    ast.For, ast.While, ast.If, ast.With, ast.Raise, ast.Try, ast.Assert, ast.Import, ast.ImportFrom, ast.Global,
    ast.Nonlocal, ast.Expr, ast.Pass, ast.Break, ast.Continue, ast.BoolOp, ast.BinOp, ast.UnaryOp, ast.Lambda,
    ast.IfExp, ast.Dict, ast.Set, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Yield,
    ast.YieldFrom, ast.Compare, ast.Call, ast.FormattedValue, ast.JoinedStr, ast.Constant, ast.Attribute,
    ast.Subscript, ast.Starred, ast.Name, ast.List, ast.Tuple, ast.Slice, ast.NamedExpr,
    ast.expr_context, ast.boolop, ast.operator, ast.unaryop, ast.cmpop, ast.comprehension, ast.ExceptHandler,
    ast.arguments, ast.arg, ast.keyword, ast.alias, ast.withitem,
)


def _frozen(value: Iterable[str] | None) -> frozenset[str] | None:
    return None if value is None else frozenset(value)


@dataclass(frozen=True)
class Rules:
    """What an exercise's cells may use; everything else is refused (see the module's docstring)."""

    what: str = "your solution"
    imports: frozenset[str] = frozenset()
    names: frozenset[str] = frozenset()
    builtins: frozenset[str] = DEFAULT_BUILTINS
    attributes: frozenset[str] | None = None
    decorators: frozenset[str] = frozenset({"staticmethod", "classmethod", "property"})
    classes: bool = True
    dunders: frozenset[str] = frozenset({"__init__"})
    within: Mapping[str, Rules] = field(default_factory=dict)
    explain: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("imports", "names", "builtins", "decorators", "dunders"):
            object.__setattr__(self, name, frozenset(getattr(self, name)))
        object.__setattr__(self, "attributes", _frozen(self.attributes))
        object.__setattr__(self, "within", dict(self.within))
        object.__setattr__(self, "explain", dict(self.explain))

    def extended(self, **more: Any) -> Rules:
        """These rules with more allowed: set-valued fields are unions, the others replaced."""
        changes: dict[str, Any] = {}
        for key, value in more.items():
            current = getattr(self, key)
            if isinstance(current, frozenset) and value is not None:
                changes[key] = current | frozenset(value)
            elif isinstance(current, dict):
                changes[key] = {**current, **value}
            else:
                changes[key] = value
        return replace(self, **changes)


# ---------------------------------------------------------------------------------------------
# The cells that define objects
# ---------------------------------------------------------------------------------------------


def _defining_file(obj: Any) -> str:
    if not isinstance(obj, (types.FunctionType, types.MethodType, type)):
        obj = getattr(obj, "fn", obj)        # a @triton.jit function keeps the decorated one
    if isinstance(obj, (types.FunctionType, types.MethodType)):
        return inspect.unwrap(obj).__code__.co_filename
    if isinstance(obj, type):
        for value in vars(obj).values():
            if isinstance(value, (classmethod, staticmethod)):
                value = value.__func__
            if isinstance(value, property):
                value = value.fget
            if isinstance(value, types.FunctionType):
                return value.__code__.co_filename
        raise TypeError(f"class {obj.__name__} has no method, so the cell that defined it cannot be found")
    raise TypeError(f"{obj!r} is not a function or a class defined in the notebook")


def cells_of(*objects: Any) -> list[tuple[str, str]]:
    """``[(file name, source)]`` of the cells that define ``objects``, each once, in the order given.

    In a notebook each cell is compiled under a pseudo file name that IPython (or the check run)
    registers in :mod:`linecache`: the whole cell is the solution, imports and helpers included.
    """
    if not objects:
        raise ValueError("name the function(s) or class(es) of the solution")
    parts: list[tuple[str, str]] = []
    for obj in objects:
        filename = _defining_file(obj)
        if any(filename == f for f, _ in parts):
            continue
        lines = linecache.getlines(filename)
        if not lines:
            raise ValueError(f"the source of {filename} cannot be found: define the solution in a notebook cell")
        parts.append((filename, "".join(lines)))
    return parts


# ---------------------------------------------------------------------------------------------
# The reading
# ---------------------------------------------------------------------------------------------


def _is_special(name: str) -> bool:
    return name.startswith("__") and name.endswith("__") and len(name) > 4


def _chain(node: ast.AST) -> tuple[ast.AST, list[str]]:
    """The root of an attribute chain and the attribute names from it outwards."""
    attrs: list[str] = []
    while isinstance(node, ast.Attribute):
        attrs.append(node.attr)
        node = node.value
    return node, attrs[::-1]


def _resolves_within(path: str, prefix: str) -> bool:
    """Whether following ``path`` attribute by attribute from its root module never leaves ``prefix``:
    every module met on the way is the module of that name (no ``torch.nn.functional.torch``)."""
    parts = path.split(".")
    try:
        obj: Any = importlib.import_module(parts[0])
    except Exception:  # noqa: BLE001 - an unknown module resolves to nothing
        return False
    so_far = parts[0]
    for part in parts[1:]:
        so_far = f"{so_far}.{part}"
        try:
            obj = getattr(obj, part)
        except AttributeError:
            try:
                obj = importlib.import_module(so_far)
            except Exception:  # noqa: BLE001
                return False
        if isinstance(obj, types.ModuleType) and obj.__name__ != so_far:
            return False
    return True


def _is_module(path: str) -> bool:
    try:
        importlib.import_module(path)
        return True
    except Exception:  # noqa: BLE001
        return False


class _Class:
    """What the cells' classes define: method and attribute names (private ones allowed on ``self``)."""

    def __init__(self, trees: Sequence[ast.Module]):
        self.names: set[str] = set()
        for tree in trees:
            for node in ast.walk(tree):
                if not isinstance(node, ast.ClassDef):
                    continue
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        self.names.add(item.name)
                    elif isinstance(item, (ast.Assign, ast.AnnAssign)):
                        targets = item.targets if isinstance(item, ast.Assign) else [item.target]
                        self.names.update(t.id for t in targets if isinstance(t, ast.Name))
                for sub in ast.walk(node):
                    if isinstance(sub, ast.FunctionDef) and sub.args.args:
                        me = sub.args.args[0].arg
                        for inner in ast.walk(sub):
                            if (isinstance(inner, ast.Attribute) and isinstance(inner.ctx, ast.Store)
                                    and isinstance(inner.value, ast.Name) and inner.value.id == me):
                                self.names.add(inner.attr)


class _Reader:
    def __init__(self, parts: Sequence[tuple[str, str]], rules: Rules):
        self.rules = rules
        self.found: list[str] = []
        self.cells: list[tuple[str, ast.Module, list[str]]] = []
        for number, (_, source) in enumerate(parts, 1):
            where = f"cell {number}" if len(parts) > 1 else "your cell"
            try:
                tree = ast.parse(source)
            except SyntaxError as exc:
                self.found.append(f"{where} does not parse: {exc.msg} (line {exc.lineno})")
                continue
            for node in ast.walk(tree):
                for child in ast.iter_child_nodes(node):
                    child._parent = node  # type: ignore[attr-defined]
            self.cells.append((where, tree, source.splitlines()))
        self.classes = _Class([t for _, t, _ in self.cells])
        self.aliases: dict[str, str] = {}     # a name bound by an import -> the dotted path it stands for
        self.conflicts: set[str] = set()      # names that imports bind to two different paths
        self.bound: set[str] = set()          # every other name the cells bind
        for _, tree, _ in self.cells:
            self._bindings(tree)
        roots = {m.split(".")[0] for r in [rules, *rules.within.values()] for m in r.imports}
        # Only modules an import may name are ever imported here (a student's name is never imported).
        self.modules = {name: path.split(".")[0] in roots and _is_module(path) for name, path in self.aliases.items()}
        self.roots = roots
        self.where = ""
        self.lines: list[str] = []

    # -- what the cells bind ------------------------------------------------------------------------

    def _alias(self, name: str, path: str) -> None:
        if self.aliases.get(name, path) != path:
            self.conflicts.add(name)
        self.aliases[name] = path

    def _bindings(self, tree: ast.Module) -> None:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        self._alias(a.asname, a.name)
                    else:
                        self._alias(a.name.split(".")[0], a.name.split(".")[0])
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    if a.name != "*":
                        self._alias(a.asname or a.name, f"{node.module}.{a.name}")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.bound.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                self.bound.add(node.id)
            elif isinstance(node, ast.arg):
                self.bound.add(node.arg)
            elif isinstance(node, ast.ExceptHandler) and node.name:
                self.bound.add(node.name)
            elif isinstance(node, (ast.Global, ast.Nonlocal)):
                self.bound.update(node.names)

    # -- findings -------------------------------------------------------------------------------------

    def add(self, node: ast.AST, what: str) -> None:
        line = getattr(node, "lineno", 0)
        text = self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""
        sentence = f"{self.where}, line {line} (`{text[:70]}`): {what}"
        if sentence not in self.found:
            self.found.append(sentence)

    def allowed(self, path: str, rules: Rules) -> bool:
        if path in rules.imports or path in rules.names:
            return True
        for name in rules.names:
            if name.endswith(".*"):
                prefix = name[:-2]
                if path == prefix or (path.startswith(prefix + ".") and not any(
                        p.startswith("_") for p in path[len(prefix) + 1:].split("."))):
                    return _resolves_within(path, prefix)
        return False

    def refuse_name(self, node: ast.AST, path: str, rules: Rules) -> None:
        why = rules.explain.get(path)
        if why is None:
            why = next((text for name, text in rules.explain.items() if path.startswith(name + ".")), None)
        if why:
            self.add(node, f"uses {path}: {why}")
        else:
            self.add(node, f"uses {path}, which is not among the names the rules of {rules.what} allow")

    # -- the walk -------------------------------------------------------------------------------------

    def run(self) -> list[str]:
        for where, tree, lines in self.cells:
            self.where, self.lines = where, lines
            for node in tree.body:
                self.visit(node, self.rules, None)
        return self.found

    def visit(self, node: ast.AST, rules: Rules, method_of: ast.ClassDef | None, me: str | None = None) -> None:
        if not isinstance(node, _PLAIN_NODES):
            self.add(node, f"uses {type(node).__name__} (ordinary Python statements and expressions only)")
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                name = a.asname or (a.name.split(".")[0] if isinstance(node, ast.Import) else a.name)
                if name in self.conflicts:
                    self.add(node, f"binds {name} to two different things by imports (one name, one meaning)")
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name not in rules.imports:
                    self.add(node, rules.explain.get(a.name) and f"imports {a.name}: {rules.explain[a.name]}"
                             or f"imports {a.name} (the rules of {rules.what} allow importing only "
                                f"{', '.join(sorted(rules.imports)) or 'nothing'})")
            return
        if isinstance(node, ast.ImportFrom):
            if node.level or not node.module:
                self.add(node, "a relative import (import the allowed modules by name)")
                return
            if node.module not in rules.imports:
                self.add(node, rules.explain.get(node.module) and
                         f"imports from {node.module}: {rules.explain[node.module]}" or
                         f"imports from {node.module} (the rules of {rules.what} allow importing only "
                         f"{', '.join(sorted(rules.imports)) or 'nothing'})")
                return
            for a in node.names:
                if a.name == "*":
                    self.add(node, "a star import (name what you import)")
                elif _is_special(a.name) or a.name.startswith("_") and f"{node.module}.{a.name}" not in rules.names:
                    self.add(node, f"imports the private name {node.module}.{a.name}")
                elif not self.allowed(f"{node.module}.{a.name}", rules):
                    self.refuse_name(node, f"{node.module}.{a.name}", rules)
            return
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            self.definition(node, rules, method_of, me)
            return
        if isinstance(node, ast.Attribute):
            self.attribute(node, rules, me)
            return
        if isinstance(node, ast.Name):
            self.name(node, rules)
            return
        if isinstance(node, ast.Lambda):     # a lambda cannot re-bind the method's object: it keeps ``me``...
            args = node.args
            if me in {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
                      if a is not None}:
                me = None                      # ...unless a parameter of its own takes the name
            for child in ast.iter_child_nodes(node):
                self.visit(child, rules, None, me)
            return
        for child in ast.iter_child_nodes(node):
            self.visit(child, rules, method_of, me)

    def definition(self, node: ast.FunctionDef | ast.ClassDef, rules: Rules, method_of: ast.ClassDef | None,
                   me: str | None = None) -> None:
        """``method_of``: the class whose body holds ``node`` directly; ``me``: an enclosing method's object."""
        inner = rules
        for decorator in node.decorator_list:
            target = decorator.func if isinstance(decorator, ast.Call) else decorator
            root, attrs = _chain(target)
            path = ""
            if isinstance(root, ast.Name):
                path = ".".join([self.aliases.get(root.id, root.id), *attrs])
            if path in rules.within:
                inner = rules.within[path]
            elif path not in rules.decorators:
                self.add(decorator, f"decorates {node.name} with {path or 'an expression'} (the rules of "
                                    f"{rules.what} allow only {', '.join(sorted(rules.decorators)) or 'none'})")
                continue
            if isinstance(decorator, ast.Call):
                for child in [*decorator.args, *decorator.keywords]:
                    self.visit(child, rules, None, me)
        if isinstance(node, ast.ClassDef):
            if not rules.classes:
                self.add(node, f"defines the class {node.name} (the rules of {rules.what} need no class)")
            for child in [*node.bases, *node.keywords]:
                self.visit(child, rules, None)
            for item in node.body:
                self.visit(item, rules, node, None)
            return
        if _is_special(node.name) and (method_of is None or node.name not in rules.dunders):
            self.add(node, f"defines the special method {node.name} (allowed: {', '.join(sorted(rules.dunders))}, "
                           "in a class)")
        if method_of is not None:
            me = node.args.args[0].arg if node.args.args else None
        if me is not None and any(isinstance(n, ast.Name) and n.id == me and isinstance(n.ctx, (ast.Store, ast.Del))
                                  for n in ast.walk(node)):
            self.add(node, f"re-binds {me}, the method's own object")
            me = None
        for child in [node.args, *node.body, *([node.returns] if node.returns else [])]:
            self.visit(child, inner, None, me)

    def name(self, node: ast.Name, rules: Rules) -> None:
        name = node.id
        if name in self.aliases:
            if not isinstance(node.ctx, ast.Load):
                self.add(node, f"re-binds {name}, a name your imports bound")
            elif self.modules.get(name) and not isinstance(getattr(node, "_parent", None), ast.Attribute):
                self.add(node, f"uses the module {self.aliases[name]} as a value (use its names directly)")
            elif not isinstance(getattr(node, "_parent", None), ast.Attribute):
                path = self.aliases[name]
                if not self.allowed(path, rules):
                    self.refuse_name(node, path, rules)
            return
        if _is_special(name):
            self.add(node, f"uses {name} (special names are not needed here)")
        elif name in self.bound:
            return
        elif name in NEVER:
            self.add(node, f"uses {name}() (never allowed: it can reach a name spelled as a string)")
        elif name in rules.builtins:
            return
        elif hasattr(builtins, name):
            self.add(node, f"uses the builtin {name}, which the rules of {rules.what} do not allow")
        else:
            self.add(node, f"uses {name}, which these cells do not define (the grader runs only the cells that "
                           f"define {rules.what}: define or import {name} in them)")

    def attribute(self, node: ast.Attribute, rules: Rules, me: str | None) -> None:
        parent = getattr(node, "_parent", None)
        if isinstance(parent, ast.Attribute) and parent.value is node:
            return                                  # judged with the longest chain it belongs to
        root, attrs = _chain(node)
        if isinstance(root, ast.Name) and root.id in self.aliases:
            path = ".".join([self.aliases[root.id], *attrs])
            if not isinstance(node.ctx, ast.Load):
                self.add(node, f"assigns to {path} (nothing of a library is changed here)")
            elif any(_is_special(a) for a in attrs):
                self.add(node, f"uses {path} (special attributes are not needed here)")
            elif any(a.startswith("_") for a in attrs) and path not in rules.names:
                self.add(node, f"uses {path} (a private name of the library)")
            elif not self.allowed(path, rules):
                self.refuse_name(node, path, rules)
            elif path.split(".")[0] in self.roots and _is_module(path) and not isinstance(parent, ast.Attribute):
                self.add(node, f"uses the module {path} as a value (use its names directly)")
            return
        self.visit(root, rules, None, me)
        value = root
        for attr in attrs:
            if attr == "__init__" and isinstance(value, ast.Call) and isinstance(value.func, ast.Name) \
                    and value.func.id == "super":
                pass
            elif _is_special(attr):
                self.add(node, f"uses the special attribute .{attr} (not needed here)")
            elif attr in NEVER_ATTRIBUTES or attr.startswith("co_"):
                self.add(node, f"uses .{attr}, which reaches the interpreter's frames or code (never allowed)")
            elif attr.startswith("_"):
                if not (me is not None and value is root and isinstance(root, ast.Name) and root.id == me
                        and attr in self.classes.names):
                    self.add(node, f"uses the private attribute .{attr} (allowed only on self, for attributes "
                                   "your own class sets)")
            elif rules.attributes is not None and attr not in rules.attributes and attr not in self.classes.names:
                why = rules.explain.get(f".{attr}")
                self.add(node, f"uses .{attr}: {why}" if why else
                         f"uses .{attr} (the rules of {rules.what} allow only "
                         f"{', '.join('.' + a for a in sorted(rules.attributes))} on values)")
            value = ast.Attribute(value=value, attr=attr)   # only its identity matters below


def read(parts: Sequence[tuple[str, str]], rules: Rules) -> list[str]:
    """What the cells ``parts`` (``[(file name, source)]``) use that ``rules`` do not allow, each as a
    sentence naming the cell, the line, the code and the rule; ``[]`` when nothing is refused.
    The source is parsed, never run."""
    return _Reader(parts, rules).run()


def findings_case(find: Callable[[], Sequence[str]]) -> Callable[[], tuple[Any, Any, bool]]:
    """A :class:`~dlperf.grading.SelfCheck` case from any reading: ``find()`` returns its findings (an exercise
    with a rule of its own beside :func:`read` passes the same function its checker calls); they are printed
    in full above the table."""
    def case() -> tuple[Any, Any, bool]:
        found = list(find())
        if found:
            print(f"The grader's reading of your cells refuses {len(found)} thing(s):")
            for sentence in found:
                print("  - " + sentence)
            return f"{len(found)} refused (listed above)", "nothing refused", False
        return "nothing refused", "nothing refused", True
    return case


def reading_case(rules: Rules, *objects: Any) -> Callable[[], tuple[Any, Any, bool]]:
    """A :class:`~dlperf.grading.SelfCheck` case: the grader's reading of the cells that define ``objects``.

    ``check.run("the grader's reading of your cells", reading_case(RULES, f, g))``.
    """
    return findings_case(lambda: read(cells_of(*objects), rules))
