"""Pin the planner's runtime dependencies in ``requirements.lock`` and audit them with pip-audit.

Usage::

    .venv/bin/python scripts/audit_deps.py --lock                # rewrite requirements.lock from .venv
    .venv/bin/python scripts/audit_deps.py                       # check the lock, then audit it
    .venv/bin/python scripts/audit_deps.py --allow-unreachable   # the same, passing when it cannot audit

The lock pins (``name==version``) the runtime closure of the project: the ``[project].dependencies``
of ``pyproject.toml`` (no extras, so not the ``dev`` tools), followed through the ``Requires-Dist`` of
each distribution installed in this interpreter (``importlib.metadata``), markers evaluated here.
Regenerating it in the same environment writes the same file.

Every run first checks, offline, that the lock is what is installed: same packages, each pinned
version the installed one (a drifted environment or a stale lock fails). It then runs ``pip-audit -r
requirements.lock --no-deps --disable-pip`` and reads its JSON report. pip-audit itself prints "No
known vulnerabilities found" and exits 0 when its service answered "not found" for every package
(it skips them), and exits 1 both when it finds vulnerabilities and when it cannot connect; this
script tells the cases apart and never reports an audit that did not happen.

Exit status
-----------
0   audited, no known vulnerabilities (with ``--allow-unreachable``: also when it could not audit)
1   vulnerabilities found, or the lock differs from what is installed
2   the lock or pyproject.toml is missing or malformed, pip-audit is not installed, or pip-audit failed
    for a reason other than reaching its service
3   NOT AUDITED: the service was unreachable, too slow, or skipped some packages
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import importlib.util
import json
import platform
import re
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
except ImportError:  # pip vendors the same library
    from pip._vendor.packaging.requirements import Requirement  # type: ignore[no-redef]
    from pip._vendor.packaging.utils import canonicalize_name  # type: ignore[no-redef]

REPO = Path(__file__).resolve().parents[1]
DEFAULT_LOCK = REPO / "requirements.lock"
PYPROJECT = REPO / "pyproject.toml"
#: the whole pip-audit run may take this long before it counts as unreachable [s]
DEFAULT_TIMEOUT_S = 60.0
#: socket timeout of each of pip-audit's requests [s]
REQUEST_TIMEOUT_S = 15.0

EXIT_OK = 0
EXIT_FOUND = 1
EXIT_ERROR = 2
EXIT_NOT_AUDITED = 3

_PIN = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9.+!_-]+)")
#: what pip-audit's last error line says when the vulnerability service could not be reached
_NETWORK_FAILURES = re.compile(
    r"ConnectionError|ConnectTimeout|ReadTimeout|Timeout|NameResolution|Name or service not known|"
    r"Temporary failure in name resolution|Max retries exceeded|Could not connect|ServiceError|SSLError|"
    r"ProxyError|Network is unreachable|Connection refused|Connection reset",
)


#: the package a pip-audit skip reason ends with (``: numpy (2.4.6)``)
_PACKAGE_SUFFIX = re.compile(r":\s*[A-Za-z0-9._-]+ \([^()]*\)\s*$")


class LockError(Exception):
    """The lock or the environment cannot be read (exit 2)."""


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """What an audit established: the exit status and the lines that say why."""

    status: int
    lines: tuple[str, ...]


# --------------------------------------------------------------------------------------------------
# The runtime closure and the lock
# --------------------------------------------------------------------------------------------------
def runtime_requirements(pyproject: Path = PYPROJECT) -> list[str]:
    """``[project].dependencies`` of ``pyproject.toml``: the source, not the installed metadata.

    Read from the file because an editable install's metadata (or a stale ``*.egg-info`` beside it)
    can lag behind the file it was built from.
    """
    try:
        project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
        return [str(item) for item in project["dependencies"]]
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError) as exc:
        raise LockError(f"{pyproject}: cannot read [project].dependencies: {exc}") from exc


def runtime_closure(requirements: Iterable[str]) -> tuple[dict[str, str], list[str]]:
    """Installed version of every distribution the requirements pull in, and what is wrong.

    Parameters
    ----------
    requirements : iterable of str
        PEP 508 requirements (the project's runtime dependencies).

    Returns
    -------
    closure : dict of str to str
        Canonical (PEP 503) name -> installed version, sorted by name.
    problems : list of str
        Requirements that are not installed or whose installed version does not satisfy them.
    """
    pending = [(Requirement(text), "planner") for text in requirements]
    closure: dict[str, str] = {}
    problems: list[str] = []
    seen: set[tuple[str, frozenset[str]]] = set()
    while pending:
        requirement, parent = pending.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(requirement.name)
        key = (name, frozenset(requirement.extras))
        if key in seen:
            continue
        seen.add(key)
        try:
            distribution = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            problems.append(f"{name}: required by {parent} ({requirement}) but not installed")
            continue
        version = distribution.version
        if not requirement.specifier.contains(version, prereleases=True):
            problems.append(f"{name}: installed {version} does not satisfy {parent}'s {requirement}")
        closure[name] = version
        extras = {""} | set(requirement.extras)
        for text in distribution.requires or ():
            child = Requirement(text)
            if child.marker is None or any(child.marker.evaluate({"extra": extra}) for extra in extras):
                pending.append((child, name))
    return dict(sorted(closure.items())), problems


def render_lock(closure: Mapping[str, str]) -> str:
    """The text of ``requirements.lock``: a header, then one ``name==version`` a line, sorted."""
    python = f"{platform.python_implementation()} {platform.python_version()} on {sys.platform}"
    header = (
        "# Runtime dependency closure of planner: pyproject.toml [project].dependencies (no extras)\n"
        "# with everything they require, as installed in the project's venv.\n"
        f"# Generated by `scripts/audit_deps.py --lock` ({python}); do not edit by hand.\n"
    )
    return header + "".join(f"{name}=={version}\n" for name, version in sorted(closure.items()))


def read_lock(path: Path) -> dict[str, str]:
    """Canonical name -> pinned version of a lock file (comments and blank lines ignored)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise LockError(f"{path}: cannot be read ({exc.strerror}); write it with --lock") from exc
    pins: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = _PIN.fullmatch(line)
        if match is None:
            raise LockError(f"{path}:{number}: not a name==version pin: {raw.strip()!r}")
        name = canonicalize_name(match["name"])
        if name in pins:
            raise LockError(f"{path}:{number}: {name} is pinned twice")
        pins[name] = match["version"]
    if not pins:
        raise LockError(f"{path}: pins nothing; write it with --lock")
    return pins


def lock_drift(locked: Mapping[str, str], closure: Mapping[str, str]) -> list[str]:
    """One line per difference between the lock and the installed closure (empty when in sync)."""
    drift = []
    for name in sorted(set(locked) | set(closure)):
        pinned, installed = locked.get(name), closure.get(name)
        if pinned == installed:
            continue
        if installed is None:
            drift.append(f"{name}: locked {pinned}, but no runtime dependency pulls it in (or not installed)")
        elif pinned is None:
            drift.append(f"{name}: installed {installed} is a runtime dependency missing from the lock")
        else:
            drift.append(f"{name}: locked {pinned}, installed {installed}")
    return drift


# --------------------------------------------------------------------------------------------------
# The audit
# --------------------------------------------------------------------------------------------------
def pip_audit_command(lock: Path, *, service: str, request_timeout_s: float) -> list[str]:
    """The pip-audit invocation: the pinned lock only, no resolution, no pip, JSON on stdout."""
    return [
        sys.executable, "-m", "pip_audit", "-r", str(lock), "--no-deps", "--disable-pip",
        "--progress-spinner", "off", "--format", "json", "--vulnerability-service", service,
        "--timeout", f"{request_timeout_s:g}",
    ]


def interpret_report(report: Mapping[str, Any], locked: Mapping[str, str]) -> Outcome:
    """Judge pip-audit's JSON report: found, clean, or not (entirely) audited.

    A package pip-audit skipped ("Dependency not found ... could not be audited", the answer of a
    service that does not know it) or left out of the report was not audited, whatever pip-audit's
    own summary line says.
    """
    dependencies = report.get("dependencies")
    if not isinstance(dependencies, list):
        return Outcome(status=EXIT_ERROR, lines=("pip-audit's report has no 'dependencies' list",))
    audited: set[str] = set()
    skipped: dict[str, str] = {}
    found: list[str] = []
    for item in dependencies:
        name = canonicalize_name(str(item.get("name", "")))
        if "skip_reason" in item:
            skipped[name] = str(item["skip_reason"])
            continue
        audited.add(name)
        for vuln in item.get("vulns") or ():
            aliases = ", ".join(vuln.get("aliases") or ())
            fixes = ", ".join(vuln.get("fix_versions") or ()) or "no fixed version"
            also = f" ({aliases})" if aliases else ""
            pinned = f"{name}=={item.get('version')}"
            found.append(f"VULNERABLE: {pinned}: {vuln.get('id')}{also}; fixed in {fixes}")
    for name in sorted(set(locked) - audited - set(skipped)):
        skipped[name] = "missing from pip-audit's report"
    lines: list[str] = list(found)
    if skipped:
        # "...could not be audited: numpy (2.4.6)" -> one reason for all the packages it names
        reasons = sorted({_PACKAGE_SUFFIX.sub("", reason) for reason in skipped.values()})
        why = "; ".join(reasons)
        if audited:
            which = f"{len(skipped)} of the {len(locked)} locked packages ({', '.join(sorted(skipped))})"
        else:
            which = f"any of the {len(locked)} locked packages"
        lines.append(f"NOT AUDITED: pip-audit could not audit {which}: {why}")
    if found:
        return Outcome(status=EXIT_FOUND, lines=tuple(lines))
    if skipped:
        return Outcome(status=EXIT_NOT_AUDITED, lines=tuple(lines))
    return Outcome(status=EXIT_OK, lines=(f"audited {len(audited)} packages: no known vulnerabilities",))


def audit(lock: Path, locked: Mapping[str, str], *, service: str, timeout_s: float) -> Outcome:
    """Run pip-audit on ``lock`` (at most ``timeout_s``) and judge what it said."""
    if importlib.util.find_spec("pip_audit") is None:
        return Outcome(status=EXIT_ERROR, lines=(
            f"pip-audit is not installed in {sys.executable} (it is in the dev extra: "
            "pip install -e '.[dev]', or pip install 'pip-audit>=2.7')",
        ))
    command = pip_audit_command(lock, service=service, request_timeout_s=min(REQUEST_TIMEOUT_S, timeout_s))
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return Outcome(status=EXIT_NOT_AUDITED, lines=(
            f"NOT AUDITED: pip-audit did not finish within {timeout_s:g} s (service unreachable or too slow)",
        ))
    try:
        report = json.loads(result.stdout)
    except ValueError:
        report = None
    if isinstance(report, dict):
        return interpret_report(report, locked)
    errors = [line.strip() for line in result.stderr.splitlines() if line.strip()]
    last = errors[-1] if errors else f"exit status {result.returncode}, no output"
    if _NETWORK_FAILURES.search(result.stderr):
        return Outcome(status=EXIT_NOT_AUDITED, lines=(
            f"NOT AUDITED: pip-audit could not reach the {service} vulnerability service: {last}",
        ))
    return Outcome(status=EXIT_ERROR, lines=(f"pip-audit failed (exit {result.returncode}): {last}",))


# --------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lock", action="store_true", help="rewrite the lock from this environment and stop")
    parser.add_argument("--lock-file", type=Path, default=DEFAULT_LOCK, help="default: requirements.lock")
    parser.add_argument("--allow-unreachable", action="store_true",
                        help="exit 0 when the audit cannot be done (still fails on vulnerabilities or drift)")
    parser.add_argument("--service", choices=("pypi", "osv"), default="pypi",
                        help="pip-audit's vulnerability service (default: pypi)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                        help=f"seconds the whole pip-audit run may take (default: {DEFAULT_TIMEOUT_S:g})")
    args = parser.parse_args(argv)
    lock: Path = args.lock_file

    try:
        closure, problems = runtime_closure(runtime_requirements())
        if args.lock:
            if problems:
                print("cannot lock an inconsistent environment:\n  " + "\n  ".join(problems), file=sys.stderr)
                return EXIT_FOUND
            lock.write_text(render_lock(closure), encoding="utf-8")
            print(f"wrote {lock} ({len(closure)} packages)")
            return EXIT_OK
        locked = read_lock(lock)
    except LockError as exc:
        print(f"audit_deps: {exc}", file=sys.stderr)
        return EXIT_ERROR

    drift = problems + lock_drift(locked, closure)
    if drift:
        print(f"LOCK DRIFT: {lock.name} is not what is installed in {sys.prefix}:")
        print("  " + "\n  ".join(drift))
        print("install the locked versions, or regenerate the lock with scripts/audit_deps.py --lock")
        return EXIT_FOUND
    print(f"{lock.name}: in sync with {sys.prefix} ({len(locked)} packages)")

    started = time.monotonic()
    outcome = audit(lock, locked, service=args.service, timeout_s=args.timeout)
    elapsed_s = time.monotonic() - started
    for line in outcome.lines:
        print(line, file=sys.stderr if outcome.status == EXIT_ERROR else sys.stdout)
    print(f"pip-audit ({args.service} service) took {elapsed_s:.1f} s")
    if outcome.status == EXIT_NOT_AUDITED:
        if args.allow_unreachable:
            print("the dependencies were NOT audited; passing only because of --allow-unreachable")
            return EXIT_OK
        print("pass --allow-unreachable to accept an audit that could not be done")
    return outcome.status


if __name__ == "__main__":
    sys.exit(main())
