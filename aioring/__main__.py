"""``python -m aioring``: which backend this process gets here, and why.

Prints the backend aioring chooses in this process (as ``aioring.backend()``
would), and when it is the thread-pool fallback, the reason: the errno of
``io_uring_setup`` and what explains it here (``kernel.io_uring_disabled``, a
seccomp filter, the locked-memory limit, a kernel without io_uring or too old),
each with what to do about it.  Then the kernel's version, the ring features
and the opcodes aioring uses that the kernel's probe found (a missing opcode is
made as a system call instead), and the versions of aioring, of the liburing
it was built against (and whether linked statically) and of Python.

``--json`` prints the same as one JSON object, for scripts.  The exit status
is 0 whichever backend is chosen, 1 when AIORING_BACKEND asks for one that
cannot be had (or has a bad value).
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import json
import os
import platform
import resource
import sys
import warnings
from typing import Any

from . import __version__, _binding
from ._loops import chosen_backend
from ._ring import _REQUIRED_OPS, Ring

# Ring features and setup flags aioring relies on or uses when present.
_FEATURES = {"NODROP": _binding.FEAT_NODROP, "FAST_POLL": _binding.FEAT_FAST_POLL,
             "RW_CUR_POS": _binding.FEAT_RW_CUR_POS}
_SETUP_FLAGS = {"SUBMIT_ALL": _binding.SETUP_SUBMIT_ALL, "COOP_TASKRUN": _binding.SETUP_COOP_TASKRUN,
                "TASKRUN_FLAG": _binding.SETUP_TASKRUN_FLAG}
_SECCOMP_MODES = {0: "none", 1: "strict", 2: "filter"}
_TO_SILENCE = "AIORING_BACKEND=threads keeps the fallback without its warning."


def _opcodes() -> dict[str, int]:
    """Name -> number of every opcode aioring submits."""
    used = _binding.SYNC_OPCODES | set(_REQUIRED_OPS.values())
    names = {name: op for name, op in _binding.opcodes().items() if op in used}
    return dict(sorted(names.items(), key=lambda kv: kv[1]))


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return None


def _seccomp_mode() -> int | None:
    """The Seccomp field of /proc/self/status: 0 none, 1 strict, 2 filter."""
    for line in (_read("/proc/self/status") or "").splitlines():
        if line.startswith("Seccomp:"):
            return int(line.split()[1])
    return None


def _environment() -> dict[str, Any]:
    disabled = _read("/proc/sys/kernel/io_uring_disabled")
    group = _read("/proc/sys/kernel/io_uring_group")
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return {
        "kernel.io_uring_disabled": None if disabled is None else int(disabled),
        "kernel.io_uring_group": None if group is None else int(group),
        "seccomp": _SECCOMP_MODES.get(mode, str(mode)) if (mode := _seccomp_mode()) is not None else None,
        "memlock_bytes": [None if v == resource.RLIM_INFINITY else v for v in (soft, hard)],
    }


def _probe() -> dict[str, Any]:
    """Make a ring as aioring does, on a loop of its own: what the kernel granted,
    or the errno it refused with."""
    loop = asyncio.new_event_loop()
    try:
        ring = Ring(loop)
        try:
            return {
                "available": True, "errno": None, "error": None,
                "features": [n for n, bit in _FEATURES.items() if ring.features & bit],
                "setup_flags": [n for n, bit in _SETUP_FLAGS.items() if ring.setup_flags & bit],
                "opcodes": {name: ring.supports(op) for name, op in _opcodes().items()},
            }
        finally:
            ring.close()
    except OSError as exc:
        code = exc.errno or 0
        return {"available": False, "errno": errno.errorcode.get(code, str(code)), "error": exc.strerror}
    finally:
        loop.close()


def _causes(probe: dict[str, Any], env: dict[str, Any]) -> list[dict[str, str]]:
    """Why io_uring is refused here, each with what to do, from the errno and
    the environment that explains it."""
    code = probe["errno"]
    causes = []
    disabled = env["kernel.io_uring_disabled"]
    if disabled == 2:
        causes.append({"cause": "kernel.io_uring_disabled=2: io_uring is off for every process",
                       "remedy": "sysctl -w kernel.io_uring_disabled=0 (as root)"})
    elif disabled == 1 and code == "EPERM":
        causes.append({"cause": "kernel.io_uring_disabled=1: only privileged processes and members of "
                                f"group {env['kernel.io_uring_group']} (kernel.io_uring_group) may"
                                " make rings",
                       "remedy": "add the user to that group, or sysctl -w kernel.io_uring_disabled=0"})
    if env["seccomp"] == "filter" and code in ("EPERM", "ENOSYS") and not causes:
        causes.append({"cause": f"a seccomp filter refused io_uring_setup with {code} (Docker's and "
                                "Kubernetes' default profiles do)",
                       "remedy": "allow io_uring_setup, io_uring_enter and io_uring_register in the "
                                 "profile (docker run --security-opt seccomp=PROFILE.json; Kubernetes: "
                                 "securityContext.seccompProfile)"})
    if code == "ENOMEM":
        soft = env["memlock_bytes"][0]
        limit = "unlimited" if soft is None else f"{soft // 1024} KiB"
        causes.append({"cause": "the ring's memory counts against the locked-memory limit on kernels "
                                f"before 5.12 (RLIMIT_MEMLOCK here: {limit})",
                       "remedy": "raise it: ulimit -l, LimitMEMLOCK= in a systemd unit, "
                                 "docker run --ulimit memlock=-1"})
    if code == "ENOSYS" and not causes:
        too_old = "opcodes" in (probe["error"] or "") or "NODROP" in (probe["error"] or "")
        missing = "the kernel has no io_uring (built without CONFIG_IO_URING, or before 5.1)"
        causes.append({"cause": "this kernel's io_uring is too old for aioring" if too_old else missing,
                       "remedy": "Linux 5.15 or later with io_uring"})
    if not causes:
        causes.append({"cause": f"io_uring_setup failed: {probe['error']} ({code})",
                       "remedy": "see io_uring_setup(2) for this errno"})
    return causes


def diagnose() -> dict[str, Any]:
    """The report, as a JSON-ready dict: what ``python -m aioring --json`` prints."""
    requested = os.environ.get("AIORING_BACKEND", "")
    report: dict[str, Any] = {
        "aioring": __version__,
        "liburing": {"version": ("{}.{}".format(*_binding.LIBURING_VERSION)
                                 if _binding.LIBURING_VERSION else None),
                     "linked": "static" if _binding.LIBURING_STATIC else "shared"},
        "python": f"{platform.python_version()} ({platform.python_implementation()})",
        "kernel": platform.release(),
        "AIORING_BACKEND": requested or None,
        "backend": None, "backend_error": None,
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the report says it, with more
        try:
            report["backend"] = chosen_backend()
        except (OSError, ValueError) as exc:
            report["backend_error"] = f"{type(exc).__name__}: {exc}"
    env = _environment()
    probe = _probe()
    report["io_uring"] = probe
    report["environment"] = env
    report["causes"] = [] if probe["available"] else _causes(probe, env)
    if report["backend"] == "threads" and requested.strip().lower() == "threads":
        report["causes"].insert(0, {"cause": "AIORING_BACKEND=threads asks for the fallback",
                                    "remedy": "unset AIORING_BACKEND to use io_uring where the kernel "
                                              "allows it"})
    return report


def render(report: dict[str, Any]) -> str:
    """The report as text for a reader."""
    lines = []
    if report["backend"] is None:
        lines.append(f"backend:  none: {report['backend_error']}")
    else:
        lines.append(f"backend:  {report['backend']}")
    probe = report["io_uring"]
    if probe["available"]:
        lines.append("io_uring: available")
    else:
        lines.append(f"io_uring: refused: io_uring_setup failed with {probe['errno']} ({probe['error']})")
    for cause in report["causes"]:
        lines.append(f"  why:  {cause['cause']}")
        lines.append(f"  do:   {cause['remedy']}")
    if report["backend"] == "threads" and report["AIORING_BACKEND"] is None:
        lines.append(f"  (or: {_TO_SILENCE})")
    lines.append(f"kernel:   {report['kernel']}")
    if probe["available"]:
        lines.append("features: " + (" ".join(probe["features"]) or "-"))
        lines.append("setup:    " + (" ".join(probe["setup_flags"]) or "-"))
        found = [n for n, ok in probe["opcodes"].items() if ok]
        lacking = [n for n, ok in probe["opcodes"].items() if not ok]
        lines.append(f"opcodes:  {' '.join(found)}")
        if lacking:
            lines.append(f"lacking:  {' '.join(lacking)} (made as system calls by worker threads)")
    env = report["environment"]
    soft, hard = ("unlimited" if v is None else f"{v // 1024} KiB" for v in env["memlock_bytes"])
    lines.append(f"limits:   kernel.io_uring_disabled={env['kernel.io_uring_disabled']}, "
                 f"seccomp={env['seccomp']}, memlock={soft} (hard {hard})")
    lib_ = report["liburing"]
    lines.append(f"versions: aioring {report['aioring']}, liburing {lib_['version'] or 'unknown'} "
                 f"({lib_['linked']}), Python {report['python']}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Print the diagnosis; 1 when the backend AIORING_BACKEND asks for cannot be had."""
    parser = argparse.ArgumentParser(prog="python -m aioring", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object, for scripts")
    args = parser.parse_args(argv)
    report = diagnose()
    sys.stdout.write(json.dumps(report, indent=2) + "\n" if args.json else render(report))
    return 1 if report["backend"] is None else 0


if __name__ == "__main__":
    sys.exit(main())
