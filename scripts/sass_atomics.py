#!/usr/bin/env python3
"""Which global atomics each CUDA kernel's SASS issues, and which of them return a value that nobody reads.

  python3 scripts/sass_atomics.py BINARY [--kernels REGEX] [--all]
  python3 scripts/sass_atomics.py --sass FILE [--kernels REGEX] [--all]

BINARY is run through `cuobjdump -sass` (the CUDA toolkit's: $CUOBJDUMP, else PATH, else /usr/local/cuda/bin, else
build/tools/cuobjdump; toolkits without it, like this project's build machine's, get it with `--fetch`, which
downloads the `nvidia-cuda-cuobjdump` and `nvidia-cuda-nvdisasm` wheels from PyPI into build/tools); FILE is that
command's saved output. One line per kernel with a global atomic (`--all`: also the kernels without one): the
counts of each atomic opcode, and the returning ones (ATOMG / ATOM) whose destination is RZ, i.e. whose value is
discarded.

Why: ptxas sometimes keeps an atomicAdd whose result is unused as a returning ATOMG (`ATOMG ... PT, RZ`) instead
of a reduction (REDG). Where it sits in a loop that can cost far more than the atomic's traffic: the forward-
statistics form's two scalar r_i atomics cost its backward main kernel 261 µs at D = 128, N = 4k until v3.49 wrote
them as PTX `red` (docs/perf-notes.md, session 40), while the same change to the default form's record moved
nothing (v3.46). One just before the kernel's EXIT (an end-of-kernel counter) is reported as "at exit" and is not
counted against the kernel.

Exit status: 0 when no selected kernel has an unread returning atomic (but at exit), 1 when one has, 2 for a usage
error, a missing file, a failed cuobjdump or SASS without any kernel in it.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

FUNCTION = re.compile(r"^\s*Function : (\S+)")
# One SASS instruction: "/*0a40*/  @!P0 ATOMG.E.ADD.STRONG.GPU PT, R4, desc[UR4][R2.64], R5 ;"
INSTR = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Za-z0-9_.]*)\s*([^;]*);")
ATOMIC = re.compile(r"^(ATOMG|ATOM|REDG|RED)(\.|$)")  # global (or generic) atomics; ATOMS (shared) is not one
RETURNING = re.compile(r"^(ATOMG|ATOM)(\.|$)")
PREDICATE = re.compile(r"^U?P[T0-6]$")  # a returning atomic's first operand, its predicate result
EXIT_WINDOW = 3  # instructions after a discarded-result atomic within which an EXIT makes it "at exit"
TOOLS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build", "tools")
# cuobjdump -sass runs nvdisasm from its own folder: both come from the CUDA 13 toolkit's wheels, like nvcc's.
WHEELS = {"cuobjdump": "nvidia-cuda-cuobjdump>=13,<14", "nvdisasm": "nvidia-cuda-nvdisasm>=13,<14"}


def find_cuobjdump():
    for cand in (os.environ.get("CUOBJDUMP"), shutil.which("cuobjdump"), "/usr/local/cuda/bin/cuobjdump",
                 os.path.join(TOOLS, "cuobjdump")):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


def fetch_cuobjdump(tools=TOOLS, pip=(sys.executable, "-m", "pip")):
    """cuobjdump and nvdisasm from their PyPI wheels into tools/ (each written under a temporary name, then renamed,
    cuobjdump last); cuobjdump's path, or None with the reason on stderr."""
    import tempfile
    import zipfile
    os.makedirs(tools, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=tools) as tmp:
        for tool in ("nvdisasm", "cuobjdump"):
            spec, into = WHEELS[tool], os.path.join(tmp, tool + ".d")
            r = subprocess.run([*pip, "download", "--no-deps", "-q", "--disable-pip-version-check", spec, "-d", into],
                               capture_output=True, text=True)
            wheels = [f for f in os.listdir(into) if f.endswith(".whl")] if os.path.isdir(into) else []
            if r.returncode != 0 or not wheels:
                print(f"sass_atomics: pip download {spec} failed: {(r.stderr or r.stdout).strip()[-300:]}",
                      file=sys.stderr)
                return None
            with zipfile.ZipFile(os.path.join(into, wheels[0])) as z:
                members = [n for n in z.namelist() if n.endswith("/bin/" + tool)]
                if not members:
                    print(f"sass_atomics: no bin/{tool} in {wheels[0]}", file=sys.stderr)
                    return None
                part = os.path.join(tmp, tool)
                with z.open(members[0]) as src, open(part, "wb") as dst:
                    shutil.copyfileobj(src, dst)
            os.chmod(part, 0o755)
            os.replace(part, os.path.join(tools, tool))
    return os.path.join(tools, "cuobjdump")


def parse(text):
    """{kernel (mangled): [(opcode, operands), ...]} in SASS order, every instruction kept."""
    kernels, cur = {}, None
    for line in text.splitlines():
        m = FUNCTION.match(line)
        if m:
            cur = m.group(1)
            kernels.setdefault(cur, [])
            continue
        if cur is None:
            continue
        m = INSTR.match(line)
        if m:
            kernels[cur].append((m.group(1), m.group(2).strip()))
    return kernels


def discards_result(opcode, operands):
    """A returning atomic (ATOMG / ATOM, not ATOMS) whose destination register is RZ."""
    if not RETURNING.match(opcode):
        return False
    parts = [p.strip() for p in operands.split(",")]
    if parts and PREDICATE.match(parts[0]):
        parts = parts[1:]
    return bool(parts) and parts[0] == "RZ"


def summarize(instrs):
    """(opcode counts, unread returning atomics in the body, unread returning atomics at exit)."""
    counts, unread, at_exit = {}, 0, 0
    for k, (op, operands) in enumerate(instrs):
        if not ATOMIC.match(op):
            continue
        discarded = discards_result(op, operands)
        key = op + (" (result unused)" if discarded else "")
        counts[key] = counts.get(key, 0) + 1
        if discarded:
            if any(o.startswith("EXIT") for o, _ in instrs[k + 1:k + 1 + EXIT_WINDOW]):
                at_exit += 1
            else:
                unread += 1
    return counts, unread, at_exit


def demangle(names):
    filt = shutil.which("c++filt")
    if not filt or not names:
        return {n: n for n in names}
    r = subprocess.run([filt], input="\n".join(names), capture_output=True, text=True)
    out = r.stdout.splitlines()
    return dict(zip(names, out)) if r.returncode == 0 and len(out) == len(names) else {n: n for n in names}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("binary", nargs="?", help="an executable or object with CUDA code (run through cuobjdump -sass)")
    ap.add_argument("--sass", help="saved `cuobjdump -sass` output instead of a binary")
    ap.add_argument("--kernels", default="", help="only kernels whose demangled name matches this regex")
    ap.add_argument("--all", action="store_true", help="also list the kernels without a global atomic")
    ap.add_argument("--fetch", action="store_true",
                    help="without a cuobjdump, download it from PyPI into build/tools first")
    a = ap.parse_args(argv)
    if (a.binary is None) == (a.sass is None):
        print("sass_atomics: give a BINARY or --sass FILE (one of them)", file=sys.stderr)
        return 2
    try:
        sel = re.compile(a.kernels)
    except re.error as e:
        print(f"sass_atomics: --kernels is not a valid regex: {e}", file=sys.stderr)
        return 2
    if a.sass is not None:
        try:
            with open(a.sass, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError as e:
            print(f"sass_atomics: cannot read {a.sass}: {e.strerror}", file=sys.stderr)
            return 2
    else:
        if not os.path.isfile(a.binary):
            print(f"sass_atomics: no file {a.binary}", file=sys.stderr)
            return 2
        tool = find_cuobjdump()
        if tool is None and a.fetch:
            tool = fetch_cuobjdump()
        if tool is None:
            print("sass_atomics: cuobjdump not found ($CUOBJDUMP, PATH, /usr/local/cuda/bin, build/tools); "
                  "--fetch downloads it (the nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm wheels)", file=sys.stderr)
            return 2
        r = subprocess.run([tool, "-sass", a.binary], capture_output=True, text=True)
        if r.returncode != 0:
            print(f"sass_atomics: cuobjdump -sass {a.binary} failed: {r.stderr.strip()[:300]}", file=sys.stderr)
            return 2
        text = r.stdout
    kernels = parse(text)
    if not kernels:
        print("sass_atomics: no kernel ('Function : ...') in the SASS", file=sys.stderr)
        return 2
    names = demangle(list(kernels))
    bad = shown = 0
    for mangled, instrs in kernels.items():
        name = names[mangled]
        if not sel.search(name):
            continue
        counts, unread, at_exit = summarize(instrs)
        if not counts and not a.all:
            continue
        shown += 1
        bad += unread > 0
        ops = ", ".join(f"{op} x{n}" for op, n in sorted(counts.items())) or "no global atomic"
        flag = f"  <-- {unread} returning atomic(s) with the result unused" if unread else ""
        tail = f" ({at_exit} at exit)" if at_exit else ""
        print(f"{name}: {ops}{tail}{flag}")
    print(f"sass_atomics: {shown} kernel(s) listed, {bad} with a returning atomic whose result is unused")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
