"""The package's layers hold: import-linter's contracts in pyproject.toml pass on src/, and break on a
copy with a back-edge; and no module reaches its imports by editing sys.path (but the two that stand for a new
interpreter's start: AS_AN_INTERPRETER)."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")  # the virtualenv's, next to python
LAYERS = "Layers: measure above lab above the core"
SYS_PATH_EDIT = re.compile(
    r"\bsys\.path\s*(?:\.\s*(?:insert|append|extend|remove|pop|clear)\s*\(|(?:\[[^\]]*\])?\s*\+?=(?!=))")
# The graders' process server forks a child for a tree it did not start with: the child puts the request's PYTHONPATH
# first on sys.path, as the interpreter it stands for would have at its start.
AS_AN_INTERPRETER = {("src/minitrain/lab/grading/forkserver.py",
                      'sys.path[:0] = [os.path.abspath(p) for p in request["env"].get("PYTHONPATH", "")'
                      '.split(os.pathsep) if p]'),
                     ("src/minitrain/launch/torchrun.py", "sys.path[0] = str(Path(target).resolve().parent)")}


def lint_imports(cwd: Path, *args: str, pythonpath: Path | None = None) -> subprocess.CompletedProcess:
    """`lint-imports` in `cwd` without a cache (so it writes nothing), optionally on another src/."""
    env = os.environ | ({"PYTHONPATH": str(pythonpath)} if pythonpath else {})
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", "--no-logo", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_import_contracts_are_kept():
    proc = lint_imports(ROOT)  # reads [tool.importlinter] from pyproject.toml
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert "BROKEN" not in output and "Broken contracts" not in output
    assert re.search(r"Contracts: \d+ kept, 0 broken\.", output), output  # "0 broken" is the only one
    assert f"{LAYERS} KEPT" in output


def test_a_back_edge_breaks_the_layer_contract(tmp_path):
    copy = tmp_path / "src"
    shutil.copytree(SRC / "minitrain", copy / "minitrain", ignore=shutil.ignore_patterns("__pycache__"))
    with open(copy / "minitrain" / "lab" / "reporting" / "report.py", "a") as f:
        f.write("\nimport minitrain.measure.wire  # the lab reaching up into a measurement\n")
    config = tmp_path / "importlinter.toml"  # the same contracts, outside the repository
    shutil.copy(ROOT / "pyproject.toml", config)
    proc = lint_imports(tmp_path, str(config), pythonpath=copy)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    assert f"{LAYERS} BROKEN" in output
    assert "minitrain.lab is not allowed to import minitrain.measure" in output
    assert "minitrain.lab.reporting.report -> minitrain.measure.wire" in output


def test_the_pattern_finds_sys_path_edits():
    edits = ["sys.path.insert(0, str(ROOT))", "sys.path.append('src')", "sys.path = ['x']",
             "sys.path += [p]", "sys.path[:0] = [p]", "sys.path . extend(paths)"]
    reads = ["if sys.path == old:", "print(sys.path)", "sys.path_hooks.append(h)", "for p in sys.path:"]
    assert all(SYS_PATH_EDIT.search(line) for line in edits)
    assert not any(SYS_PATH_EDIT.search(line) for line in reads)


def test_no_module_edits_sys_path():
    files = sorted(p for p in SRC.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                   and p.suffix in (".py", ".pth", ".cfg", ".toml", ".txt", ".ipynb"))
    assert any(p.name == "__init__.py" for p in files)
    offenders = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}" for p in files
                 for n, line in enumerate(p.read_text(errors="replace").splitlines(), start=1)
                 if SYS_PATH_EDIT.search(line) and (str(p.relative_to(ROOT)), line.strip()) not in AS_AN_INTERPRETER]
    assert offenders == []
