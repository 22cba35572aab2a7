"""The pytest plugin, run in subprocesses through pytester (the way users get it)."""

import pytest

from support import needs_old_kornia

# pytester runs pytest in subprocesses; the plugin's hooks are the same on every kornia release.
pytestmark = [pytest.mark.slow, pytest.mark.release_independent]

# A rootdir conftest that binds create_meshgrid at import time, like kornia's own conftest.py
# imports kornia: the plugin must have patched before this runs.
CONFTEST = """
from kornia.geometry.transform.homography_warper import create_meshgrid as bound_in_conftest
"""

TEST_FILE = """
import kornia_halfpatch
import conftest

def test_binding_made_by_the_conftest(request):
    patched = kornia_halfpatch.is_patched(conftest.bound_in_conftest)
    print("PATCHED" if patched else "UNPATCHED")
    assert patched == request.config.getoption("expect_patched")

def test_fixtures(kornia_unpatched):
    from kornia.geometry.transform import homography_warper
    assert not kornia_halfpatch.is_patched(homography_warper.create_meshgrid)

def test_patched_fixture(kornia_patched):
    from kornia.geometry.transform import homography_warper
    assert kornia_halfpatch.is_patched(homography_warper.create_meshgrid)
"""

OPTION = """
def pytest_addoption(parser):
    parser.addoption("--expect-patched", action="store_true", default=False)
"""


@pytest.fixture
def project(pytester):
    pytester.makeconftest(CONFTEST + OPTION)
    pytester.makepyfile(test_user=TEST_FILE)
    return pytester


@needs_old_kornia
def test_plugin_patches_before_the_rootdir_conftest_and_reports_in_the_header(project):
    result = project.runpytest_subprocess("--expect-patched", "-v")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["kornia_halfpatch: kornia *, torch *; applied: *utils_grids*"])


@needs_old_kornia
@pytest.mark.parametrize("how", ["-p no:kornia_halfpatch", "--no-kornia-halfpatch", "ini", "env"])
def test_plugin_opt_outs(project, how, monkeypatch):
    args = []
    if how == "ini":
        project.makeini("[pytest]\nkornia_halfpatch = false\n")
    elif how == "env":
        monkeypatch.setenv("KORNIA_HALFPATCH_DISABLE", "1")
    else:
        args = how.split()
    result = project.runpytest_subprocess(*args, "-k", "binding")
    result.assert_outcomes(passed=1)
