"""What a test does on a machine that cannot make network namespaces: under CI
(the ``CI`` environment variable set) it fails, so a CI machine that lost the ability
never passes these tests silently; elsewhere (a developer's machine without root) it
is skipped with a reason that says so in capitals in pytest's summary."""

import os

import pytest

from .network import Network, NetworkUnavailable


def start_network_or_skip(tag: str | None = None) -> Network:
    """A started Network; a failed or skipped test if this machine cannot make one."""
    try:
        return Network(tag).start()
    except NetworkUnavailable as exc:
        message = f"NETWORK NAMESPACES UNAVAILABLE, the network-fault tests cannot run: {exc}"
        if os.environ.get("CI"):
            pytest.fail(message + " (CI is set: failing instead of skipping)", pytrace=False)
        pytest.skip(message)
