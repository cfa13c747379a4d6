"""What installing mpbroker puts on the import path: one name, ``mpbroker``, with the
``clients/`` and ``spark_loader/`` folders under it, and every package listed in
pyproject.toml (a package folder left out of the list would be missing from the wheel)."""

import os
import subprocess
import sys
import tomllib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def setuptools_table() -> dict:
    """``[tool.setuptools]`` of pyproject.toml: ``packages`` and ``package-dir``."""
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["tool"]["setuptools"]


def test_every_package_folder_is_listed_under_the_one_top_level_name():
    setuptools = setuptools_table()
    on_disk = set()
    for name, folder in setuptools["package-dir"].items():
        for directory, subdirectories, files in os.walk(os.path.join(REPO, folder)):
            subdirectories[:] = [d for d in subdirectories if d != "__pycache__"]
            if "__init__.py" in files:
                relative = os.path.relpath(directory, os.path.join(REPO, folder))
                on_disk.add(name if relative == "." else f"{name}.{relative.replace(os.sep, '.')}")
    assert set(setuptools["packages"]) == on_disk
    assert {package.split(".")[0] for package in setuptools["packages"]} == {"mpbroker"}


def test_a_users_clients_module_does_not_shadow_the_clients(tmp_path):
    # A user's own scripts folder with a clients.py (or spark_loader.py) on sys.path: it
    # used to shadow the package of that name; now the clients are mpbroker.clients.
    (tmp_path / "clients.py").write_text("raise SystemExit('the user file ran')\n")
    (tmp_path / "spark_loader.py").write_text("raise SystemExit('the user file ran')\n")
    probe = ("from mpbroker.clients import Producer, SimpleConsumer; import mpbroker.spark_loader.job as job; "
             "print(Producer.__module__, job.__name__)")
    run = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["mpbroker.clients.producer.producer", "mpbroker.spark_loader.job"]
