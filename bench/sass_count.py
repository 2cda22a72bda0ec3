#!/usr/bin/env python3
"""Static SASS instruction counts per kernel, from `cuobjdump -sass` of a cubin, for reading a kernel change
without a GPU (docs/perf-notes.md, session 8).

cuobjdump is not in this machine's CUDA toolkit; the PyPI wheel `nvidia-cuda-cuobjdump` has it:
    pip download --no-deps nvidia-cuda-cuobjdump -d /tmp/w && python3 -m zipfile -e /tmp/w/*.whl /tmp/w/x
    nvcc ... -gencode arch=compute_90a,code=sm_90a -cubin FILE.cu -o k.cubin
    /tmp/w/x/nvidia/cu13/bin/cuobjdump -sass k.cubin > k.sass
Then: python3 bench/sass_count.py k.sass [NAME_SUBSTRING ...] [--top N]
prints, for each function whose mangled name contains every NAME_SUBSTRING, its instruction count and the N most
frequent opcodes (without modifiers: LDG.E.128 counts as LDG). Two files (OLD.sass NEW.sass) print the change
per function present in both.
"""
import argparse
import collections
import re
import sys

_FUNC = re.compile(r"^\s*Function\s*:\s*(\S+)", re.M)
# "/*0a50*/   @!P0 LDG.E.128 R4, desc[UR8][R2.64] ;": the address comment, an optional predicate, the opcode.
_INSN = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)")


def functions(text):
    """{mangled name: Counter(opcode -> count)} for every function of a cuobjdump -sass listing."""
    marks = [(m.start(), m.group(1)) for m in _FUNC.finditer(text)]
    if not marks:
        raise ValueError("no 'Function :' sections (not cuobjdump -sass output?)")
    out = {}
    for k, (start, name) in enumerate(marks):
        end = marks[k + 1][0] if k + 1 < len(marks) else len(text)
        out[name] = collections.Counter(_INSN.findall(text[start:end]))
    return out


def select(funcs, subs):
    return {n: c for n, c in funcs.items() if all(s in n for s in subs)}


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", help="one listing, or OLD NEW (a .sass each), then name substrings")
    ap.add_argument("--top", type=int, default=12)
    a = ap.parse_args(argv[1:])
    paths = [f for f in a.files if f.endswith(".sass")]
    subs = [f for f in a.files if not f.endswith(".sass")]
    if len(paths) not in (1, 2):
        ap.error("give one .sass listing, or two (OLD NEW)")
    lists = [select(functions(open(p).read()), subs) for p in paths]
    if not lists[-1]:
        print(f"no function matches {subs}", file=sys.stderr)
        return 2
    if len(lists) == 1:
        for name, c in sorted(lists[0].items()):
            print(f"{name}\n  {sum(c.values())} instructions; " +
                  ", ".join(f"{op} {n}" for op, n in c.most_common(a.top)))
        return 0
    old, new = lists
    for name in sorted(set(old) & set(new)):
        co, cn = old[name], new[name]
        delta = {op: cn[op] - co[op] for op in set(co) | set(cn) if cn[op] != co[op]}
        biggest = sorted(delta.items(), key=lambda kv: -abs(kv[1]))[: a.top]
        print(f"{name}\n  {sum(co.values())} -> {sum(cn.values())} instructions; " +
              ", ".join(f"{op} {d:+d}" for op, d in biggest))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
