import os

import numpy as np
import pytest

# Without a CUDA GPU the Triton kernels run in Triton's CPU interpreter, which TRITON_INTERPRET=1 turns on only if it
# is set before triton is first imported: triton_env sets it, here, before any test module is imported.
import triton_env  # noqa: F401
from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=40, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("dev", max_examples=15, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def rng():
    return np.random.default_rng(0)


# ----------------------------------------------------------------------------- run summary
# Tests may record a line for the reader with record_property("screenshot", path) (tests/test_site.py);
# it reaches the controller under pytest-xdist too, and is printed at the end of the run.
_SUMMARY: list[str] = []


def pytest_runtest_logreport(report):
    if report.when == "call":
        _SUMMARY.extend(f"{report.nodeid}: {k} {v}" for k, v in report.user_properties if k == "screenshot")


def pytest_terminal_summary(terminalreporter):
    for line in _SUMMARY:
        terminalreporter.write_line(f"look at the {line.split(': ', 1)[1]}  ({line.split(': ', 1)[0]})")
