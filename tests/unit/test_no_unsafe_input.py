"""Input is never evaluated or unpickled: a static check of every module of planner/ and hardware_catalog/.

The check reads the source with ``ast`` (nothing is imported) and refuses:

* any reference to the builtins ``eval``, ``exec`` and ``compile`` (a call, or an alias such as
  ``run = eval``), also through ``builtins``;
* importing ``pickle``, ``_pickle``, ``cPickle``, ``cloudpickle``, ``dill``, ``marshal`` or ``shelve``,
  also through ``__import__`` or ``importlib.import_module`` with a literal name;
* ``yaml.full_load``/``yaml.unsafe_load`` (and their ``_all`` forms), any use of ``yaml.Loader``,
  ``FullLoader``, ``UnsafeLoader`` or their C variants, and ``yaml.load``/``yaml.load_all`` unless
  ``Loader`` is ``yaml.SafeLoader``, ``yaml.CSafeLoader``, ``yaml.BaseLoader``, ``yaml.CBaseLoader``
  or a class of the same module derived from one of them (``yaml.safe_load`` is fine);
* ``numpy.load`` unless ``allow_pickle`` is absent or the literal ``False``;
* ``subprocess`` calls unless ``shell`` is absent or the literal ``False``, and the functions that
  always use a shell (``os.system``, ``os.popen``, ``subprocess.getoutput``/``getstatusoutput``,
  ``asyncio.create_subprocess_shell``).

What cannot be verified statically (a ``Loader`` held in a variable, ``**kwargs`` passed to
``numpy.load``, ``shell=flag``) is refused too: rewrite it so the check can read it. A local name
that shadows a builtin (a parameter called ``compile``) is reported as well; rename it.
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: the packages whose every module is checked
PACKAGES = ("planner", "hardware_catalog")

_EVALUATING_BUILTINS = frozenset({"eval", "exec", "compile"})
_FORBIDDEN_MODULES = frozenset({"pickle", "_pickle", "cPickle", "cloudpickle", "dill", "marshal", "shelve"})
_SAFE_YAML_LOADERS = frozenset({"yaml.SafeLoader", "yaml.CSafeLoader", "yaml.BaseLoader", "yaml.CBaseLoader"})
_UNSAFE_YAML_LOADERS = frozenset({
    "yaml.Loader", "yaml.FullLoader", "yaml.UnsafeLoader", "yaml.CLoader", "yaml.CFullLoader",
    "yaml.CUnsafeLoader",
})
#: dotted name -> why any use of it is refused
_FORBIDDEN_REFERENCES: dict[str, str] = {
    **{f"builtins.{name}": f"{name}() evaluates code" for name in _EVALUATING_BUILTINS},
    **{name: f"{name} constructs arbitrary Python objects" for name in _UNSAFE_YAML_LOADERS},
    **{f"yaml.{name}": f"yaml.{name} constructs arbitrary Python objects (use yaml.safe_load)"
       for name in ("full_load", "full_load_all", "unsafe_load", "unsafe_load_all")},
    **{name: f"{name} runs a shell" for name in (
        "os.system", "os.popen", "subprocess.getoutput", "subprocess.getstatusoutput",
        "asyncio.create_subprocess_shell")},
}
_SUBPROCESS_CALLS = frozenset(
    f"subprocess.{name}" for name in ("run", "call", "check_call", "check_output", "Popen")
)
#: 0-based position of ``shell`` in ``subprocess.Popen(args, bufsize, executable, stdin, stdout, stderr,
#: preexec_fn, close_fds, shell, ...)`` (``run`` and friends pass their positional arguments on)
_SHELL_POSITION = 8
#: 0-based position of ``allow_pickle`` in ``numpy.load(file, mmap_mode, allow_pickle, ...)``
_ALLOW_PICKLE_POSITION = 2


@dataclass(frozen=True, kw_only=True)
class Finding:
    """One refused construct: where it is and why."""

    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}"


def _dotted(node: ast.expr) -> str | None:
    """``a.b.c`` of a Name/Attribute chain, None for anything else (a call, a subscript)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def _is_false(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is False


class _Checker(ast.NodeVisitor):
    """Collects the findings of one module (see the module docstring for the rules)."""

    def __init__(self, tree: ast.Module, file: str) -> None:
        self.file = file
        self.findings: list[Finding] = []
        #: local name -> the dotted name it was imported as (``np`` -> ``numpy``, ``load`` -> ``yaml.load``)
        self.imported: dict[str, str] = {}
        #: class name -> dotted names of its bases, for every class of the module
        self.classes: dict[str, list[str]] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self.imported[alias.asname] = alias.name
                    else:
                        head = alias.name.split(".")[0]
                        self.imported[head] = head
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    self.imported[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                self.classes[node.name] = [self.qualified(base) or "" for base in node.bases]

    # ---- helpers ---------------------------------------------------------------------------------
    def report(self, node: ast.AST, message: str) -> None:
        self.findings.append(Finding(file=self.file, line=getattr(node, "lineno", 0), message=message))

    def qualified(self, node: ast.expr) -> str | None:
        """The dotted name ``node`` refers to, imports resolved; a bare builtin as ``builtins.<name>``."""
        dotted = _dotted(node)
        if dotted is None:
            return None
        head, dot, rest = dotted.partition(".")
        if head in self.imported:
            return self.imported[head] + dot + rest
        if not dot and head in _EVALUATING_BUILTINS:
            return f"builtins.{head}"
        return dotted

    def safe_yaml_loader(self, name: str, seen: frozenset[str] = frozenset()) -> bool:
        if name in _SAFE_YAML_LOADERS:
            return True
        if name not in self.classes or name in seen:
            return False
        return any(self.safe_yaml_loader(base, seen | {name}) for base in self.classes[name])

    @staticmethod
    def argument(call: ast.Call, keyword: str, position: int) -> tuple[bool, ast.expr | None]:
        """``(given, value)`` of one argument; ``value`` None when it might hide in ``*args``/``**kwargs``."""
        for item in call.keywords:
            if item.arg == keyword:
                return True, item.value
        before = call.args[: position + 1]
        if len(call.args) > position and not any(isinstance(a, ast.Starred) for a in before):
            return True, call.args[position]
        hidden = any(item.arg is None for item in call.keywords) or any(
            isinstance(a, ast.Starred) for a in call.args
        )
        return hidden, None

    # ---- imports ---------------------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name.split(".")[0] in _FORBIDDEN_MODULES:
                self.report(node, f"imports {alias.name}, which deserializes arbitrary objects")
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module and not node.level:
            if node.module.split(".")[0] in _FORBIDDEN_MODULES:
                self.report(node, f"imports from {node.module}, which deserializes arbitrary objects")
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                if name in _FORBIDDEN_REFERENCES:
                    self.report(node, f"imports {name}: {_FORBIDDEN_REFERENCES[name]}")
        self.generic_visit(node)

    # ---- references ------------------------------------------------------------------------------
    def visit_Name(self, node: ast.Name) -> None:
        self.check_reference(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self.check_reference(node)
        self.generic_visit(node)

    def check_reference(self, node: ast.Name | ast.Attribute) -> None:
        name = self.qualified(node)
        if name in _FORBIDDEN_REFERENCES:
            self.report(node, f"uses {name}: {_FORBIDDEN_REFERENCES[name]}")

    # ---- calls -----------------------------------------------------------------------------------
    def visit_Call(self, node: ast.Call) -> None:
        name = self.qualified(node.func)
        if name in ("__import__", "importlib.import_module", "importlib.__import__"):
            target = node.args[0] if node.args else None
            if isinstance(target, ast.Constant) and isinstance(target.value, str) \
                    and target.value.split(".")[0] in _FORBIDDEN_MODULES:
                self.report(node, f"imports {target.value}, which deserializes arbitrary objects")
        elif name in ("yaml.load", "yaml.load_all"):
            self.check_yaml_load(node, name)
        elif name == "numpy.load":
            given, value = self.argument(node, "allow_pickle", _ALLOW_PICKLE_POSITION)
            if given and (value is None or not _is_false(value)):
                self.report(node, "numpy.load with allow_pickle not the literal False unpickles its input")
        elif name in _SUBPROCESS_CALLS:
            given, value = self.argument(node, "shell", _SHELL_POSITION)
            if given and (value is None or not _is_false(value)):
                self.report(node, f"{name} with shell not the literal False runs a shell")
        self.generic_visit(node)

    def check_yaml_load(self, node: ast.Call, name: str) -> None:
        given, value = self.argument(node, "Loader", 1)
        if not given:
            self.report(node, f"{name} without a Loader (use yaml.safe_load)")
            return
        loader = None if value is None else self.qualified(value)
        if loader in _UNSAFE_YAML_LOADERS:
            return  # reported as a reference
        if loader is None or not self.safe_yaml_loader(loader):
            shown = loader or "an expression"
            self.report(node, f"{name} with Loader={shown}, not verifiably a yaml.SafeLoader (sub)class")


def find_unsafe(source: str, file: str = "<string>") -> list[Finding]:
    """Every refused construct of one module's source, in line order."""
    tree = ast.parse(source, filename=file)
    checker = _Checker(tree, file)
    checker.visit(tree)
    return sorted(checker.findings, key=lambda finding: (finding.line, finding.message))


def _modules() -> list[Path]:
    return sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))


# ------------------------------------------------------------------------------------------------
# The code base
# ------------------------------------------------------------------------------------------------
def test_no_module_evaluates_or_unpickles_input():
    modules = _modules()
    # the walk reached the code: the modules that parse requests and catalogs are among them
    names = {path.relative_to(ROOT).as_posix() for path in modules}
    assert {"planner/cli.py", "planner/hardware.py", "planner/models.py"} <= names
    findings = [
        finding
        for path in modules
        for finding in find_unsafe(path.read_text(encoding="utf-8"), path.relative_to(ROOT).as_posix())
    ]
    assert not findings, "unsafe input handling:\n" + "\n".join(map(str, findings))


def test_the_cli_yaml_loader_is_recognized_as_safe():
    source = (ROOT / "planner" / "cli.py").read_text(encoding="utf-8")
    assert "yaml.load(" in source  # else this test no longer tests the SafeLoader-subclass rule
    assert find_unsafe(source, "planner/cli.py") == []


# ------------------------------------------------------------------------------------------------
# The checker itself: it does fail
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("source", "line", "words"),
    [
        ("x = 1\neval(x)", 2, "eval() evaluates code"),
        ("exec('print(1)')", 1, "exec() evaluates code"),
        ("code = compile(text, 'f', 'exec')", 1, "compile() evaluates code"),
        ("run = eval", 1, "eval() evaluates code"),
        ("import builtins\nbuiltins.exec(text)", 2, "builtins.exec"),
        ("import pickle", 1, "imports pickle"),
        ("import marshal as m", 1, "imports marshal"),
        ("from shelve import open as shelf", 1, "imports from shelve"),
        ("import dill.settings", 1, "imports dill.settings"),
        ("import importlib\nmod = importlib.import_module('pickle')", 2, "imports pickle"),
        ("p = __import__('_pickle')", 1, "imports _pickle"),
        ("import yaml\nyaml.load(text)", 2, "without a Loader"),
        ("import yaml\nyaml.load(text, Loader=yaml.Loader)", 2, "uses yaml.Loader"),
        ("import yaml\nyaml.load(text, yaml.UnsafeLoader)", 2, "uses yaml.UnsafeLoader"),
        ("import yaml\nyaml.load_all(text, Loader=yaml.FullLoader)", 2, "uses yaml.FullLoader"),
        ("import yaml\nyaml.full_load(text)", 2, "uses yaml.full_load"),
        ("import yaml as y\ny.unsafe_load(text)", 2, "uses yaml.unsafe_load"),
        ("from yaml import unsafe_load", 1, "imports yaml.unsafe_load"),
        ("from yaml import load\nload(text)", 2, "without a Loader"),
        ("import yaml\nL = pick()\nyaml.load(text, Loader=L)", 3, "not verifiably"),
        ("import yaml\nclass L(yaml.Loader):\n    pass\nyaml.load(text, Loader=L)", 2, "uses yaml.Loader"),
        ("import yaml\nclass L(Base):\n    pass\nyaml.load(text, Loader=L)", 4, "not verifiably"),
        ("import numpy as np\nnp.load(path, allow_pickle=True)", 2, "allow_pickle"),
        ("from numpy import load\nload(path, None, True)", 2, "allow_pickle"),
        ("import numpy\nnumpy.load(path, **options)", 2, "allow_pickle"),
        ("import subprocess\nsubprocess.run(cmd, shell=True)", 2, "runs a shell"),
        ("from subprocess import Popen\nPopen(cmd, shell=flag)", 2, "runs a shell"),
        ("import subprocess as sp\nsp.check_output(cmd, **kw)", 2, "runs a shell"),
        ("import os\nos.system('ls')", 2, "os.system runs a shell"),
        ("from os import popen\npopen('ls')", 1, "imports os.popen"),
        ("import subprocess\nsubprocess.getoutput('ls')", 2, "runs a shell"),
    ],
)
def test_checker_finds_unsafe_constructs(source, line, words):
    findings = find_unsafe(source, "bad.py")
    assert findings, f"nothing found in {source!r}"
    assert any(f.line == line and words in f.message for f in findings), [str(f) for f in findings]
    assert str(findings[0]).startswith(f"bad.py:{findings[0].line}: ")


@pytest.mark.parametrize(
    "source",
    [
        "import re\npattern = re.compile('x')",
        "from re import compile\npattern = compile('x')",
        "import ast\nvalue = ast.literal_eval(text)",
        "model.eval()",
        "import yaml\nyaml.safe_load(text)\nyaml.safe_load_all(text)",
        "import yaml\nyaml.load(text, Loader=yaml.SafeLoader)",
        "import yaml\nyaml.load(text, yaml.CSafeLoader)",
        "from yaml import SafeLoader, load\nload(text, Loader=SafeLoader)",
        textwrap.dedent("""\
            import yaml
            class Safe(yaml.SafeLoader):
                pass
            class Safer(Safe):
                pass
            yaml.load(text, Loader=Safer)
        """),
        "import numpy as np\nnp.load(path)\nnp.load(path, allow_pickle=False)\nnp.load(path, None, False)",
        "import subprocess\nsubprocess.run(['ls', '-l'], check=True, shell=False)\nsubprocess.run(['ls'])",
        "import json\njson.loads(text)",
    ],
)
def test_checker_accepts_safe_constructs(source):
    assert find_unsafe(source, "good.py") == []
