"""Counts the docs state about the registry (fixes, rows, targets) are read from the docs and
compared with the registry, so a changed table fails here instead of leaving a doc behind."""

import re
from pathlib import Path

import pytest

import kornia
from kornia_halfpatch import _model
from kornia_halfpatch.fixes import FIX_NAMES, load_fixes

ROOT = Path(__file__).resolve().parents[1]
FIXES = {fix.name: fix for fix in load_fixes()}
RELEASE = ".".join(kornia.__version__.split(".")[:3])


def stated(path: str, pattern: str):
    """The one match of ``pattern`` in the doc at ``path`` (its groups)."""
    found = re.findall(pattern, (ROOT / path).read_text(), re.M)
    assert len(found) == 1, f"{path}: expected one statement matching {pattern!r}, found {found}"
    return found[0]


def present(target: _model.Target) -> bool:
    """Whether this release has the target under one of its candidates."""
    for candidate in target.candidates:
        try:
            _model.load(candidate)
            return True
        except (ImportError, AttributeError):
            continue
    return False


@pytest.mark.release_independent
@pytest.mark.parametrize(("path", "link"), [("README.md", "docs/fixes/"), ("docs/fixes/README.md", "")])
def test_the_fixes_tables_list_every_fix_once(path, link):
    listed = re.findall(rf"^\| \[`(\w+)`\]\({re.escape(link)}", (ROOT / path).read_text(), re.M)
    assert sorted(listed) == sorted(FIX_NAMES)


@pytest.mark.release_independent
def test_stated_table_sizes_are_the_registrys():
    dtypes = FIXES["kornia_dtypes"]
    promote_rows = stated("docs/fixes/kornia_dtypes.md", r"\*\*Promote rows\*\* \((\d+)\)")
    assert int(promote_rows) == sum(type(target.row) is _model.Promote for target in dtypes.targets)
    assert stated("docs/fixes/README.md", r"\| (\d+) promoted functions") == promote_rows

    warps = FIXES["warp_geometry"]
    total, rows, hand_written = stated("docs/fixes/warp_geometry.md", r"targets \(of (\d+): (\d+) rows, (\d+) hand-written\)")
    assert (int(total), int(rows), int(hand_written)) == (len(warps.targets), len(warps.rows), len(warps.targets) - len(warps.rows))

    declared = stated("docs/usage.md", r"the fixes declare (\d+) targets in all")
    assert int(declared) == sum(len(fix.targets) for fix in FIXES.values())


def test_stated_per_release_target_counts_hold_on_this_release():
    # warp_geometry.md: a table with one column per release.
    releases = stated("docs/fixes/warp_geometry.md", r"^\| \| (\d+\.\d+\.\d+(?: \| \d+\.\d+\.\d+)*) \|$").split(" | ")
    counts = stated("docs/fixes/warp_geometry.md", r"^\| targets \(of [^)]*\) present \| (\d+(?: \| \d+)*) \|$").split(" | ")
    checked = 0
    if RELEASE in releases:
        assert int(counts[releases.index(RELEASE)]) == sum(map(present, FIXES["warp_geometry"].targets))
        checked += 1
    # networks_cpu_half.md: one line per group of releases, the count at its end.
    for line_releases, count in re.findall(r"^\| ([\d., ]+) \| .*\((\d+)\) \|$", (ROOT / "docs/fixes/networks_cpu_half.md").read_text(), re.M):
        if RELEASE in [r.strip() for r in line_releases.split(",")]:
            assert int(count) == sum(map(present, FIXES["networks_cpu_half"].targets))
            checked += 1
    if not checked:
        pytest.skip(f"the docs state no per-release counts for kornia {RELEASE}")
    assert checked == 2


def test_readmes_supported_versions_are_what_ci_runs():
    # README's table of stacks, tox.ini's envlist (what CI runs) and pyproject's bounds say the same.
    import configparser

    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini")
    envlist = set(tox["tox"]["envlist"].split())
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("## Supported versions") :]
    table = table[: table.index("\n\n", table.index("| ---"))]
    rows = [line for line in table.splitlines() if line.startswith("| 3.")]
    # pyproject's bounds admit the oldest stack the table lists, run in CI or on demand
    pythons = {tuple(int(part) for part in row.split("|")[1].strip().split(".")) for row in rows}
    torches = {tuple(int(part) for part in row.split("|")[2].strip().split(".")[:2]) for row in rows}
    named = set()
    for row in rows:
        python, torch_version, _, environments = [cell.strip() for cell in row.strip("|").split("|")]
        if "not in CI" in environments:
            continue
        names = re.findall(r"`([a-z0-9-]+)`", environments)
        if "..." in environments:  # `kornia070` ... `kornia090`: every release environment between
            names += [name for name in envlist if re.fullmatch(r"kornia0\d\d", name)]
        named.update(names)
    assert named == envlist - {"oracle"}
    pyproject = (ROOT / "pyproject.toml").read_text()
    # the bounds are what the table lists: the oldest Python and torch, and below the next minor
    # after the newest (a Python or torch that no stack runs is not claimed)
    python_low, python_high = re.search(r'requires-python = ">=(\d+\.\d+),<(\d+\.\d+)"', pyproject).groups()
    assert python_low == ".".join(map(str, min(pythons)))
    newest = max(pythons)
    assert python_high == f"{newest[0]}.{newest[1] + 1}"
    torch_low, torch_high = re.search(r'"torch>=(\d+\.\d+),<(\d+\.\d+)"', pyproject).groups()
    assert tuple(int(part) for part in torch_low.split(".")) == min(torches)
    assert tuple(int(part) for part in torch_high.split(".")) == (max(torches)[0], max(torches)[1] + 1)
    # every torch minor from the oldest to the newest is in the table (in CI)
    assert {minor for _, minor in torches} == set(range(min(torches)[1], max(torches)[1] + 1))


@pytest.mark.release_independent
def test_every_relative_link_in_the_docs_resolves():
    """README.md and docs/**/*.md link files of the repository that exist (a renamed or deleted
    file leaves no dangling link)."""
    documents = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    checked, dangling = 0, []
    for document in documents:
        for link in re.findall(r"\]\(([^)\s]+)\)", document.read_text()):
            target = link.split("#", 1)[0]
            if not target or re.match(r"[a-z][a-z0-9+.-]*:", target):  # an anchor, or a URL
                continue
            checked += 1
            if not (document.parent / target).exists():
                dangling.append(f"{document.relative_to(ROOT)}: {link}")
    assert checked > 20  # the pattern finds the links
    assert dangling == []
