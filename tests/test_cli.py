"""The main job: `python -m kornia_halfpatch` runs every applied fix's live demonstration."""

import subprocess
import sys

import pytest

import kornia_halfpatch
from support import UPSTREAM_FIXED


@pytest.mark.slow
def test_cli_demonstrates_every_applied_fix_and_exits_zero_when_they_hold():
    result = subprocess.run(
        [sys.executable, "-m", "kornia_halfpatch"], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    assert "every applied fix holds on this machine" in out
    for name in kornia_halfpatch.fix_names():
        assert f"  {name} " in out  # one status line per fix
    if UPSTREAM_FIXED:
        assert out.count("already fixed upstream") >= len(kornia_halfpatch.fix_names())
    else:
        assert "(holds," in out and "DOES NOT HOLD" not in out


@pytest.mark.slow
@pytest.mark.release_independent
@pytest.mark.slow
@pytest.mark.release_independent
def test_cli_rejects_bad_arguments():
    result = subprocess.run([sys.executable, "-m", "kornia_halfpatch", "--bogus"], capture_output=True, text=True)
    assert result.returncode == 2 and "unrecognized arguments" in result.stderr
