# The GPU machine's scripts (scripts/device_*.sh and the rest of scripts/*.sh): they only run there, so here every
# one is at least parsed by bash, and device_bench_ab.sh's refusals of a bad BENCHES list (which it checks before it
# touches a GPU), device_candidate_ab.sh's and pack_candidate.sh's refusals of a bad call, pack_bench.sh's usage
# error, and device_candidate_tests.sh's refusal of a build of another commit and its pass / fail status (with
# stand-ins for the GPU binaries and compute-sanitizer) are run. Part of scripts/python_test.sh.
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted((ROOT / "scripts").glob("*.sh"))


def test_there_are_scripts():
    assert any(p.name == "device_check.sh" for p in SCRIPTS)
    assert any(p.name == "device_bench_ab.sh" for p in SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_parses(script):
    r = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def run_ab(tmp_path, benches, env_extra=None):
    """device_bench_ab.sh in a copy of the scripts it needs (so that no .prebuilt of this checkout is used)."""
    tree = tmp_path / "tree"
    (tree / "scripts").mkdir(parents=True)
    (tree / "bench").mkdir()
    for name in ("device_bench_ab.sh", "device_env.sh"):
        shutil.copy(ROOT / "scripts" / name, tree / "scripts" / name)
    for name in ("ncu_times.py", "ncu_limits.py"):
        shutil.copy(ROOT / "bench" / name, tree / "bench" / name)
    env = dict(os.environ, BENCHES=benches, OUT=str(tmp_path / "out"), GPROJ_COMMIT="test", **(env_extra or {}))
    return subprocess.run(["bash", str(tree / "scripts" / "device_bench_ab.sh")], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("files, message", [({}, "old/COMMIT is missing"),
                                             ({"COMMIT": "abc\n"}, "old has neither bench.tar.xz nor pack.tar.xz")])
def test_bench_ab_refuses_an_incomplete_directory(tmp_path, files, message):
    d = tmp_path / "tree" / "old"
    d.mkdir(parents=True)
    for name, text in files.items():
        (d / name).write_text(text)
    r = run_ab(tmp_path, "old")
    assert r.returncode == 2
    assert message in r.stderr


def test_bench_ab_refuses_an_archive_without_the_bench(tmp_path):
    d = tmp_path / "tree" / "old"
    d.mkdir(parents=True)
    commit = f"test-{os.getpid()}-{tmp_path.name}"  # the script unpacks into /tmp/ab_bench/COMMIT
    (d / "COMMIT").write_text(commit + "\n")
    (tmp_path / "other").write_text("not a bench\n")
    subprocess.run(["tar", "cJf", str(d / "bench.tar.xz"), "-C", str(tmp_path), "other"], check=True)
    try:
        r = run_ab(tmp_path, "old")
    finally:
        shutil.rmtree(Path("/tmp/ab_bench") / commit, ignore_errors=True)
    assert r.returncode == 2
    assert "no cuda_attention_bench in old" in r.stderr


def test_pack_bench_needs_a_revision():
    r = subprocess.run(["bash", str(ROOT / "scripts" / "pack_bench.sh")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "usage:" in r.stderr


@pytest.mark.parametrize("value", ["256", "x", "-1", "0128"])
def test_pack_bench_refuses_a_bad_ablation_mask(value):
    r = subprocess.run(["bash", str(ROOT / "scripts" / "pack_bench.sh"), "HEAD"], capture_output=True, text=True,
                       timeout=60, env=dict(os.environ, ABLATE=value))
    assert r.returncode == 2
    assert f"ABLATE must be 0-255, got '{value}'" in r.stderr


def fake_bench_dir(tmp_path, name, commit, script='#!/bin/sh\necho "variant N D"\necho "row $*"\n'):
    """A BENCHES directory whose bench is a shell script (by default printing a header and one row with its
    arguments)."""
    d = tmp_path / "tree" / name
    d.mkdir(parents=True)
    (d / "COMMIT").write_text(commit + "\n")
    stage = tmp_path / f"stage_{name}"
    stage.mkdir()
    bench = stage / "cuda_attention_bench"
    bench.write_text(script)
    bench.chmod(0o755)
    subprocess.run(["tar", "cJf", str(d / "bench.tar.xz"), "-C", str(stage), "cuda_attention_bench"], check=True)


def fake_ncu_path(tmp_path, script):
    """PATH with a folder first whose `ncu` is the given shell script."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "ncu").write_text(script)
    (bindir / "ncu").chmod(0o755)
    return f"{bindir}:{os.environ['PATH']}"


def test_bench_ab_runs_every_build_in_turn(tmp_path):
    tag = f"test-{os.getpid()}-{tmp_path.name}"
    commits = [f"{tag}-a", f"{tag}-b"]
    fake_bench_dir(tmp_path, "a", commits[0])
    fake_bench_dir(tmp_path, "b", commits[1])
    env_extra = {"SHAPES": "128:4096:1", "INPUTS": "gaussian q4", "ONLY": "gproj", "ROUNDS": "2"}
    try:
        r = run_ab(tmp_path, "a b", env_extra)
    finally:
        for c in commits:
            shutil.rmtree(Path("/tmp/ab_bench") / c, ignore_errors=True)
    assert r.returncode == 0, r.stderr
    rows = [line for line in (tmp_path / "out" / "ab.txt").read_text().splitlines() if not line.startswith("#")]
    # 2 input kinds x 2 rounds x 2 builds, the header lines dropped, each row tagged with kind, round and commit
    assert len(rows) == 8
    assert rows[0].startswith("row --only gproj --shape 128:4096:1") and rows[0].endswith(f"gaussian  r1  {commits[0]}")
    assert rows[1].endswith(f"gaussian  r1  {commits[1]}")
    assert "--q-scale 4" in rows[4] and rows[7].endswith(f"q4  r2  {commits[1]}")


def test_bench_ab_ncu_runs_each_input_kind(tmp_path):
    # A fake ncu on PATH logs its arguments: one run per shape, input kind and build, with the kind's arguments.
    tag = f"test-{os.getpid()}-{tmp_path.name}"
    fake_bench_dir(tmp_path, "a", tag)
    log = tmp_path / "ncu_args.log"
    env_extra = {"SHAPES": "64:1024:1", "INPUTS": "gaussian q4", "ONLY": "gproj", "ROUNDS": "1", "NCU": "1",
                 "PATH": fake_ncu_path(tmp_path, f'#!/bin/sh\necho "$*" >> {log}\n')}
    try:
        r = run_ab(tmp_path, "a", env_extra)
    finally:
        shutil.rmtree(Path("/tmp/ab_bench") / tag, ignore_errors=True)
    assert r.returncode == 0, r.stderr
    runs = log.read_text().splitlines()
    assert len(runs) == 2
    assert "--q-scale" not in runs[0] and "--shape 64:1024:1 --q-scale 4 --reps 1" in runs[1]
    heads = [line for line in (tmp_path / "out" / "ab_ncu.txt").read_text().splitlines() if line.startswith("==")]
    assert heads == [f"== gproj 64:1024:1 gaussian {tag} (ncu, warm caches): rc=0",
                     f"== gproj 64:1024:1 q4 {tag} (ncu, warm caches): rc=0"]


def test_bench_ab_ncu_limits_profiles_the_timed_launch_of_each_build(tmp_path):
    # A fake ncu logs its arguments and prints a raw-page report whose time is the build's position; ROUNDS=0 runs
    # no bench rows. One report per build, the second launch of the main kernel, and one table of both.
    tag = f"test-{os.getpid()}-{tmp_path.name}"
    fake_bench_dir(tmp_path, "a", f"{tag}-a")
    fake_bench_dir(tmp_path, "b", f"{tag}-b")
    log = tmp_path / "ncu_args.log"
    path = fake_ncu_path(
        tmp_path,
        "#!/bin/sh\n"
        f'echo "$*" >> {log}\n'
        'n=$(wc -l < ' + str(log) + ')\n'
        'echo \'"ID","Kernel Name","gpu__time_duration.sum"\'\n'
        'echo \'"","","ns"\'\n'
        'echo "\\"0\\",\\"k\\",\\"${n}000\\""\n')
    env_extra = {"SHAPES": "128:4096:0", "ONLY": "gproj", "ROUNDS": "0", "NCU_LIMITS": "1", "PATH": path}
    try:
        r = run_ab(tmp_path, "a b", env_extra)
    finally:
        for c in ("a", "b"):
            shutil.rmtree(Path("/tmp/ab_bench") / f"{tag}-{c}", ignore_errors=True)
    assert r.returncode == 0, r.stderr
    runs = log.read_text().splitlines()
    assert len(runs) == 2
    assert all("-k regex:flash_bwd_wg --launch-skip 1 --launch-count 1" in a and "--only gproj" in a for a in runs)
    text = (tmp_path / "out" / "ab_limits.txt").read_text().splitlines()
    assert [line for line in text if line.startswith("==")] == [
        f"== gproj 128:4096:0 gaussian {tag}-a (ncu limits): rc=0",
        f"== gproj 128:4096:0 gaussian {tag}-b (ncu limits): rc=0"]
    assert text[-1].split() == ["time", "(us)", "1.00", "2.00"]
    ab_rows = [line for line in (tmp_path / "out" / "ab.txt").read_text().splitlines() if not line.startswith("#")]
    assert ab_rows == []


def test_bench_ab_refuses_an_unknown_input_kind(tmp_path):
    commit = f"test-{os.getpid()}-{tmp_path.name}"
    fake_bench_dir(tmp_path, "a", commit)
    try:
        r = run_ab(tmp_path, "a", {"INPUTS": "nonsense", "ROUNDS": "1"})
    finally:
        shutil.rmtree(Path("/tmp/ab_bench") / commit, ignore_errors=True)
    assert r.returncode == 2
    assert "unknown input kind nonsense" in r.stderr
    assert not (tmp_path / "out" / "ab.txt").exists()


def test_bench_ab_says_when_a_build_gives_no_rows(tmp_path):
    # A bench that knows one shape only (as cuda_attention_bench refuses a shape it does not run): the other shape's
    # rows are missing, and the script says which build, variant and shape, with the bench's message, instead of
    # leaving the gap silent. ncu's failures show their last lines of stderr under the run's header.
    commit = f"test-{os.getpid()}-{tmp_path.name}"
    fake_bench_dir(tmp_path, "a", commit, '#!/bin/sh\ncase "$*" in *64:4096:0*) echo "--shape 64:4096:0 is not '
                   'one of the benchmark\'s shapes" >&2; exit 2;; esac\necho "row $*"\n')
    env_extra = {"SHAPES": "128:4096:0 64:4096:0", "ONLY": "gproj", "ROUNDS": "1", "NCU": "1",
                 "PATH": fake_ncu_path(tmp_path, '#!/bin/sh\necho "==ERROR== the application returned 2" >&2\n'
                                                 'exit 2\n')}
    try:
        r = run_ab(tmp_path, "a", env_extra)
    finally:
        shutil.rmtree(Path("/tmp/ab_bench") / commit, ignore_errors=True)
    assert r.returncode == 0, r.stderr
    rows = [line for line in (tmp_path / "out" / "ab.txt").read_text().splitlines() if not line.startswith("#")]
    assert len(rows) == 1 and "--shape 128:4096:0" in rows[0]
    assert (f"device_bench_ab: no rows from {commit} for gproj 64:4096:0 gaussian (rc=2): --shape 64:4096:0 is "
            "not one of the benchmark's shapes") in r.stderr
    ncu = (tmp_path / "out" / "ab_ncu.txt").read_text()
    assert f"== gproj 64:4096:0 gaussian {commit} (ncu, warm caches): rc=2" in ncu
    assert "  (stderr) ==ERROR== the application returned 2" in ncu


def run_candidate_tests(tmp_path, args, prebuilt_commit=None):
    """device_candidate_tests.sh in a copy of the scripts it needs, GPROJ_COMMIT "abc", .prebuilt made for
    prebuilt_commit (None: no .prebuilt)."""
    tree = tmp_path / "tree"
    (tree / "scripts").mkdir(parents=True)
    for name in ("device_candidate_tests.sh", "device_env.sh"):
        shutil.copy(ROOT / "scripts" / name, tree / "scripts" / name)
    if prebuilt_commit is not None:
        (tree / ".prebuilt").mkdir()
        (tree / ".prebuilt" / "COMMIT").write_text(prebuilt_commit + "\n")
    env = dict(os.environ, GPROJ_COMMIT="abc")
    return subprocess.run(["bash", str(tree / "scripts" / "device_candidate_tests.sh"), *args], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=60)


def test_candidate_tests_need_a_folder(tmp_path):
    r = run_candidate_tests(tmp_path, [])
    assert r.returncode == 2 and "usage" in r.stderr


@pytest.mark.parametrize("prebuilt_commit", [None, "other"])
def test_candidate_tests_refuse_a_build_of_another_commit(tmp_path, prebuilt_commit):
    r = run_candidate_tests(tmp_path, [str(tmp_path / "out")], prebuilt_commit)
    assert r.returncode == 2
    assert "is not GPROJ_COMMIT (abc)" in r.stderr and "device_prebuild.sh" in r.stderr
    assert not (tmp_path / "out" / "summary.txt").exists()  # nothing ran


def test_candidate_tests_run_every_check_and_report_a_failure(tmp_path):
    # Stand-ins for the GPU binaries and compute-sanitizer: the suite passes, racecheck reports a hazard.
    r0 = run_candidate_tests(tmp_path, [], prebuilt_commit="abc")  # makes the tree (and is refused: no DIR)
    assert r0.returncode == 2
    tree = tmp_path / "tree"
    bindir, fakes = tree / ".prebuilt" / "bin", tmp_path / "fakes"
    bindir.mkdir()
    fakes.mkdir()
    scripts = {bindir / "cuda_tests": 'echo "[  PASSED  ] 58 tests."',
               bindir / "gproj": 'echo "passed: 0 of 104 rows exceed the --fail-above bounds"',
               fakes / "compute-sanitizer": 'if [ "$2" = racecheck ]; then echo "RACECHECK SUMMARY: 1 hazard"; '
                                            'exit 9; fi; echo "ERROR SUMMARY: 0 errors"'}
    for path, body in scripts.items():
        path.write_text("#!/usr/bin/env bash\n" + body + "\n")
        path.chmod(0o755)
    out = tmp_path / "out"
    env = dict(os.environ, GPROJ_COMMIT="abc", PATH=f"{fakes}:{os.environ['PATH']}")
    r = subprocess.run(["bash", str(tree / "scripts" / "device_candidate_tests.sh"), str(out)], cwd=tree, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stdout + r.stderr
    summary = (out / "summary.txt").read_text().splitlines()
    assert [line.split(":")[0] for line in summary] == [
        "== cuda_tests", "== compute-sanitizer memcheck", "== compute-sanitizer racecheck",
        "== compute-sanitizer synccheck", "== gproj check --device all",
        "== gproj check --stats-from forward --device all"]
    assert "rc=9" in summary[2] and "1 hazard" in summary[2]
    assert "rc=0" in summary[0] and "rc=0" in summary[1] and "rc=0" in summary[5]


def run_candidate_ab(tmp_path, args, env_extra):
    """device_candidate_ab.sh in a copy of the scripts it needs; its refusals come before any GPU work."""
    tree = tmp_path / "tree"
    (tree / "scripts").mkdir(parents=True, exist_ok=True)
    for name in ("device_candidate_ab.sh", "device_env.sh", "device_bench_ab.sh"):
        shutil.copy(ROOT / "scripts" / name, tree / "scripts" / name)
    env = dict(os.environ, OUT=str(tmp_path / "out"), **env_extra)
    return subprocess.run(["bash", str(tree / "scripts" / "device_candidate_ab.sh"), *args], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=60), tree


def test_candidate_ab_refuses_a_bad_call(tmp_path):
    r, tree = run_candidate_ab(tmp_path, [], {"CANDIDATE": ".pb", "REFERENCE": ".ab"})
    assert r.returncode == 2 and "usage:" in r.stderr
    r, tree = run_candidate_ab(tmp_path, ["run/2"], {"CANDIDATE": ".pb", "REFERENCE": ".ab"})
    assert r.returncode == 2 and "plain file name" in r.stderr
    r, tree = run_candidate_ab(tmp_path, ["r2"], {"CANDIDATE": "", "REFERENCE": ".ab"})
    assert r.returncode == 2 and "usage:" in r.stderr
    r, tree = run_candidate_ab(tmp_path, ["r2"], {"CANDIDATE": ".pb", "REFERENCE": ".ab"})
    assert r.returncode == 2 and ".pb/pack.tar.xz is missing" in r.stderr
    (tree / ".pb").mkdir()
    (tree / ".pb" / "pack.tar.xz").write_bytes(b"")
    (tree / ".pb" / "COMMIT").write_text("abc\n")
    (tree / ".ab").mkdir()
    (tree / ".ab" / "COMMIT").write_text("def\n")
    r, tree = run_candidate_ab(tmp_path, ["r2"], {"CANDIDATE": ".pb", "REFERENCE": ".ab"})
    assert r.returncode == 2 and ".ab has neither bench.tar.xz nor pack.tar.xz" in r.stderr
    # BENCHES names the rows' builds instead (REFERENCE may then be left out); each must be there
    r, tree = run_candidate_ab(tmp_path, ["r2"], {"CANDIDATE": ".pb", "REFERENCE": "", "BENCHES": ".ab_x .pb"})
    assert r.returncode == 2 and ".ab_x/COMMIT is missing" in r.stderr
    r, tree = run_candidate_ab(tmp_path, ["r2"], {"CANDIDATE": ".pb", "REFERENCE": "", "BENCHES": ""})
    assert r.returncode == 2 and "usage:" in r.stderr
    assert not (tmp_path / "out").exists()  # nothing was started


def test_pack_candidate_refuses_a_bad_call():
    for args, message in (([], "usage:"), (["foo"], "must be .pb_NAME"), ([".pb_a/b"], "must be .pb_NAME")):
        r = subprocess.run(["bash", str(ROOT / "scripts" / "pack_candidate.sh"), *args], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 2 and message in r.stderr, (args, r.stderr)


def device_env_call(tmp_path, call):
    """`call` (a shell command line) with scripts/device_env.sh's functions loaded, in tmp_path."""
    script = f"source {ROOT / 'scripts' / 'device_env.sh'} >/dev/null 2>&1; {call}"
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60, cwd=tmp_path)


def test_ab_summary_lines_up_the_rounds(tmp_path):
    rows = tmp_path / "ab.txt"
    rows.write_text(
        "# NVIDIA H200; builds: aaa bbb\n"
        "gproj       4096  128     no     1.370     3.392     401.2     405.1  gaussian  r2  bbb\n"
        "gproj       4096  128     no     1.373     3.374     400.3     407.3  gaussian  r1  bbb\n"
        "gproj       4096  128     no     1.366     3.510     402.3     391.5  gaussian  r1  aaa\n"
        "baseline    4096  128    yes     0.693     1.713     396.6     401.3  gaussian  r1  aaa\n")
    r = device_env_call(tmp_path, f"ab_summary {rows}")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["baseline 128 yes gaussian aaa fwd  0.693 bwd  1.713",
                                     "gproj 128 no gaussian aaa fwd  1.366 bwd  3.510",
                                     "gproj 128 no gaussian bbb fwd  1.373 1.370 bwd  3.374 3.392"]


def test_ab_overhead_gives_each_builds_overhead_round_by_round(tmp_path):
    rows = tmp_path / "ab.txt"
    rows.write_text(
        "# NVIDIA H200; builds: aaa bbb\n"
        "baseline    4096  128     no     1.000     2.000     1.0     1.0  gaussian  r1  aaa\n"
        "gproj-fb    4096  128     no     1.100     2.200     1.0     1.0  gaussian  r1  aaa\n"
        "baseline    4096  128     no     1.000     2.500     1.0     1.0  gaussian  r2  aaa\n"
        "gproj-fb    4096  128     no     1.100     2.550     1.0     1.0  gaussian  r2  aaa\n"
        "baseline    4096  128     no     1.000     2.000     1.0     1.0  gaussian  r10 aaa\n"
        "gproj-fb    4096  128     no     1.100     1.900     1.0     1.0  gaussian  r10 aaa\n"
        "gproj-fb    4096  128     no     1.100     2.300     1.0     1.0  gaussian  r1  bbb\n"
        "baseline    4096  128     no     1.000     2.000     1.0     1.0  gaussian  r1  bbb\n"
        "gproj       4096  128     no     1.100     9.000     1.0     1.0  gaussian  r1  bbb\n"
        "gproj-fb    1024   64    yes     1.100     3.000     1.0     1.0  q4  r1  bbb\n")
    r = device_env_call(tmp_path, f"ab_overhead {rows}")
    assert r.returncode == 0, r.stderr
    # Rounds in numeric order, builds apart, other variants ignored, a row without its baseline left out.
    assert r.stdout.splitlines() == [
        "gproj-fb 4096 128 no gaussian aaa bwd overhead r1:+10.0% r2:+2.0% r10:-5.0%",
        "gproj-fb 4096 128 no gaussian bbb bwd overhead r1:+15.0%"]
    r = device_env_call(tmp_path, f"AB_VARIANT=gproj ab_overhead {rows}")
    assert r.stdout.splitlines() == ["gproj 4096 128 no gaussian bbb bwd overhead r1:+350.0%"], r.stderr


def test_candidate_tests_report_prints_status_summary_and_failures(tmp_path):
    # A stand-in for device_candidate_tests.sh that writes a summary and a failing C++ suite's log, exit status 1.
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "device_candidate_tests.sh").write_text(
        'mkdir -p "$1"\necho "== cuda_tests: rc=1" > "$1/summary.txt"\n'
        'printf "[  FAILED  ] Cuda.Something\\n[  PASSED  ] 57 tests.\\n" > "$1/cuda_tests.log"\nexit 1\n')
    script = (f"source {ROOT / 'scripts' / 'device_env.sh'} >/dev/null 2>&1; "
              f"candidate_tests_report {tmp_path / 'out'} $(date +%s); echo \"status $?\"")
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    lines = r.stdout.splitlines()
    assert lines[0].startswith("candidate tests rc=1 at ") and lines[0].endswith(" s"), r.stdout
    assert lines[1:] == ["== cuda_tests: rc=1", "[  FAILED  ] Cuda.Something", "status 1"]


def test_fp16_lowrank_checks_runs_both_audits_with_the_issue_bars(tmp_path):
    # A stand-in gproj that records its arguments and fails the real-states audit: both audits run, each with its
    # bar (0.5% on the stress suite, 0.3% on the real states), and the failure is the function's status.
    fake = tmp_path / "gproj"
    fake.write_text('#!/usr/bin/env bash\necho "$*" >> "$(dirname "$0")/calls"\n'
                    'case "$*" in *"--cases real"*) echo "failed: 1 of 2 rows"; exit 1;; esac\necho "passed"\n')
    fake.chmod(0o755)
    r = device_env_call(tmp_path, f"fp16_lowrank_checks {fake} {tmp_path}")
    assert r.returncode == 1, r.stdout + r.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    assert len(calls) == 2
    assert "--projection fp16-lowrank --device cuda" in calls[0] and "gproj:dq=0.005,gproj:dk=0.005" in calls[0]
    assert "--cases real" in calls[1] and "gproj:dq=0.003,gproj:dk=0.003" in calls[1]
    assert (tmp_path / "check_fp16_stress.txt").read_text().strip() == "passed"
    assert "stress, cuda): rc=0; passed" in r.stdout and "real states, cuda): rc=1; failed: 1 of 2 rows" in r.stdout
