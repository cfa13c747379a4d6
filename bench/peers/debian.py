"""Debian packages for the peer brokers: installed when missing, their system services
kept stopped (the benchmarks run private instances), and their versions."""

import os
import shutil
import subprocess


def is_installed(package: str) -> bool:
    result = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package],
                            capture_output=True, text=True, check=False)
    return result.returncode == 0 and result.stdout.strip().endswith("installed")


def package_version(package: str) -> str | None:
    result = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package],
                            capture_output=True, text=True, check=False)
    if result.returncode != 0:
        return None
    return result.stdout.strip() or None


def ensure_installed(package: str, services: tuple = ()) -> None:
    """``apt-get install`` ``package`` if it is missing, then stop ``services`` in case
    the installation started them (a private instance must not share ports or data)."""
    if is_installed(package):
        return
    print(f"installing Debian package {package} ...", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-q"], env=env, check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["apt-get", "install", "-y", "-q", package], env=env, check=True, stdout=subprocess.DEVNULL)
    for service in services:
        stop_system_service(service)


def stop_system_service(service: str) -> None:
    """Stop ``service`` and keep it from starting at boot, through whichever init is here."""
    if shutil.which("systemctl") and os.path.isdir("/run/systemd/system"):
        subprocess.run(["systemctl", "disable", "--now", service], check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    elif shutil.which("service"):
        subprocess.run(["service", service, "stop"], check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
