"""Probe answers (and the routes read from kornia's bytecode) kept on disk between processes, so that a program's first ``apply()`` does not
run kornia's computations in half again to learn what the last process on the same installation
learnt (the probes were most of a first ``apply()``'s time, and every worker spawned under
``KORNIA_HALFPATCH_AUTO=1`` pays a first ``apply()``).

An answer is kept under a key of everything that can change it, in two parts:

* the installation (one file per installation): this package's own source (a hash of its files),
  kornia's version, install path and the modification time of its files' directory entries,
  torch's version and build, the Python version, the CPU capability torch dispatches to
  (``torch.backends.cpu.get_cpu_capability()``, which ``ATEN_CPU_CAPABILITY`` lowers), the CPU
  features the fixes read (``torch.cpu.get_capabilities()``, ``/proc/cpuinfo``'s flags) and the
  oneDNN ISA limits (``ONEDNN_MAX_CPU_ISA``, ``DNNL_MAX_CPU_ISA``);
* the answer: what was probed (a fix's probe, a kernel, a fix's own probe), the originals it was
  asked about (their module, qualified name, source file, line and bytecode: a function replaced
  before ``apply()`` is another original), the shim's ``KORNIA_HALFPATCH_*`` variables and the
  fix's ``apply()`` options.

Only an answer from a probe that ran and returned is kept: a probe that raised (the fix then
fails and is skipped) is asked again next time. The cache never raises into the program: an
unreadable, corrupt or unwritable cache is ignored (a read-only home works, without a cache).
Files are replaced atomically (a temporary file, then ``os.replace``).

``KORNIA_HALFPATCH_CACHE=0`` turns it off; ``KORNIA_HALFPATCH_CACHE_DIR`` says where it lives
(default ``$XDG_CACHE_HOME/kornia-halfpatch``, else ``~/.cache/kornia-halfpatch``).
"""

from __future__ import annotations

import hashlib
import json
import marshal
import os
import sys
import tempfile
import threading
import types
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from . import _options as options_manifest

ENV_CACHE = options_manifest.CACHE.variable
ENV_CACHE_DIR = options_manifest.CACHE_DIR.variable
# The cache's own variables are not part of an answer's key: they decide where answers are kept,
# not what a probe finds.
OWN_VARIABLES = (ENV_CACHE, ENV_CACHE_DIR)
FORMAT = 1

_lock = threading.RLock()
# The file of this installation, read once per process: (path, answers, answers not yet written).
_loaded: Optional[Tuple[str, Dict[str, Any], Dict[str, Any]]] = None


def enabled() -> bool:
    return options_manifest.read_switch(options_manifest.CACHE) is not False


def directory() -> str:
    chosen = options_manifest.read_path(options_manifest.CACHE_DIR)
    if chosen:
        return chosen
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "kornia-halfpatch")


def _package_digest(root: Optional[str] = None) -> str:
    """A hash of this package's source files as Python's bytecode cache tells them apart (path,
    modification time, size): another shim (an edited checkout, another release) probes with
    other code and may find something else. Their contents were read and hashed before: 1.5 ms
    of every warm apply() for the same answer."""
    digest = hashlib.sha256()
    root = root or os.path.dirname(os.path.abspath(__file__))
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = sorted(name for name in subfolders if name != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                mtime, size = file_stamp(path)
                digest.update(f"{os.path.relpath(path, root)}\0{mtime}\0{size}\n".encode())
    return digest.hexdigest()


def file_stamp(path: str) -> Tuple[int, int]:
    """``(modification time in ns, size)``: what Python's bytecode cache tells a changed file by."""
    status = os.stat(path)
    return status.st_mtime_ns, status.st_size


def _installation() -> Dict[str, Any]:
    import platform

    kornia, torch = sys.modules["kornia"], sys.modules["torch"]  # KeyError before they are imported: no cache

    from ._torch_compat import _cpuinfo_flags, cpu_capabilities

    kornia_dir = os.path.dirname(os.path.abspath(kornia.__file__))
    capability = getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", None)
    return {
        "format": FORMAT,
        "shim": _package_digest(),
        "kornia": [kornia.__version__, kornia_dir, file_stamp(kornia_dir), file_stamp(os.path.abspath(kornia.__file__))],
        "torch": [torch.__version__, getattr(torch.version, "git_version", None), os.path.dirname(torch.__file__)],
        "python": [sys.version, sys.implementation.cache_tag, platform.machine()],
        "cpu_capability": capability() if capability is not None else None,
        "cpu_features": sorted((str(k), repr(v)) for k, v in cpu_capabilities().items()),
        "cpuinfo_flags": sorted(_cpuinfo_flags()),
        "variables": {name: os.environ.get(name) for name in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")},
    }


_name: Optional[str] = None  # this installation's file name, computed once per process
# The variables that decide whether and where answers are kept, as last read, and what they
# decided: remembered() asks for every answer (about 600 in a first apply(): every kornia
# module's routes, every generated wrapper), and reading them through os.environ (which encodes
# each name and decodes each value) was an eighth of a warm apply().
_CACHE_VARIABLES = (ENV_CACHE, ENV_CACHE_DIR, "XDG_CACHE_HOME", "HOME")
_RAW_CACHE_VARIABLES = tuple(os.fsencode(name) for name in _CACHE_VARIABLES) if os.name == "posix" else ()
_placed: Optional[Tuple[Tuple[Any, ...], bool, str]] = None  # (raw variables, enabled(), directory())


def _raw_cache_variables() -> Tuple[Any, ...]:
    """The raw values of the cache's variables: from os.environ's own byte mapping on POSIX (no
    encoding or decoding), else through os.environ. Only compared, never interpreted."""
    data = getattr(os.environ, "_data", None)
    if _RAW_CACHE_VARIABLES and isinstance(data, dict):
        return tuple(map(data.get, _RAW_CACHE_VARIABLES))
    return tuple(os.environ.get(name) for name in _CACHE_VARIABLES)


def _placement() -> Tuple[bool, str]:
    """``(enabled(), directory())``, computed again only when one of their variables changed."""
    global _placed
    raw = _raw_cache_variables()
    known = _placed
    if known is None or known[0] != raw:
        known = _placed = (raw, enabled(), directory())
    return known[1], known[2]


def _file() -> Tuple[str, Dict[str, Any], Dict[str, Any]]:
    global _loaded, _name
    if _name is None:
        key = hashlib.sha256(json.dumps(_installation(), sort_keys=True, default=repr).encode()).hexdigest()
        _name = f"probes-{key[:40]}.json"
    path = os.path.join(_placement()[1], _name)
    if _loaded is None or _loaded[0] != path:
        # First use, or KORNIA_HALFPATCH_CACHE_DIR changed since: the same installation, another place.
        _loaded = (path, _read(path), {})
    return _loaded


def _read(path: str) -> Dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as stored:
            content = json.load(stored)
        answers = content.get("answers") if isinstance(content, dict) and content.get("format") == FORMAT else None
        return dict(answers) if isinstance(answers, dict) else {}
    except Exception:  # noqa: BLE001 - missing, unreadable or corrupt: no cached answers
        return {}


def fingerprint(obj: Any) -> Optional[Any]:
    """What identifies an original across processes, or None if nothing does (then its
    answers are not kept): a function by its names, source position and bytecode."""
    function = obj.__func__ if isinstance(obj, (staticmethod, classmethod)) else obj
    if obj is None:
        return None
    if isinstance(function, types.FunctionType):
        code = function.__code__
        wrapped = function.__dict__.get("__wrapped__")
        inner = fingerprint(wrapped) if wrapped is not None else None
        if wrapped is not None and inner is None:
            raise _Unkeyable
        return [
            type(obj).__name__, function.__module__, function.__qualname__, code.co_filename, code.co_firstlineno,
            _code_digest(code), inner,
        ]
    if isinstance(function, (types.BuiltinFunctionType, type)):
        return [type(function).__name__, getattr(function, "__module__", None), getattr(function, "__qualname__", None)]
    if type(function).__name__ == "ScriptFunction":  # a @torch.jit.script function (kornia 0.8.3's epipolar metrics)
        code = getattr(function, "code", None)
        if isinstance(code, str):
            return ["ScriptFunction", getattr(function, "qualified_name", None), hashlib.sha256(code.encode()).hexdigest()[:24]]
    raise _Unkeyable


# id(code) -> (the code object, its digest): a function's digest is asked for each of its answers.
_digests: Dict[int, Tuple[types.CodeType, str]] = {}


def _code_digest(code: types.CodeType) -> str:
    """A hash of what a function computes: its bytecode, names and constants (nested code
    objects by their own hash; sets sorted, their order varies with the hash seed)."""
    known = _digests.get(id(code))
    if known is not None and known[0] is code:
        return known[1]
    digest = _computed_digest(code)
    _digests[id(code)] = (code, digest)  # the code object is kept: its id is not reused
    return digest


def _computed_digest(code: types.CodeType) -> str:
    if not _holds_a_set(code):
        # marshal's format 2 writes no back-references (those follow reference counts), so its
        # bytes are a function of the code object alone: a third of the time of the walk below,
        # which was a twelfth of a warm apply() (about 230 originals fingerprinted).
        return "m" + hashlib.sha256(marshal.dumps(code, 2)).hexdigest()[:23]
    digest = hashlib.sha256(code.co_code)
    digest.update(repr((code.co_names, code.co_varnames, code.co_freevars)).encode())
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            digest.update(_code_digest(constant).encode())
        elif isinstance(constant, frozenset):
            digest.update(repr(sorted(map(repr, constant))).encode())
        else:
            digest.update(repr(constant).encode())
    return digest.hexdigest()[:24]


def _holds_a_set(code: types.CodeType) -> bool:
    """Whether ``code`` or a code object inside it has a frozenset constant (``x in {"a", "b"}``),
    which marshal writes in hash order: another order, so another digest, in every process."""
    return any(
        isinstance(constant, frozenset) or (isinstance(constant, types.CodeType) and _holds_a_set(constant))
        for constant in code.co_consts
    )


class _Unkeyable(Exception):
    """An original with no identity that survives the process: its answer is not kept."""


# The shim's variables as last read, with the environment they were read from: settings() is
# asked for every kept answer (600 in a first apply()), and decoding all of os.environ each
# time was a tenth of a warm apply(). A snapshot of the raw bytes compares at C speed.
_variables_read: Optional[Tuple[Any, List[Tuple[str, str]]]] = None


def _shim_variables() -> List[Tuple[str, str]]:
    global _variables_read
    raw = getattr(os.environ, "_data", None)
    snapshot = tuple(raw.items()) if isinstance(raw, dict) else None
    known = _variables_read
    if snapshot is not None and known is not None and known[0] == snapshot:
        return known[1]
    variables = sorted(
        (k, v) for k, v in os.environ.items() if k.startswith("KORNIA_HALFPATCH_") and k not in OWN_VARIABLES
    )
    _variables_read = (snapshot, variables)
    return variables


def settings(options: Optional[Dict[str, Any]] = None) -> Any:
    return [list(_shim_variables()), sorted((k, repr(v)) for k, v in (options or {}).items())]


def _entry(what: str, originals: Sequence[Any], options: Optional[Dict[str, Any]], by_settings: bool) -> str:
    if not originals and not by_settings:
        return what  # read for each kornia module and each generated wrapper: kept cheap
    return json.dumps(
        [what, [fingerprint(original) for original in originals], settings(options) if by_settings else None], default=repr
    )


def a_bool(stored: Any) -> bool:
    """A stored answer that must be a bool (``remembered``'s ``decode``; anything else is recomputed)."""
    if not isinstance(stored, bool):
        raise TypeError(stored)
    return stored


def an_int(stored: Any) -> int:
    """A stored answer that must be an int (not a bool)."""
    if not isinstance(stored, int) or isinstance(stored, bool):
        raise TypeError(stored)
    return stored


def remembered(
    what: str,
    compute: Callable[[], Any],
    encode: Callable[[Any], Any],
    decode: Callable[[Any], Any],
    originals: Sequence[Any] = (),
    options: Optional[Dict[str, Any]] = None,
    by_settings: bool = True,
) -> Any:
    """``compute()``'s answer, from this installation's cache if it holds one for ``what`` with
    these originals and settings; else computed, and kept if it returned (``encode`` makes it
    JSON, ``decode`` makes it again; a stored value ``decode`` rejects is computed again).
    ``by_settings=False``: an answer that no setting changes (read from kornia's code alone)."""
    entry = None
    if _placement()[0]:
        try:
            with _lock:
                loaded = _file()
                entry = _entry(what, originals, options, by_settings)
                if entry in loaded[1]:
                    return decode(loaded[1][entry])
        except Exception:  # noqa: BLE001 - no cache for this answer; the probe runs
            pass
    value = compute()
    if entry is not None:
        try:
            encoded = encode(value)
            json.dumps(encoded)
            with _lock:
                loaded = _file()
                loaded[1][entry] = encoded
                loaded[2][entry] = encoded
        except Exception:  # noqa: BLE001 - not kept
            pass
    return value


def save() -> None:
    """Write the answers learnt since the last save (merged with what other processes wrote
    meanwhile), atomically; any failure leaves the cache as it was."""
    if _loaded is None or not _loaded[2] or not enabled():
        return
    with _lock:
        path, answers, fresh = _loaded
        try:
            merged = _read(path)
            merged.update(fresh)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            handle, temporary = tempfile.mkstemp(prefix=".probes-", suffix=".tmp", dir=os.path.dirname(path))
            try:
                with os.fdopen(handle, "w", encoding="utf-8") as out:
                    json.dump({"format": FORMAT, "answers": merged}, out, sort_keys=True)
                os.replace(temporary, path)
            except BaseException:
                try:
                    os.unlink(temporary)
                except OSError:
                    pass
                raise
            fresh.clear()
            answers.update(merged)
        except Exception:  # noqa: BLE001 - unwritable (read-only home, full disk): kept in memory only
            fresh.clear()


def forget_loaded() -> None:
    """Read the cache file again on next use (for tests that change the environment)."""
    global _loaded, _name
    with _lock:
        _loaded = _name = None
