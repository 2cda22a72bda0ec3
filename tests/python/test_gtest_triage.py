# scripts/gtest_triage.py (device_check.sh's line about the GPU tests): counts and the first failure's message
# from a GoogleTest log, and each failed test rerun alone with a fake GoogleTest binary; refusals. Part of
# scripts/python_test.sh.
import sys

import pytest

from script_loader import ROOT
from script_loader import load as load_script

LOG = """[==========] Running 4 tests from 2 test suites.
[ RUN      ] Cuda.First
  shared-keys  cuda baseline dQ 5.050%
unknown file: Failure
C++ exception with description "device error: CUDA backward: an illegal memory access was encountered" thrown in the test body.
[  FAILED  ] Cuda.First (1738 ms)
[ RUN      ] Cuda.Second
[  FAILED  ] Cuda.Second (3 ms)
[ RUN      ] Sweep/S.Case/q1_d64
[       OK ] Sweep/S.Case/q1_d64 (5 ms)
[ RUN      ] Sweep/S.Case/q97_d32
[  SKIPPED ] Sweep/S.Case/q97_d32 (0 ms)
[ RUN      ] Sweep/S.Case/q2_d128
[  FAILED  ] Sweep/S.Case/q2_d128, where GetParam() = q2_d128 (19 ms)
[  PASSED  ] 1 test.
[  FAILED  ] 3 tests, listed below:
[  FAILED  ] Cuda.First
[  FAILED  ] Cuda.Second
[  FAILED  ] Sweep/S.Case/q2_d128, where GetParam() = q2_d128
"""


def load():
    return load_script("gtest_triage", ROOT / "scripts" / "gtest_triage.py")


def test_counts_each_test_once_and_names_the_first_failure():
    t = load()
    passed, failed, skipped, msg = t.parse(LOG)
    assert passed == ["Sweep/S.Case/q1_d64"] and skipped == ["Sweep/S.Case/q97_d32"]
    assert failed == ["Cuda.First", "Cuda.Second", "Sweep/S.Case/q2_d128"]  # the listing at the end not again
    assert "illegal memory access" in msg
    line = t.summary(passed, failed, skipped, msg)
    assert line.startswith("1 passed, 3 failed, 1 skipped; first failure: Cuda.First (C++ exception")


def test_reruns_each_failed_test_alone(tmp_path, capsys):
    log = tmp_path / "cuda_tests.log"
    log.write_text(LOG)
    fake = tmp_path / "fake_tests"  # fails alone only for Cuda.First: the others inherited a broken context
    fake.write_text(f"#!{sys.executable}\nimport sys\nsys.exit(1 if sys.argv[1] == '--gtest_filter=Cuda.First' else 0)\n")
    fake.chmod(0o755)
    assert load().main(["gtest_triage.py", str(log), "--rerun", str(fake), "--budget", "30"]) == 0
    out = capsys.readouterr().out.strip()
    assert out.endswith("; alone, 1 of 3 still fail: Cuda.First")


def test_a_log_without_results_and_a_missing_log(tmp_path, capsys):
    empty = tmp_path / "empty.log"
    empty.write_text("Segmentation fault\n")
    assert load().main(["gtest_triage.py", str(empty)]) == 1
    assert "no test results" in capsys.readouterr().out
    assert load().main(["gtest_triage.py", str(tmp_path / "missing.log")]) == 2
    assert "cannot read" in capsys.readouterr().err


@pytest.mark.parametrize("args", [["--budget", "x"], []])
def test_bad_arguments_are_refused(args):
    with pytest.raises(SystemExit) as e:
        load().main(["gtest_triage.py", *args])
    assert e.value.code != 0
