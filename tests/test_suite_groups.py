"""The suite's own scheduling: under `pytest -n 2 --dist loadgroup` (the README's test command), each
xdist_group runs on one worker, so the subprocess-heavy modules build their session fixtures once.
pytest-xdist marks a grouped test by a suffix on its node id; a pytest that keeps ids out of its
reach makes it ignore every group silently, and each such fixture then runs on both workers."""

import os

import pytest


@pytest.mark.xdist_group("suite_groups")
def test_a_grouped_test_is_scheduled_as_its_group(request):
    if os.environ.get("PYTEST_XDIST_WORKER") is None or not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not under --dist loadgroup: there are no groups to keep")
    assert request.node.nodeid.endswith("@suite_groups"), (
        f"--dist loadgroup ignored this test's xdist_group under pytest {pytest.__version__}: "
        "install the versions pyproject.toml's test extra pins"
    )
