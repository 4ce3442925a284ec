"""Fail unless every shared object in the given wheels needs only glibc.

Reads each ELF file's DT_NEEDED entries (readelf -d) and the wheel's file
list: a library auditwheel grafted into the wheel (``*.libs/``) or a NEEDED
entry outside glibc means the wheel would need that library on the target.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import zipfile

GLIBC = re.compile(r"^(libc\.so\.6|libm\.so\.6|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1|"
                   r"libutil\.so\.1|ld-linux[-\w.]*\.so\.\d)$")


def needs(wheel: str) -> list[str]:
    """What `wheel` needs beyond glibc, as 'member: library' lines."""
    problems = []
    with zipfile.ZipFile(wheel) as zf, tempfile.TemporaryDirectory() as tmp:
        for name in zf.namelist():
            if ".libs/" in name:
                problems.append(f"{name}: a library grafted into the wheel")
            if not re.search(r"\.so(\.|$)", name):
                continue
            path = zf.extract(name, tmp)
            out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True).stdout
            for lib in re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out):
                if not GLIBC.match(lib):
                    problems.append(f"{name}: {lib}")
    return problems


def main(wheels: list[str]) -> int:
    if not wheels:
        print("wheel_needs: no wheel given", file=sys.stderr)
        return 2
    bad = [f"{w}: {p}" for w in wheels for p in needs(w)]
    for line in bad:
        print("needs more than glibc:", line, file=sys.stderr)
    if not bad:
        print("wheel_needs: only glibc:", " ".join(wheels))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
