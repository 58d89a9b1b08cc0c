"""Scripts that train through a framework (Hugging Face Trainer, Lightning) or optimizer.step(closure), run as a
user would: the finding names a line the user can edit, in the framework's own settings, and the fixes are
measured through the framework. Frameworks are optional: these tests skip without them (pip install '.[frameworks]')."""
from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
from conftest import FAST, SCRIPTS, line_of, run_script

import diagnose.frameworks.catalog as frameworks
from diagnose.model import Capture
from diagnose.serial import from_jsonable


def _project(tmp_path: Path, name: str) -> Path:
    """The script alone in a folder of its own, which is also the current folder: what it writes there shows."""
    folder = tmp_path / "project"
    folder.mkdir()
    shutil.copy(SCRIPTS / name, folder / name)
    return folder / name


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _run(tmp_path: Path, name: str, options=FAST):
    script = _project(tmp_path, name)
    before = _listing(script.parent)
    run = run_script(script, out=tmp_path / "run", options=options, cwd=script.parent)
    assert run.returncode == 0, run.stderr[-3000:]
    assert _listing(script.parent) == before, "the framework's output left the sandbox"
    return script, run


def _line(location: str | None) -> int | None:
    return int(location.rpartition(":")[2]) if location else None


@pytest.mark.full  # a whole run, timed by nothing it asserts: the full tier (it runs beside another test)
def test_hf_trainer_findings_name_the_training_arguments_line_and_its_settings(tmp_path):
    pytest.importorskip("transformers",
                        reason="the Hugging Face Trainer is not installed (pip install '.[frameworks]')")
    # the Trainer's first steps are slow (lazy set-up): warm up past them
    script, run = _run(tmp_path, "hf_trainer.py", options=("--warmup", "10", "--steps", "10", "--experiments", "none"))
    arguments = line_of(script, "args = TrainingArguments(")
    capture = json.loads((run.run_dir / "capture.json").read_text())
    assert capture["framework"]["name"] == "huggingface"
    assert {_line(o["location"]) for o in capture["loaders"] + capture["optimizers"]} == {arguments}
    for finding in run.findings:
        assert _line(finding["location"]) == arguments, finding
        assert "TrainingArguments(..., " in finding["fix_code"] and "DataLoader(" not in finding["fix_code"]
    length = run.diagnosis["run_cost"]["length"]  # 4096 samples at batch 2, one epoch: the Trainer's own count
    assert (length["total_steps"], length["epochs"]) == (2048, 1), length
    assert length["source"].startswith("TrainingArguments (num_train_epochs=1)"), length
    fixes = " ".join(f["fix_code"] for f in run.findings)
    assert run.findings, "batch 2 with logging every step: per-op overhead or host work should be found"
    assert "per_device_train_batch_size=32" in fixes or "logging_steps=" in fixes


@pytest.mark.bench  # a long timing check, run before a release: the bench tier (not in CI)
def test_hf_trainer_mixed_precision_reaches_the_trainers_model_and_is_said_as_its_setting(tmp_path):
    pytest.importorskip("transformers",
                        reason="the Hugging Face Trainer is not installed (pip install '.[frameworks]')")
    script, run = _run(tmp_path, "hf_trainer.py", options=("--warmup", "3", "--steps", "8", "--experiments", "amp",
                                                           "--budget-seconds", "60"))
    [amp] = [e for e in run.diagnosis["experiments"] if e["optimization"] == "amp"]
    # applied by the generic hook on the model the Trainer calls: no framework setting needed to reach it
    assert amp["verdict"] in ("faster", "slower", "no-change", "undecided")
    assert amp["applied"] == ["torch.autocast(cpu, bfloat16)"]
    assert amp["change"].startswith("--- a/hf_trainer.py") and "save_strategy=\"no\", bf16=True)" in amp["change"]


@pytest.mark.slow
def test_hf_trainer_batch_size_is_measured_in_samples_per_second_and_shown_as_its_setting(tmp_path):
    pytest.importorskip("transformers",
                        reason="the Hugging Face Trainer is not installed (pip install '.[frameworks]')")
    script, run = _run(tmp_path, "hf_trainer.py", options=("--warmup", "3", "--steps", "8", "--experiments",
                                                           "batch_size", "--budget-seconds", "90"))
    tried = [e for e in run.diagnosis["experiments"] if e["optimization"] == "batch_size"]
    decided = [e for e in tried if e["verdict"] in ("faster", "slower", "no-change")]
    assert decided, [(e["setting"], e["verdict"], e["reason"]) for e in tried]
    best = decided[0]
    assert best["metric"] == "samples/s" and best["speedup"] is not None
    assert (f"+args = TrainingArguments(output_dir=\"hf_out\", "
            f"per_device_train_batch_size={best['setting']['batch_size']},") in best["change"], best["change"]


@pytest.mark.slow
def test_lightning_slow_dataset_is_found_at_the_modules_dataloader_and_more_workers_verified(tmp_path):
    pytest.importorskip("lightning", reason="Lightning is not installed (pip install '.[frameworks]')")
    script, run = _run(tmp_path, "lightning_slow_data.py", options=(
        "--warmup", "3", "--steps", "8", "--experiments", "dataloader.num_workers", "--budget-seconds", "100"))
    loader_line = line_of(script, "return DataLoader(")
    length = run.diagnosis["run_cost"]["length"]  # 2048 items at batch 8 for max_epochs=2
    assert (length["total_steps"], length["steps_per_epoch"], length["source"]) == (512, 256, "Trainer(max_epochs=2)")
    top = run.findings[0]
    assert top["rule"] == "data-loading.slow-loader" and _line(top["location"]) == loader_line
    workers = [e for e in run.diagnosis["experiments"] if e["optimization"] == "dataloader.num_workers"]
    assert any(e["verdict"] == "faster" for e in workers), [(e["setting"], e["verdict"]) for e in workers]
    best = next(e for e in workers if e["verdict"] == "faster")
    assert "+        return DataLoader(SlowItems(), batch_size=8, shuffle=True, num_workers=" in best["change"]


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_lbfgs_step_is_one_optimizer_step_with_all_its_closure_calls(tmp_path):
    script, run = _run(tmp_path, "lbfgs_closure.py")
    capture = json.loads((run.run_dir / "capture.json").read_text())
    assert capture["step_source"] == "optimizer" and run.diagnosis["steps_profiled"] == 8
    # each closure call computes the loss once: a profiled step holds the script's 5 calls, not one
    trace = next((run.run_dir / "tb").glob("*.pt.trace.json*"))
    opened = gzip.open(trace) if trace.suffix == ".gz" else trace.open()
    events = json.load(opened)["traceEvents"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name", "").startswith("ProfilerStep#")]
    losses = [e["ts"] for e in events if e.get("name") == "aten::mse_loss"]
    assert [sum(start <= t < end for t in losses) for start, end in steps] == [5] * 8


def test_capture_written_before_frameworks_were_recorded_still_loads():
    data = {"status": "completed", "script": "train.py", "script_args": [], "step_source": "dataloader",
                   "steps_seen": 25, "steps_profiled": 20, "warmup_steps": 5, "wall_s": 3.0,
                   "environment": {"python": "3.11", "torch": "2.13.0", "platform": "linux", "cpu_count": 2,
                                   "total_memory_bytes": 1, "cuda_available": False},
                   "loaders": [{"location": "train.py:9", "batch_size": 2, "num_workers": 0, "pin_memory": False,
                                "persistent_workers": False, "prefetch_factor": None, "dataset_type": "D",
                                "dataset_len": 8}],
                   "optimizers": [{"location": "train.py:12", "type": "SGD", "lr": 0.1, "foreach": None,
                                   "fused": None}]}
    capture = from_jsonable(Capture, data)
    assert capture.framework is None and capture.loaders[0].framework is None
    assert capture.optimizers[0].framework is None


def test_a_finding_under_the_hf_trainer_is_written_as_training_arguments():
    code = frameworks.fix_code("huggingface", "train.py:12",
                               ("dataloader.num_workers", "dataloader.persistent_workers"), {"cpu_count": 4})
    assert code.splitlines() == [
        "# at train.py:12: keep your other arguments, add or change these",
        "TrainingArguments(..., dataloader_num_workers=4, dataloader_persistent_workers=True)"]
    # Lightning leaves the DataLoader to the user's own code: no Trainer(...) wording for it
    assert frameworks.fix_code("lightning", "train.py:40", ("dataloader.num_workers",), {"cpu_count": 4}) == ""
    assert 'precision="bf16-mixed"' in frameworks.fix_code("lightning", "train.py:40", ("amp",), {})


def test_logging_is_suggested_only_where_the_trainer_logs_more_often_than_every_50_steps():
    every_step = {"logging_strategy": "steps", "logging_steps": "1"}
    assert "logging_steps=50" in frameworks.fix_code("huggingface", "t.py:3", ("reduce_host_work",), {}, every_step)
    for current in ({"logging_strategy": "steps", "logging_steps": "500"},  # the default: already rarer
                    {"logging_strategy": "steps", "logging_steps": "0.01"},  # a fraction of the run
                    {"logging_strategy": "epoch", "logging_steps": "1"}):
        assert frameworks.fix_code("huggingface", "t.py:3", ("reduce_host_work",), {}, current) == "", current
    assert "log_every_n_steps=50" in frameworks.fix_code("lightning", "t.py:3", ("reduce_host_work",), {},
                                                         {"log_every_n_steps": "5"})


def test_a_change_the_framework_has_a_setting_for_is_applied_as_that_setting():
    """Under the HF Trainer the batch and the logging interval are TrainingArguments fields, set as the user's
    call runs; outside a framework (or for a change it has no setting for) the optimization's hooks apply it."""
    from diagnose.model import Change
    from diagnose.optimizations.runtime import build_change_set

    changes = [Change("batch_size", {"batch_size": 32}), Change("reduce_host_work", {"every": 50}),
               Change("dataloader.pin_memory", {})]
    under = build_change_set(changes, "train.py:9", "huggingface")
    assert under.framework_settings == {"huggingface": {"per_device_train_batch_size": 32, "logging_steps": 50}}
    assert under.applied[:2] == ["TrainingArguments(per_device_train_batch_size=32)",
                                 "TrainingArguments(logging_steps=50)"]
    assert len(under.loader_edits) == 1  # pin_memory: the DataLoader the Trainer builds
    plain = build_change_set(changes[:1], "train.py:9")
    assert plain.framework_settings == {} and len(plain.loader_edits) == 1
    # a loop accumulating 4 micro-batches, split once more: the Trainer's count is the product, not 2
    split = build_change_set([Change("grad_accumulation", {"micro_batches": 2, "batch_size": 8, "accumulating": 4})],
                             "train.py:9", "huggingface")
    assert split.framework_settings == {"huggingface": {"per_device_train_batch_size": 8,
                                                        "gradient_accumulation_steps": 8}}


def test_the_users_training_arguments_call_receives_the_setting_as_if_written():
    pytest.importorskip("transformers",
                        reason="the Hugging Face Trainer is not installed (pip install '.[frameworks]')")
    from transformers import TrainingArguments

    from diagnose.capture import frameworks as capture_frameworks

    undo = capture_frameworks.install({"huggingface": {"logging_steps": 50, "per_device_train_batch_size": 32}})
    try:
        args = TrainingArguments(output_dir="unused", logging_steps=1, per_device_train_batch_size=2, use_cpu=True)
    finally:
        undo()
    assert (args.logging_steps, args.per_device_train_batch_size, args.train_batch_size) == (50, 32, 32)
    after = TrainingArguments(output_dir="unused", logging_steps=1, use_cpu=True)
    assert after.logging_steps == 1  # undone: the next run's calls are the user's own


def test_the_users_lightning_trainer_call_receives_the_setting_as_if_written(tmp_path):
    pytest.importorskip("lightning", reason="Lightning is not installed (pip install '.[frameworks]')")
    from lightning.pytorch import Trainer

    from diagnose.capture import frameworks as capture_frameworks

    undo = capture_frameworks.install({"lightning": {"log_every_n_steps": 50}})
    try:
        trainer = Trainer(log_every_n_steps=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                          default_root_dir=tmp_path)
    finally:
        undo()
    assert trainer.log_every_n_steps == 50


def test_a_fused_optimizer_is_not_suggested_to_a_trainer_that_already_uses_one():
    fused = frameworks.fix_code("huggingface", "train.py:12", ("batch_size", "optimizer.fused"),
                                {"loader_batch_size": 2, "optimizer_multi_tensor": 1})
    assert "per_device_train_batch_size=32" in fused and "optim=" not in fused
    plain = frameworks.fix_code("huggingface", "train.py:12", ("optimizer.fused",), {"optimizer_multi_tensor": 0})
    assert 'optim="adamw_torch_fused"' in plain


@pytest.mark.bench  # a long timing check, run before a release: the bench tier (not in CI)
@pytest.mark.timeout(420)  # a 180 s budget, the Trainer's import and capture
def test_hf_trainer_at_batch_2_logging_every_step_names_logging_steps_and_tries_the_batch(tmp_path):
    """The findings' own choice of experiments (no --experiments): a handful of samples per step gets the batch
    tried whatever the mean op time, and the Trainer's per-step logging is said as logging_steps."""
    pytest.importorskip("transformers",
                        reason="the Hugging Face Trainer is not installed (pip install '.[frameworks]')")
    # 180 s: the plan's batch sweep, compile (the small batch's second fix, tried first: more promising) and the
    # logging change each to a verdict, at about 9 s a run here
    script, run = _run(tmp_path, "hf_trainer.py", options=("--warmup", "10", "--steps", "10", "--budget-seconds",
                                                           "180"))
    rules = {f["rule"] for f in run.findings}
    assert "utilization.small-batch" in rules or "utilization.dispatch-bound" in rules, rules
    fixes = " ".join(f["fix_code"] for f in run.findings)
    assert "logging_steps=" in fixes and "per_device_train_batch_size=" in fixes, fixes
    decided = ("faster", "slower", "no-change")
    batch = [e for e in run.diagnosis["experiments"] if e["optimization"] == "batch_size"]
    assert [e for e in batch if e["verdict"] in decided], batch
    # both measured as the setting the user will change, applied by the Trainer's own code
    assert all(e["applied"] == [f"TrainingArguments(per_device_train_batch_size={e['setting']['batch_size']})"]
               for e in batch), batch
    [logging] = [e for e in run.diagnosis["experiments"] if e["optimization"] == "reduce_host_work"]
    assert logging["verdict"] in decided and logging["applied"] == ["TrainingArguments(logging_steps=50)"], logging
    assert "+args = TrainingArguments(output_dir=\"hf_out\", per_device_train_batch_size=2, logging_steps=50," \
        in logging["change"], logging["change"]
