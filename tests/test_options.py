"""The options manifest (kornia_halfpatch._options) is the one place a setting is declared: the
fixes take the apply() keywords it gives them, nothing else in the package reads a
KORNIA_HALFPATCH_* variable, and the CLI lists it."""

import ast
import pathlib
import subprocess
import sys

import pytest

import kornia_halfpatch
from kornia_halfpatch import _options, testing
from kornia_halfpatch.fixes import load_fixes
from support import UPSTREAM_FIXED

PACKAGE = pathlib.Path(kornia_halfpatch.__file__).parent
ROOT = pathlib.Path(__file__).resolve().parents[1]  # the checkout (the package may be installed elsewhere)


@pytest.mark.release_independent
def test_every_fix_takes_exactly_the_keywords_the_manifest_gives_it():
    for fix in load_fixes():
        assert fix.options == _options.keywords_of(fix.name), fix.name
    owners = {option.fix for option in _options.OPTIONS if option.fix is not None}
    assert owners <= {fix.name for fix in load_fixes()}


@pytest.mark.release_independent
def test_no_module_but_the_manifest_names_a_variable_of_the_shim():
    """A variable written out anywhere else would be a second declaration (and a second reading)."""
    declared = {option.variable for option in _options.OPTIONS if option.variable}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "_options.py":
            continue
        tree = ast.parse(path.read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
            and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                assert node.value not in declared, f"{path.relative_to(ROOT)} names {node.value}"


@pytest.mark.release_independent
def test_the_usage_doc_lists_every_variable():
    usage = (ROOT / "docs" / "usage.md").read_text()
    assert [o.variable for o in _options.OPTIONS if o.variable and f"| `{o.variable}=" not in usage] == []


@pytest.mark.release_independent
def test_the_start_up_hook_reads_the_manifests_variables():
    # The hook cannot import the package (it runs in every Python process): it spells them out.
    source = (ROOT / "_kornia_halfpatch_autostart.py").read_text()
    assert f'ENV_AUTO = "{_options.AUTO.variable}"' in source
    assert f'ENV_DISABLE = "{_options.DISABLE.variable}"' in source


@pytest.mark.release_independent
@pytest.mark.parametrize("option", [o for o in _options.OPTIONS if o.kind == _options.CHOICE], ids=lambda o: o.name)
def test_a_variable_is_read_when_asked_never_kept(monkeypatch, option):
    for value in option.choices:
        monkeypatch.setenv(option.variable, value)
        assert _options.resolve(option, {}) == _options.Setting(value, option.variable)
    monkeypatch.delenv(option.variable)
    assert _options.resolve(option, {}).value == option.default
    if option.keyword:  # the keyword beats the variable
        monkeypatch.setenv(option.variable, option.choices[-1])
        assert _options.resolve(option, {option.name: option.choices[0]}).value == option.choices[0]


@pytest.mark.release_independent
def test_bad_values_raise_or_warn_as_declared(monkeypatch):
    with pytest.raises(ValueError, match="cpu_half must be one of auto, native, float32, got 'fast'"):
        _options.check({"cpu_half": "fast"}, ["networks_cpu_half"], warn=pytest.fail)
    with pytest.raises(ValueError, match="grid_sample_everywhere must be True or False"):
        _options.check({"grid_sample_everywhere": 1}, ["warp_sampling"], warn=pytest.fail)
    monkeypatch.setenv(_options.GRID_SAMPLE_WORKAROUND.variable, "sometimes")
    with pytest.raises(ValueError, match="KORNIA_HALFPATCH_GRID_SAMPLE_WORKAROUND='sometimes' is not one of"):
        _options.check({}, ["warp_sampling"], warn=pytest.fail)
    _options.check({}, ["utils_grids"], warn=pytest.fail)  # an option of a fix not selected is not read
    monkeypatch.setenv(_options.CPU_HALF.variable, "fastest")
    warned = []
    _options.check({}, ["networks_cpu_half"], warn=warned.append)
    assert warned == ["KORNIA_HALFPATCH_CPU_HALF='fastest' is not one of auto, native, float32: using 'auto'"]
    monkeypatch.setenv(_options.FILTERS_CONV_HANG.variable, "bogus")  # noted in the fix's reason
    _options.check({}, ["filters_conv_hang"], warn=pytest.fail)


@pytest.mark.skipif(UPSTREAM_FIXED, reason="kornia >= 0.9.0: nothing is patched")
def test_set_the_variable_then_apply_and_the_verdict_follows_it(monkeypatch):
    """A variable changed at run time decides the next apply(): nothing read earlier is kept.
    filter2d's row exists for the conv2d hang alone, so its verdict is the variable's."""
    from kornia_halfpatch import Verdict

    monkeypatch.setenv(_options.CPU_AVX512_FP16.variable, "0")  # a CPU without avx512_fp16
    filter2d = "kornia.filters.filter:filter2d"
    for value, expected in (("off", Verdict.NOT_NEEDED), ("on", Verdict.APPLIED), ("off", Verdict.NOT_NEEDED),
                            ("on", Verdict.APPLIED), ("auto", Verdict.NOT_NEEDED)):
        monkeypatch.setenv(_options.FILTERS_CONV_HANG.variable, value)
        with testing.isolated(only=["filters_conv_hang"]) as report:
            status = report.fixes["filters_conv_hang"]
            rows = {target.target: target for target in status.target_statuses}
            if expected is Verdict.APPLIED:
                assert status.verdict is Verdict.APPLIED, (value, status)
            assert rows[filter2d].verdict is expected, (value, rows[filter2d])


@pytest.mark.slow
@pytest.mark.release_independent
def test_cli_lists_every_setting():
    result = subprocess.run(
        [sys.executable, "-m", "kornia_halfpatch", "--options"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert len(lines) == len(_options.OPTIONS)
    for option, line in zip(_options.OPTIONS, lines):
        assert (option.variable or f"apply({option.name}=...)") in line
        assert (option.fix or "the shim") in line
