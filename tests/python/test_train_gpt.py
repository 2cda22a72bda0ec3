# pytest suite of the training experiment's pieces (examples/): data cache, same start across variants, the float64
# reference, the audit, the state-file writer (replayed by gproj check when built), divergence. Run by scripts/python_test.sh.
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples"))
import attention_audit  # noqa: E402
import prepare_data  # noqa: E402
import train_gpt  # noqa: E402

GPROJ_CLI = os.path.join(ROOT, "build", "release", "gproj")
TINY = ["--layers", "2", "--d-model", "64", "--heads", "2", "--context", "32", "--batch", "2"]


def make_corpus(folder):
    (folder / "pkg").mkdir(parents=True)
    (folder / "b.py").write_text("print('b')\n" * 50)
    (folder / "a.py").write_text("x = 1\n" * 50)
    (folder / "pkg" / "c.py").write_text("def f():\n    return 2\n" * 20)
    (folder / "notes.txt").write_text("not python")
    (folder / "site-packages").mkdir()
    (folder / "site-packages" / "third.py").write_text("third party")
    return folder


def test_corpus_is_sorted_python_only_and_cached(tmp_path):
    corpus = make_corpus(tmp_path / "src")
    files = prepare_data.corpus_files([str(corpus)])
    assert [os.path.relpath(f, corpus) for f in files] == ["a.py", "b.py", os.path.join("pkg", "c.py")]
    meta_path = prepare_data.prepare([str(corpus)], str(tmp_path / "cache"), val_fraction=0.1)
    assert prepare_data.prepare([str(corpus)], str(tmp_path / "cache"), val_fraction=0.1) == meta_path
    train, val, meta = prepare_data.load(meta_path)
    expected = b"".join(open(f, "rb").read() for f in files)
    assert bytes(train) + bytes(val) == expected
    assert meta["bytes"] == len(expected) and len(val) == int(len(expected) * 0.1)
    (corpus / "a.py").write_text("x = 10\n" * 50)  # a size change is a new cache entry
    assert prepare_data.prepare([str(corpus)], str(tmp_path / "cache"), val_fraction=0.1) != meta_path


def test_max_bytes_truncates(tmp_path):
    corpus = make_corpus(tmp_path / "src")
    meta_path = prepare_data.prepare([str(corpus)], str(tmp_path / "cache"), max_bytes=400)
    train, val, meta = prepare_data.load(meta_path)
    assert meta["bytes"] == 400 and len(train) + len(val) == 400


def test_default_corpus_is_the_stdlib():
    files = prepare_data.corpus_files(prepare_data.default_corpus())
    assert any(f.endswith(os.path.join("json", "decoder.py")) for f in files)
    assert not any("site-packages" in f.split(os.sep) for f in files)


def test_same_initialisation_and_data_for_every_variant():
    states = []
    for variant in attention_audit.VARIANTS:
        args = train_gpt.parse_args(TINY + ["--attention", variant, "--out", "unused"])
        states.append(train_gpt.build_model(args).state_dict())
    for state in states[1:]:
        assert all(torch.equal(state[name], states[0][name]) for name in states[0])
    tokens = np.arange(1000, dtype=np.uint8)
    first, second = (train_gpt.Batches(tokens, 16, 4, seed=3).next() for _ in range(2))
    assert torch.equal(first[0], second[0])
    halves = [train_gpt.Batches(tokens, 16, 4, seed=3, rank=r, world=2).next()[0] for r in range(2)]
    assert torch.equal(torch.cat(halves), first[0])


def test_lr_schedule():
    args = train_gpt.parse_args(["--out", "unused", "--lr", "1e-3", "--warmup", "200"])
    assert train_gpt.lr_at(0, args) == pytest.approx(5e-6)
    assert train_gpt.lr_at(199, args) == pytest.approx(1e-3)
    assert train_gpt.lr_at(5000, args) == pytest.approx(1e-3)


def random_state(b=2, n=48, h=2, d=16, shared=0.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v, do = (torch.randn(b, n, h, d, generator=g) for _ in range(4))
    k = k + shared * torch.randn(1, 1, h, d, generator=g)
    return tuple(t.to(torch.bfloat16) for t in (q, k, v, do))


def test_float64_reference_matches_torch_sdpa():
    q, k, v, do = random_state()
    leaves = [t.double().requires_grad_(True) for t in (q, k, v)]
    o = F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in leaves), is_causal=True).transpose(1, 2)
    o.backward(do.double())
    assert torch.allclose(attention_audit.reference_attention(*leaves[:3]).detach(), o.detach(), atol=1e-12)
    for ours, theirs in zip(attention_audit.reference_grads(q, k, v, do), leaves):
        assert torch.allclose(ours, theirs.grad, atol=1e-12)


def test_audit_sees_the_shared_key_bias_and_gproj_removes_it():
    state = random_state(n=64, d=32, shared=30.0, seed=1)
    projected = ("gproj-gproj", "gproj-thresh", "gproj-pweighted", "gproj-fp16")
    audits = {v: attention_audit.audit_layer(*state, v) for v in ("fp32", "gproj-baseline", *projected)}
    assert audits["fp32"]["dq_err"] < 0.005
    for v in projected:  # every projection the training variants name removes the bias
        assert audits["gproj-baseline"]["dq_err"] > 5 * audits[v]["dq_err"], v
        assert audits[v]["dq_err"] < 0.01, v
    # fp16-lowrank's dS is rounded to FP16, not BF16: its dK and dQ sit at the fp32 variant's (here within 2%)
    for g in ("dq_err", "dk_err"):
        assert audits["gproj-fp16"][g] < 1.1 * audits["fp32"][g], g
    assert audits["fp32"]["shared_key_ratio"] > 0.9
    assert 0 < audits["fp32"]["ds_resid_rel_mean"] <= audits["fp32"]["ds_resid_rel_max"]


def test_shared_key_ratio():
    k = torch.ones(1, 5, 1, 4)
    assert attention_audit.shared_key_ratio(k) == pytest.approx(1.0)
    k[:, 1::2] *= -1  # 3 of +1, 2 of -1
    assert attention_audit.shared_key_ratio(k) == pytest.approx(0.2)


def read_state(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    tensors = {}
    for name, info in header.items():
        if name != "__metadata__":
            lo, hi = info["data_offsets"]
            raw = torch.frombuffer(bytearray(data[lo:hi]), dtype=torch.int16).view(torch.bfloat16)
            tensors[name] = raw.reshape(info["shape"])
    return header["__metadata__"], tensors


def test_state_writer_by_hand_round_trips(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "safetensors.torch", None)  # force the hand-written format
    q, k, v, do = random_state(n=40, d=32)
    path = str(tmp_path / "state.safetensors")
    attention_audit.write_state(path, {"q": q, "k": k, "v": v, "do": do}, {"causal": "true", "step": 7, "layer": 1})
    metadata, tensors = read_state(path)
    assert metadata == {"causal": "true", "step": "7", "layer": "1"}
    for name, t in zip(("q", "k", "v", "do"), (q, k, v, do)):
        assert torch.equal(tensors[name], t)
    if not os.access(GPROJ_CLI, os.X_OK):
        pytest.skip(f"{GPROJ_CLI} not built (scripts/build.sh); the reader check of gproj itself is skipped")
    run = subprocess.run([GPROJ_CLI, "check", "--state", path, "--quiet", "--variants", "gproj"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


def test_divergence_detector():
    detector = train_gpt.DivergenceDetector(patience=50, window=500, min_history=100)
    assert not any(detector.update(1.0) for _ in range(200))
    assert not any(detector.update(20.0) for _ in range(49))
    assert detector.update(9.0) is False  # 9 < 10 x median: the streak restarts
    assert not any(detector.update(20.0) for _ in range(49))
    assert detector.update(20.0)


def test_tiny_run_writes_its_telemetry(tmp_path):
    corpus = make_corpus(tmp_path / "src")
    (corpus / "long.py").write_text("for i in range(3):\n    print(i)\n" * 200)  # a validation split > context
    out = tmp_path / "run"
    train_gpt.main(TINY + ["--attention", "gproj-gproj", "--device", "cpu", "--steps", "3", "--audit-every", "2",
                           "--audit-batch", "1", "--eval-every", "3", "--eval-batches", "1", "--data", str(corpus),
                           "--data-cache", str(tmp_path / "cache"), "--out", str(out)])
    metrics = [json.loads(line) for line in open(out / "metrics.jsonl")]
    assert [m["step"] for m in metrics] == [0, 1, 2] and "val_loss" in metrics[-1]
    audit = [json.loads(line) for line in open(out / "audit.jsonl")]
    assert [(a["step"], a["layer"]) for a in audit] == [(2, 0), (2, 1)]
    metadata, tensors = read_state(out / audit[0]["state"])
    assert metadata["causal"] == "true" and metadata["step"] == "2" and tensors["do"].shape == (1, 32, 2, 32)
    summary = json.load(open(out / "summary.json"))
    assert summary["steps_done"] == 3 and summary["diverged_at"] is None
    env = json.load(open(out / "env.json"))
    assert env["config"]["attention"] == "gproj-gproj" and "git_commit" in env["gproj"]


def tiny_run(tmp_path, name, *extra):
    corpus = tmp_path / "src"
    if not corpus.exists():
        make_corpus(corpus)
    (corpus / "long.py").write_text("for i in range(3):\n    print(i)\n" * 200)
    out = tmp_path / name
    train_gpt.main(TINY + ["--attention", "gproj-baseline", "--device", "cpu", "--audit-every", "0",
                           "--eval-every", "0", "--data", str(corpus), "--data-cache", str(tmp_path / "cache"),
                           "--out", str(out), *extra])
    return out


def test_deferred_syncs_record_every_step_and_match_per_step_syncs(tmp_path):
    a = tiny_run(tmp_path, "a", "--steps", "7", "--sync-every", "3")
    b = tiny_run(tmp_path, "b", "--steps", "7", "--sync-every", "1")
    ma = [json.loads(line) for line in open(a / "metrics.jsonl")]
    mb = [json.loads(line) for line in open(b / "metrics.jsonl")]
    assert [m["step"] for m in ma] == list(range(7))
    assert [(m["loss"], m["grad_norm"]) for m in ma] == [(m["loss"], m["grad_norm"]) for m in mb]
    assert json.load(open(a / "summary.json"))["final_loss"] == ma[-1]["loss"]


def test_time_limit_stops_cleanly_and_says_so(tmp_path):
    out = tiny_run(tmp_path, "t", "--steps", "100000", "--sync-every", "2", "--time-limit", "0")
    summary = json.load(open(out / "summary.json"))
    assert summary["steps_done"] == 2 and summary["stopped"] == "time limit 0 s after step 1"
    assert len(open(out / "metrics.jsonl").readlines()) == 2


def test_compare_runs_reports_the_loss_difference(tmp_path, capsys):
    import compare_runs

    a = tiny_run(tmp_path, "a", "--steps", "4")
    b = tiny_run(tmp_path, "b", "--steps", "4", "--seed", "1")
    compare_runs.main([str(a), str(a), "--max-loss-diff", "0"])
    assert "|loss diff| max 0.000e+00" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        compare_runs.main([str(a), str(b), "--max-loss-diff", "1e-9"])
    assert e.value.code == 1


def test_logit_stats_find_exact_ties_at_the_block_max():
    torch.manual_seed(0)
    q = torch.randn(1, 70, 1, 16)
    k = torch.randn(1, 70, 1, 16)
    k[0, 66] = k[0, 65]  # keys 65 and 66 tie for every query (second block of 64 keys)
    q[0, 69] = 20 * k[0, 65]  # query 69 scores them far above the rest
    stats = attention_audit.logit_stats(q.to(torch.bfloat16), k.to(torch.bfloat16))
    k65 = k[0, 65, 0].to(torch.bfloat16).float()
    top = q[0, 69, 0].to(torch.bfloat16).float() @ k65 / 4
    assert stats["max_logit"] == pytest.approx(top.item(), rel=1e-5)
    assert stats["max_tied_logit"] == pytest.approx(top.item(), rel=1e-5)
    assert stats["published_fwdfix_lift"] == pytest.approx(top.item(), rel=1e-5) and stats["tied_blocks"] >= 1


@pytest.mark.skipif(not torch._dynamo.is_dynamo_supported(), reason="torch.compile is not supported here")
def test_compiled_steps_track_eager_steps(tmp_path):
    # --compile runs the ordinary steps through torch.compile and the audit step (3) eagerly, with the capture
    # hooks; same seed, same batches: the losses agree to float32 reassociation (inductor fuses differently).
    a = tiny_run(tmp_path, "eager", "--steps", "5", "--attention", "gproj-gproj", "--audit-every", "3",
                 "--audit-batch", "1")
    b = tiny_run(tmp_path, "compiled", "--steps", "5", "--attention", "gproj-gproj", "--audit-every", "3",
                 "--audit-batch", "1", "--compile")
    la = [json.loads(line)["loss"] for line in open(a / "metrics.jsonl")]
    lb = [json.loads(line)["loss"] for line in open(b / "metrics.jsonl")]
    assert len(la) == len(lb) == 5
    assert max(abs(x - y) / abs(x) for x, y in zip(la, lb)) < 1e-3
    assert [json.loads(line)["step"] for line in open(b / "audit.jsonl")] == [3, 3]


def test_summarize_runs_reports_divergence_loss_and_worst_dq(tmp_path, capsys):
    import summarize_runs

    run = tiny_run(tmp_path, "s", "--steps", "4", "--audit-every", "2", "--audit-batch", "1")
    row = summarize_runs.summarize(str(run))
    assert row["divergence"] == "none through 4" and row["variant"] == "gproj-baseline" and row["seed"] == 0
    audits = [json.loads(line) for line in open(run / "audit.jsonl")]
    assert row["worst_dq"][0] == max(a["dq_err"] for a in audits)
    assert row["worst_dk"][0] == max(a["dk_err"] for a in audits)
    summarize_runs.main([str(run), "--out", str(tmp_path / "t.md")])
    assert "| s | gproj-baseline | 0 | none through 4 |" in capsys.readouterr().out
    assert (tmp_path / "t.md").read_text().startswith("| run | variant |")
    with pytest.raises(SystemExit, match="missing is not a complete run folder"):
        summarize_runs.main([str(run), str(tmp_path / "missing")])
    assert "| s | gproj-baseline |" in capsys.readouterr().out  # the complete run is still in the table


def test_readers_take_a_runs_metrics_compressed(tmp_path, capsys):
    # committed run folders keep their large metrics.jsonl as metrics.jsonl.xz (examples/run_files.py): the same
    # rows and the same table as from the plain file
    import lzma
    import shutil

    import compare_runs
    import summarize_runs

    run = tiny_run(tmp_path, "plain", "--steps", "4")
    packed = tmp_path / "packed"
    shutil.copytree(run, packed)
    with open(packed / "metrics.jsonl", "rb") as f, lzma.open(packed / "metrics.jsonl.xz", "wb") as g:
        g.write(f.read())
    (packed / "metrics.jsonl").unlink()
    assert compare_runs.load(str(packed)) == compare_runs.load(str(run))
    a, b = summarize_runs.summarize(str(run)), summarize_runs.summarize(str(packed))
    assert a["tokens_per_s"] == b["tokens_per_s"] is not None  # (the median of metrics.jsonl's rows)
    assert {k: v for k, v in a.items() if k != "run"} == {k: v for k, v in b.items() if k != "run"}
    (packed / "metrics.jsonl.xz").unlink()
    with pytest.raises(FileNotFoundError, match="nor metrics.jsonl.xz"):
        compare_runs.load(str(packed))


def test_audit_layers_and_window_choose_what_is_audited(tmp_path):
    corpus = make_corpus(tmp_path / "src")
    (corpus / "long.py").write_text("for i in range(3):\n    print(i)\n" * 200)
    out = tmp_path / "run"
    train_gpt.main(TINY + ["--attention", "sdpa-bf16", "--device", "cpu", "--steps", "6", "--audit-every", "4",
                           "--audit-layers", "1", "--audit-window", "1:4:2", "--audit-batch", "1",
                           "--eval-every", "0", "--data", str(corpus), "--data-cache", str(tmp_path / "cache"),
                           "--out", str(out)])
    audit = [json.loads(line) for line in open(out / "audit.jsonl")]
    # every 4 steps (step 4) and inside [1, 4) every 2 steps (1, 3); layer 1 only, with its state file
    assert [(a["step"], a["layer"]) for a in audit] == [(1, 1), (3, 1), (4, 1)]
    assert all(os.path.exists(out / a["state"]) for a in audit)


@pytest.mark.parametrize("bad", [["--audit-layers", "7"], ["--audit-layers", "x"], ["--audit-window", "5:5:1"],
                                 ["--audit-window", "1:2"]])
def test_bad_audit_options_are_refused(tmp_path, bad):
    with pytest.raises(SystemExit):
        train_gpt.parse_args(TINY + ["--out", str(tmp_path / "r"), *bad])


def test_every_plan_line_parses():
    """examples/plans/*.txt (scripts/device_train.sh's input): each job line's arguments are train_gpt.py's, so a
    typo fails here instead of on the GPU machine."""
    import glob
    import shlex

    plans = sorted(glob.glob(os.path.join(ROOT, "examples", "plans", "*.txt")))
    assert plans
    jobs = 0
    for plan in plans:
        for line in open(plan):
            line = line.strip()
            if not line or line.startswith("#") or line == "wait":
                continue
            gpus, name, *args = shlex.split(line)
            assert all(g.isdigit() for g in gpus.split(",")), f"{plan}: GPUS {gpus!r}"
            try:
                train_gpt.parse_args(args + ["--out", os.path.join("unused", name)])
            except SystemExit as e:
                pytest.fail(f"{plan}: job {name} does not parse ({e})")
            jobs += 1
    assert jobs >= len(plans)
