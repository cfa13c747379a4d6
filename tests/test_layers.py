"""The layering of ARCHITECTURE.md ("Layers"), checked: ``lint-imports`` with the
contracts in pyproject.toml. A lower layer that imports a higher one fails this test,
and so CI.

The check runs on the package as a wheel installs it: ``clients/`` and ``spark_loader/``
are ``mpbroker/clients/`` and ``mpbroker/spark_loader/`` there (pyproject.toml maps them),
while in the source tree, which import-linter would read, they sit beside ``mpbroker/``.
So the package's modules are first laid out in a scratch directory as the wheel lays
them out, from ``packages`` and ``package-dir`` in pyproject.toml."""

import os
import shutil
import subprocess
import sys

from tests.test_packaging import setuptools_table

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_no_layer_imports_a_layer_above_it(tmp_path):
    lint = shutil.which("lint-imports", path=os.path.dirname(sys.executable)) or shutil.which("lint-imports")
    assert lint, "lint-imports is missing: pip install -e '.[test]' installs import-linter"
    target = tmp_path / "installed"
    install_layout(target)
    assert (target / "mpbroker" / "clients" / "producer" / "producer.py").exists()
    run = subprocess.run([lint, "--no-cache", os.path.join(REPO, "pyproject.toml")], cwd=target,
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(target)})
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert "0 broken" in run.stdout, run.stdout[-2000:]


def install_layout(target) -> None:
    """Copy every listed package's modules to where a wheel installs them."""
    setuptools = setuptools_table()
    mapped = setuptools["package-dir"]
    for package in setuptools["packages"]:
        parent = max((name for name in mapped if package == name or package.startswith(name + ".")), key=len)
        source = os.path.join(REPO, mapped[parent], *package[len(parent):].split(".")[1:])
        destination = os.path.join(target, *package.split("."))
        os.makedirs(destination, exist_ok=True)
        for name in os.listdir(source):
            if name.endswith(".py"):
                shutil.copy(os.path.join(source, name), destination)


def test_no_import_circle(tmp_path):
    """No module imports itself through others (imports inside functions count too)."""
    target = tmp_path / "installed"
    install_layout(target)
    probe = r'''
import sys
import grimp
graph = grimp.build_graph("mpbroker")
index, low, stack, on_stack, circles, counter = {}, {}, [], set(), [], [0]
sys.setrecursionlimit(10000)
def visit(module):
    index[module] = low[module] = counter[0]; counter[0] += 1
    stack.append(module); on_stack.add(module)
    for imported in sorted(graph.find_modules_directly_imported_by(module)):
        if imported not in index:
            visit(imported); low[module] = min(low[module], low[imported])
        elif imported in on_stack:
            low[module] = min(low[module], index[imported])
    if low[module] == index[module]:
        members = []
        while True:
            member = stack.pop(); on_stack.discard(member); members.append(member)
            if member == module:
                break
        if len(members) > 1:
            circles.append(sorted(members))
for module in sorted(graph.modules):
    if module not in index:
        visit(module)
print("\n".join(" <-> ".join(circle) for circle in circles))
'''
    run = subprocess.run([sys.executable, "-c", probe], cwd=target, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(target)})
    assert run.returncode == 0, run.stderr[-4000:]
    assert run.stdout.strip() == "", "import circles:\n" + run.stdout
