"""The suite's xdist groups take effect (tests/conftest.py gives them).

pytest-xdist reads a test's group from a suffix it writes into the test's id.
A pytest that keeps the suffix out of the id (pytest 9.2 with pytest-xdist
3.8: pytest-xdist issue #1386) voids every group without a word: a module's
fixture is then built on several workers and a module's browser tests, or the
process-scanning tests, spread over several. These fail instead.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def built_once() -> int:
    return 1


def _under_loadgroup(request) -> None:
    if not getattr(request.config.option, "loadgroup", False):  # set on xdist's workers
        pytest.skip("not under pytest-xdist --dist loadgroup")


@pytest.mark.xdist_group("xdist-probe")
def test_a_marked_group_reaches_the_scheduler(request):
    _under_loadgroup(request)
    assert request.node.nodeid.endswith("@xdist-probe"), (
        "pytest-xdist ignores xdist_group under this pytest: install requirements-dev.txt's")


def test_a_module_fixture_puts_its_tests_in_the_module_s_group(request, built_once):
    _under_loadgroup(request)
    assert built_once and request.node.nodeid.endswith("@test_xdist_groups"), request.node.nodeid
