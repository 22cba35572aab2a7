"""Every setting of the shim, declared once: its apply() keyword, its environment variable, the
values it takes, its default, what it does and the fix it belongs to.

``apply()`` checks keywords and variables against this table before it patches anything
(``check``), the fixes read their settings through it (``resolve``, ``read_switch``) and
the CLI lists it (``kornia-halfpatch --options``). Values are read from
``os.environ`` each time they are asked for, never kept: a variable changed between two
``apply()`` calls decides the second one.

A declaration: the standard library only (the pytest plugin, the start-up hook's ``apply()``
and the selection read it without importing torch, kornia or any fix module).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Dict, Iterable, Optional, Tuple

CHOICE = "choice"  # one of ``choices``
SWITCH = "switch"  # 1/yes/true/on or 0/no/false/off; anything else: not set
FLAG = "flag"  # set unless empty or 0/false/no/off
NAMES = "names"  # comma-separated fix names
BOOLEAN = "boolean"  # apply() keyword only: True or False
PATH = "path"  # a directory, read as written (not lower-cased)

# What a value outside ``choices`` set in the environment does (a bad apply() keyword always raises).
RAISE = "raise"  # apply() raises ValueError before anything is patched
WARN = "warn"  # apply() warns (HalfPatchWarning); the default is used
NOTE = "note"  # the default is used, and the fix's reason says so
IGNORE = "ignore"  # the default is used

_TRUE = ("1", "yes", "true", "on")
_FALSE = ("0", "no", "false", "off")


@dataclass(frozen=True)
class Option:
    name: str  # the apply() keyword (``keyword``), else the name the CLI lists it under
    doc: str
    kind: str
    default: Any = None
    choices: Tuple[str, ...] = ()
    variable: Optional[str] = None  # the environment variable, if any
    keyword: bool = False  # whether apply() takes it as a keyword argument
    fix: Optional[str] = None  # the fix it configures; None: the shim as a whole
    bad_variable: str = IGNORE

    def raw(self) -> str:
        """The variable's value now, stripped and lower-cased ("" when unset)."""
        return os.environ.get(self.variable or "", "").strip().lower() if self.variable else ""

    def allowed(self) -> str:
        if self.kind == CHOICE:
            return ", ".join(self.choices)
        if self.kind == SWITCH:
            return "1 or 0; unset: ask the CPU"
        if self.kind == FLAG:
            return "1 to set"
        if self.kind == NAMES:
            return "comma-separated fix names"
        if self.kind == PATH:
            return "a directory"
        return "True or False"


DISABLE = Option("disable", "turn the shim off whatever the code asks", FLAG, False,
                 variable="KORNIA_HALFPATCH_DISABLE")
FIXES = Option("only", "apply only these fixes (apply(only=...) beats the variable)", NAMES,
               variable="KORNIA_HALFPATCH_FIXES", keyword=True)
EXCLUDE = Option("exclude", "apply every fix but these (apply(exclude=...) beats the variable)", NAMES,
                 variable="KORNIA_HALFPATCH_EXCLUDE", keyword=True)
AUTO = Option("auto", "apply the shim in every Python process that imports kornia (set by `kornia-halfpatch run`)",
              FLAG, False, variable="KORNIA_HALFPATCH_AUTO")
GRID_SAMPLE_WORKAROUND = Option(
    "grid_sample_workaround",
    "the grid_sample CPU workaround: by torch version (auto), by running the probe, or forced",
    CHOICE, "auto", ("auto", "probe", "none", "no-kernel", "overflow"),
    variable="KORNIA_HALFPATCH_GRID_SAMPLE_WORKAROUND", keyword=True, fix="warp_sampling", bad_variable=RAISE,
)
GRID_SAMPLE_EVERYWHERE = Option(
    "grid_sample_everywhere", "replace torch.nn.functional.grid_sample for every caller, not only kornia's",
    BOOLEAN, False, keyword=True, fix="warp_sampling",
)
CPU_HALF = Option(
    "cpu_half", "how kornia's learned modules compute float16 and bfloat16 on CPU: by the CPU's capabilities (auto), or forced",
    CHOICE, "auto", ("auto", "native", "float32"),
    variable="KORNIA_HALFPATCH_CPU_HALF", keyword=True, fix="networks_cpu_half", bad_variable=WARN,
)
CPU_NATIVE_HALF = Option(
    "cpu_native_half", "what cpu_half=auto believes: 1 = this CPU has float16 arithmetic, 0 = it has not",
    SWITCH, variable="KORNIA_HALFPATCH_CPU_NATIVE_HALF", fix="networks_cpu_half",
)
CPU_NATIVE_BFLOAT16 = Option(
    "cpu_native_bfloat16", "what cpu_half=auto believes for bfloat16: 1 = this CPU has bfloat16 arithmetic, 0 = it has not",
    SWITCH, variable="KORNIA_HALFPATCH_CPU_NATIVE_BFLOAT16", fix="networks_cpu_half",
)
FILTERS_CONV_HANG = Option(
    "filters_conv_hang", "the float16 depthwise conv2d hang workaround: by the CPU's avx512_fp16 (auto), or forced",
    CHOICE, "auto", ("auto", "on", "off"),
    variable="KORNIA_HALFPATCH_FILTERS_CONV_HANG", fix="filters_conv_hang", bad_variable=NOTE,
)
CPU_AVX512_FP16 = Option(
    "cpu_avx512_fp16", "whether the CPU is taken to report avx512_fp16 (1 or 0), instead of asking it",
    SWITCH, variable="KORNIA_HALFPATCH_CPU_AVX512_FP16", fix="filters_conv_hang",
)
CACHE = Option(
    "cache", "keep what a first apply() learns (probe answers) on disk for the next process on this installation",
    SWITCH, True, variable="KORNIA_HALFPATCH_CACHE",
)
CACHE_DIR = Option(
    "cache_dir", "where that cache lives (else $XDG_CACHE_HOME/kornia-halfpatch, or ~/.cache/kornia-halfpatch)",
    PATH, variable="KORNIA_HALFPATCH_CACHE_DIR",
)

OPTIONS: Tuple[Option, ...] = (
    DISABLE, FIXES, EXCLUDE, AUTO, CACHE, CACHE_DIR,
    GRID_SAMPLE_WORKAROUND, GRID_SAMPLE_EVERYWHERE, CPU_HALF, CPU_NATIVE_HALF, CPU_NATIVE_BFLOAT16, FILTERS_CONV_HANG, CPU_AVX512_FP16,
)


def keywords_of(fix: str) -> Tuple[str, ...]:
    """The apply() keywords that configure ``fix``."""
    return tuple(option.name for option in OPTIONS if option.fix == fix and option.keyword)


def fix_keywords() -> Dict[str, Option]:
    """apply()'s keyword options that belong to a fix (``only``/``exclude`` are its parameters)."""
    return {option.name: option for option in OPTIONS if option.keyword and option.fix is not None}


# --------------------------------------------------------------------------------------------
# Reading (now, from os.environ)


def read_flag(option: Option) -> bool:
    return option.raw() not in ("",) + _FALSE


def read_names(option: Option) -> Optional[Tuple[str, ...]]:
    raw = os.environ.get(option.variable or "")
    if raw is None or not raw.strip():
        return None
    return tuple(item.strip() for item in raw.split(",") if item.strip())


def read_path(option: Option) -> str:
    """The variable's value as written (stripped), "" when unset."""
    return os.environ.get(option.variable or "", "").strip()


def read_switch(option: Option) -> Optional[bool]:
    """True or False where the variable says so, None where it is unset or says neither."""
    raw = option.raw()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    return None


@dataclass(frozen=True)
class Setting:
    value: Any
    source: str  # "apply(name=...)", the variable's name, or "default"
    problem: str = ""  # a bad value in the environment, replaced by the default


def resolve(option: Option, given: Dict[str, Any]) -> Setting:
    """The value in force: the apply() keyword given beats the variable beats the default. A bad
    keyword value raises ValueError; a bad variable value raises too where ``bad_variable`` is
    RAISE, and otherwise gives the default with ``problem`` saying why."""
    if option.keyword and option.name in given:
        value = given[option.name]
        error = keyword_error(option, value)
        if error:
            raise ValueError(error)
        return Setting(value, f"apply({option.name}=...)")
    raw = option.raw()
    if option.kind == CHOICE and raw:
        if raw in option.choices:
            return Setting(raw, option.variable or option.name)
        problem = f"{option.variable}={raw!r} is not one of {', '.join(option.choices)}"
        if option.bad_variable == RAISE:
            raise ValueError(problem)
        return Setting(option.default, "default", problem)
    return Setting(option.default, "default")


def keyword_error(option: Option, value: Any) -> str:
    if option.kind == BOOLEAN and not isinstance(value, bool):
        return f"{option.name} must be True or False, got {value!r}"
    if option.kind == CHOICE and value not in option.choices:
        return f"{option.name} must be one of {', '.join(option.choices)}, got {value!r}"
    return ""


def check(given: Dict[str, Any], fixes: Iterable[str], warn: Any) -> None:
    """apply()'s check of the caller's settings, before anything is patched: bad keyword values
    of the selected ``fixes`` raise, bad variable values raise or warn (``warn(message)``) as
    their option declares. Unknown keywords are the caller's (``_selection``) to reject."""
    selected = set(fixes)
    for option in OPTIONS:
        if option.fix is None or option.fix not in selected:
            continue
        if option.keyword and option.name in given:
            error = keyword_error(option, given[option.name])
            if error:
                raise ValueError(error)
            continue
        setting = resolve(option, given)  # raises for RAISE
        if setting.problem and option.bad_variable == WARN:
            warn(f"{setting.problem}: using {option.default!r}")


def describe(option: Option) -> str:
    """One line for the CLI: names, allowed values, default, owner, and what it does."""
    names = " / ".join(
        part for part in (f"apply({option.name}=...)" if option.keyword else "", option.variable or "") if part
    )
    owner = option.fix or "the shim"
    default = f"; default {option.default!r}" if option.default not in (None, False) else ""
    now = f"; set now: {os.environ[option.variable]!r}" if option.variable and option.variable in os.environ else ""
    return f"{names} [{owner}]: {option.doc} ({option.allowed()}{default}){now}"
