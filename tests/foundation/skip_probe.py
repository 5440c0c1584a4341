"""Not collected on its own (no test_ prefix): run by test_ci_skips.py in a child pytest."""
import pytest


def test_missing_component():
    pytest.skip("no such component")


@pytest.mark.skipif(True, reason="skipif without the component")
def test_skipif_component():
    pass


@pytest.mark.gpu
def test_needs_a_gpu():
    pytest.skip("no GPU here")


def test_runs():
    assert True
