"""``python -m mpbroker.cli.spark_package``: the zip that ``spark-submit --py-files`` ships, and the
loader run through ``spark-submit`` (pyspark's own ``bin/spark-submit``, ``local[2]``) by a
Python that sees only that zip and the third-party dependencies: ``python -S`` skips the
site-packages ``.pth`` files, among them the editable install's, and ``PYTHONPATH`` names the
site-packages directory for the dependencies alone. A real broker; no mocks."""

import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pyspark

from mpbroker.cli.spark_package import main_script
from tests.spark_loader.loads import (
    REPO,
    assert_exactly_once,
    broker_list,
    check_partition_offsets,
    produce,
    read_state,
    saved_summaries,
)

SITE_PACKAGES = sysconfig.get_paths()["purelib"]


def build_zip(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mpbroker.cli.spark_package", str(path)], capture_output=True, text=True,
                          cwd=REPO, timeout=60)


def zip_only_python(directory: Path) -> tuple:
    """(a Python executable that sees the dependencies but not this checkout, its environment)."""
    wrapper = directory / "python-zip-only"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    wrapper.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK", "SPARK_", "PYTHON"))}
    env.update(PYTHONPATH=SITE_PACKAGES, PYSPARK_PYTHON=str(wrapper), PYSPARK_DRIVER_PYTHON=str(wrapper))
    return str(wrapper), env


def test_the_zip_holds_the_installed_layout_of_the_one_package_and_is_all_a_python_needs_of_it(tmp_path):
    archive = tmp_path / "mpbroker.zip"

    built = build_zip(archive)

    assert built.returncode == 0, built.stderr
    assert f"spark-submit --py-files {archive} {main_script()}" in built.stdout
    names = zipfile.ZipFile(archive).namelist()
    assert {name.split("/")[0] for name in names} == {"mpbroker"}  # one top-level import name
    assert all(name.endswith(".py") and "__pycache__" not in name for name in names)
    # the source folders, where pyproject.toml maps them: mpbroker/, clients/ -> mpbroker/clients/, ...
    folders = {"mpbroker": REPO / "mpbroker", "mpbroker/clients": REPO / "clients",
               "mpbroker/spark_loader": REPO / "spark_loader"}
    expected = set()
    for prefix, folder in folders.items():
        expected |= {f"{prefix}/{p.relative_to(folder)}" for p in folder.rglob("*.py") if "__pycache__" not in p.parts}
    assert set(names) == expected
    first = archive.read_bytes()
    assert build_zip(archive).returncode == 0 and archive.read_bytes() == first  # the same sources, the same zip

    python, env = zip_only_python(tmp_path)
    without = subprocess.run([python, "-c", "import mpbroker"], capture_output=True, text=True, env=env,
                             cwd=tmp_path, timeout=60)
    assert without.returncode == 1 and "No module named 'mpbroker'" in without.stderr  # the zip is needed
    probe = ("import mpbroker.clients.consumer.simple_consumer as consumer, mpbroker.segments.naming, "
             "mpbroker.cli.spark_load, mpbroker.spark_loader.job as job; print(job.__file__, consumer.__file__)")
    within = subprocess.run([python, "-c", probe], capture_output=True, text=True, cwd=tmp_path, timeout=60,
                            env={**env, "PYTHONPATH": f"{archive}{os.pathsep}{SITE_PACKAGES}"})
    assert within.returncode == 0, within.stderr
    assert within.stdout.split() == [f"{archive}/mpbroker/spark_loader/job.py",
                                     f"{archive}/mpbroker/clients/consumer/simple_consumer.py"]


def test_bad_arguments_to_the_package_command_exit_2(tmp_path):
    for args in ([], [str(tmp_path / "mpbroker.tar")], [str(tmp_path / "no-such-dir" / "mpbroker.zip")]):
        result = subprocess.run([sys.executable, "-m", "mpbroker.cli.spark_package", *args], capture_output=True,
                                text=True, cwd=REPO, timeout=60)
        assert result.returncode == 2, (args, result.stderr)
        assert result.stderr.strip() and "Traceback" not in result.stderr
    assert not list(tmp_path.iterdir())


def test_spark_submit_with_py_files_runs_the_loader_from_the_zip(broker_factory, tmp_path):
    broker = broker_factory("b1", num_partitions=2, brokerid=1)
    brokers = broker_list(broker)
    sent = produce(brokers, "submitted", 300)
    archive = tmp_path / "mpbroker.zip"
    assert build_zip(archive).returncode == 0
    output = tmp_path / "out"
    _, env = zip_only_python(tmp_path)
    spark_submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"

    done = subprocess.run([str(spark_submit), "--master", "local[2]", "--py-files", str(archive), main_script(),
                           "--broker-list", brokers, "--topic", "submitted", "--output", str(output)],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=240)

    assert done.returncode == 0, done.stderr[-4000:]
    # spark-submit hands the driver's stderr (the log) to its stdout too: the summary comes last
    summary = json.loads(done.stdout[done.stdout.rindex("\n{\n") + 1:])
    assert saved_summaries(output) == {summary["load_id"]: summary}
    assert summary["messages"] == len(sent)
    rows = assert_exactly_once(output, sent)
    check_partition_offsets(rows)
    assert {load_id for _, load_id in rows} == {summary["load_id"]}
    assert sorted(read_state(output)["offsets"]) == ["submitted/1-0", "submitted/1-1"]
