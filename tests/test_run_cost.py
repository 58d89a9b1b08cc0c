"""What a run costs: its length read from the script, its time projected and checked against a plain run of it,
energy from the device counters (a fake NVML stands in for a GPU; RAPL where this machine has it), and compare."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import REPO, SAMPLES, diagnose_cli, run_script
from torch.utils.data import DataLoader, TensorDataset

from diagnose.capture import run_length
from diagnose.capture.energy import MIN_COUNTER_WINDOW_S, POWERCAP, EnergyMeter, RaplCounters
from diagnose.capture.runner import run_in_child
from diagnose.experiments.scheduler import TIMED_ENTRY
from diagnose.model import (
    Capture,
    CostInputs,
    EnergyReading,
    Environment,
    Experiment,
    ExperimentResults,
    LoaderInfo,
    Measurement,
    MeasurePlan,
    RunConfig,
    RunCost,
    RunLength,
    Startup,
    Verdict,
)
from diagnose.record.ranks import summed_over_ranks
from diagnose.record.run_record import RunRecord
from diagnose.report.run_cost import terminal_lines
from diagnose.serial import dumps, from_jsonable
from diagnose.verdict.run_cost import energy_ratio, run_cost, with_user_length

# slow_loader.py as it comes: two epochs of 120 steps, about 20 s plainly; of that, 2.5-4.5 s of start-up that
# moves with the machine's load (a shorter run would test mostly that)
SHORT_RUN = ("--epochs", "2")
PROJECTION_TOLERANCE = 0.10


# -- the run's length, read from real loops on real frames -----------------------------------------------------------
def _loader(batches: int) -> DataLoader:
    return DataLoader(TensorDataset(torch.zeros(batches * 4, 2)), batch_size=4)


def _observed_in_epoch_loop(epochs: int, loader: DataLoader) -> run_length.Observed:
    for epoch in range(epochs):
        for batch in loader:
            return run_length.observe(sys._getframe())


def _observed_in_step_loop(config: dict) -> run_length.Observed:
    for step in range(config["max_iters"] * 2):
        return run_length.observe(sys._getframe())


def _observed_in_while_loop() -> run_length.Observed:
    steps = 0
    while steps < 10:
        return run_length.observe(sys._getframe())


def _one_epoch(loader: DataLoader) -> run_length.Observed:
    for batch in loader:
        return run_length.observe(sys._getframe())


def _observed_through_a_function(epochs: int, loader: DataLoader) -> run_length.Observed:
    for epoch in range(1, epochs + 1):
        return _one_epoch(loader)


def test_the_epochs_range_and_the_loaders_length_make_the_run():
    loader = _loader(30)
    length = run_length.run_length(_observed_in_epoch_loop(3, loader), len(loader), 1, "dataloader")
    assert (length.total_steps, length.epochs, length.steps_per_epoch) == (90, 3, 30)
    assert "range(epochs)" in length.source and "in loader" in length.source


def test_micro_batches_make_fewer_optimizer_steps_per_epoch():
    loader = _loader(40)
    length = run_length.run_length(_observed_in_epoch_loop(2, loader), len(loader), 4, "dataloader")
    assert (length.total_steps, length.steps_per_epoch) == (20, 10)


def test_a_range_read_through_a_dict_and_arithmetic_counts_steps():
    length = run_length.run_length(_observed_in_step_loop({"max_iters": 250}), None, 1, "optimizer")
    assert length.total_steps == 500 and "range(config['max_iters'] * 2)" in length.source


def test_an_epoch_loop_in_the_caller_multiplies_the_function_s_loop():
    loader = _loader(12)
    length = run_length.run_length(_observed_through_a_function(5, loader), len(loader), 1, "dataloader")
    assert length.total_steps == 60 and length.epochs == 5


def test_a_while_loop_leaves_the_length_unknown_and_says_what_gives_it():
    length = run_length.run_length(_observed_in_while_loop(), None, 1, "backward")
    assert length.total_steps is None
    assert "while steps < 10" in length.note and "--total-steps" in length.note


def test_the_users_total_steps_or_epochs_win_over_the_script():
    script = RunLength(240.0, source="the loops", steps_per_epoch=120.0, epochs=2.0)
    assert with_user_length(script, 1000, None).total_steps == 1000
    by_epochs = with_user_length(script, None, 90)
    assert (by_epochs.total_steps, by_epochs.source.startswith("--epochs")) == (10800, True)
    stream = with_user_length(RunLength(None, note="a while loop"), None, 3)
    assert stream.total_steps is None and "--total-steps" in stream.note


# -- energy ----------------------------------------------------------------------------------------------------------
class FakeNvml:
    """Stands in for a GPU's NVML (no GPU here): a total-energy counter in millijoules that rises at `watts` and
    moves only every `period_s`, as NVML's does (20-100 ms)."""

    def __init__(self, clock, watts: float = 300.0, period_s: float = 0.1, has_counter: bool = True):
        self.clock, self.watts, self.period_s, self.has_counter = clock, watts, period_s, has_counter

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):  # noqa: N802 (NVML's name)
        if not self.has_counter:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        ticks = int(self.clock() / self.period_s)
        return int(ticks * self.period_s * self.watts * 1000)


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _meter(nvml, clock) -> EnergyMeter:
    return EnergyMeter(nvml, handle="gpu0", rapl=RaplCounters(Path("/nonexistent/powercap")), clock=clock)


def test_the_gpu_counter_read_at_the_window_edges_gives_its_energy():
    clock = Clock()
    meter = _meter(FakeNvml(clock), clock)
    meter.start()
    clock.now += 2.0  # 20 steps of 100 ms
    meter.stop(steps=20)
    gpu, host = meter.readings()
    assert gpu.source == "nvml-energy-counter" and gpu.devices == 1
    assert gpu.joules == pytest.approx(600.0, rel=0.05) and gpu.steps == 20
    assert host.joules is None and "/nonexistent/powercap" in host.note


def test_a_window_too_short_for_the_counter_integrates_the_power_samples():
    clock = Clock()
    meter = _meter(FakeNvml(clock), clock)
    meter.start()
    clock.now += MIN_COUNTER_WINDOW_S / 2
    meter.stop(steps=5)
    samples = [(100.0 + 0.1 * k, 250.0) for k in range(6)]
    gpu, _ = meter.readings(samples)
    assert gpu.source == "nvml-power-samples" and gpu.joules == pytest.approx(125.0)
    assert "update period" in gpu.note
    unavailable, _ = meter.readings([])
    assert unavailable.joules is None and unavailable.source == "unavailable"


def test_a_gpu_without_the_counter_says_so():
    clock = Clock()
    meter = _meter(FakeNvml(clock, has_counter=False), clock)
    meter.start()
    clock.now += 2.0
    meter.stop(steps=20)
    gpu, _ = meter.readings()
    assert gpu.joules is None and "Volta" in gpu.note


def test_every_ranks_devices_are_summed():
    ranks = [(EnergyReading("gpu", 600.0, 2.0, 20, "nvml-energy-counter", 1),),
             (EnergyReading("gpu", 330.0, 2.2, 22, "nvml-energy-counter", 1),)]
    (gpu,) = summed_over_ranks(ranks)
    assert gpu.devices == 2 and gpu.joules == pytest.approx(20 * (30 + 15))
    missing = summed_over_ranks([ranks[0], (EnergyReading("gpu", None, 2.0, 20, "unavailable", note="no NVML"),)])
    assert missing[0].joules is None and missing[0].note == "no NVML"


def test_rapl_wraps_are_undone(tmp_path):
    """A powercap tree in a temporary folder stands in for the host's (this machine has no RAPL)."""
    zone = tmp_path / "intel-rapl:0"
    zone.mkdir()
    (zone / "max_energy_range_uj").write_text("1000000\n")
    (zone / "energy_uj").write_text("900000\n")
    rapl = RaplCounters(tmp_path)
    start = rapl.read()
    (zone / "energy_uj").write_text("100000\n")
    assert rapl.joules_between(start, rapl.read()) == pytest.approx(0.2)


@pytest.mark.skipif(not any(os.access(p / "energy_uj", os.R_OK) for p in POWERCAP.glob("intel-rapl:*")),
                    reason=f"RAPL is not readable here: {POWERCAP} has no readable intel-rapl:N/energy_uj "
                           "(absent in this VM, or root-only)")
def test_the_hosts_rapl_counters_measure_a_busy_second():
    meter = EnergyMeter(rapl=RaplCounters())
    meter.start()
    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        pass
    meter.stop(steps=1)
    (host,) = meter.readings()
    assert host.source == "rapl" and host.joules > 0


# -- the projection --------------------------------------------------------------------------------------------------
def _capture(step_batch: int = 16) -> Capture:
    env = Environment("3", "2", "linux", 2, 1 << 30, False)
    return Capture(status="completed", script="train.py", script_args=(), step_source="dataloader", steps_seen=30,
                   steps_profiled=20, warmup_steps=5, wall_s=5.0, environment=env,
                   loaders=(LoaderInfo("train.py:10", step_batch, 0, False, False, None, "Dataset", 1000),),
                   train_loader=0, startup=Startup(2.0, {}, {}),
                   run_length=RunLength(10000.0, "range(epochs)", 100.0, 100.0),
                   energy=(EnergyReading("gpu", 200.0, 2.0, 20, "nvml-energy-counter", 1),))


class _Analysis:
    step_time_s = {"mean": 0.06, "unprofiled": 0.05}


def test_each_verified_change_carries_its_interval_to_the_runs_time_and_money():
    faster = Experiment("dataloader.num_workers", {"num_workers": 8}, "steps/s", 4.0, (3.5, 5.0), Verdict.FASTER,
                        None, None, "", first_step_s=3.0, baseline_first_step_s=2.0)
    slower = Experiment("amp", {}, "steps/s", 0.8, (0.7, 0.9), Verdict.SLOWER, None, None, "")
    cost = run_cost(_capture(), _Analysis(), ExperimentResults((faster, slower)), CostInputs(price_per_hour=3.6))
    now, change = cost.options
    assert now.train_s == pytest.approx(2.0 + 10000 * 0.05)
    assert change.train_s == pytest.approx(3.0 + 10000 * 0.05 / 4)  # start-up moved by the first step's +1 s
    assert change.train_s_ci == pytest.approx((3.0 + 500 / 5.0, 3.0 + 500 / 3.5))
    assert now.money == pytest.approx(502 / 3600 * 3.6) and change.saved_s == pytest.approx(502 - 128)
    assert cost.energy_per_step_j == pytest.approx(10.0) and cost.energy_per_sample_j == pytest.approx(10 / 16)
    assert now.energy_j == pytest.approx(100000.0) and change.energy_j is None and "not measured" in change.energy_note
    lines = terminal_lines(cost)
    assert lines[0].startswith("The run: 10,000 steps (100 epochs of 100)")
    assert any("dataloader.num_workers(num_workers=8)" in line and "2.1 min [1.7-2.4 min]" in line for line in lines)
    assert "J per step" in lines[-1]
    assert from_jsonable(RunCost, json.loads(dumps(cost))) == cost


def test_without_a_length_the_step_is_said_and_no_total_is_made_up():
    capture = _capture()
    from dataclasses import replace
    unknown = replace(capture, run_length=RunLength(None, note="the loop at t.py:3 (while True) has no count"))
    cost = run_cost(unknown, _Analysis(), ExperimentResults(), CostInputs())
    assert cost.options[0].train_s is None
    assert "while True" in terminal_lines(cost)[0]


# -- money: one formula for the run and for compare ------------------------------------------------------------------
MONEY_CASES = [  # (train_s, devices, energy_j, price_per_hour, price_per_kwh) -> money
    pytest.param((3600.0, 2, None, None, None), None, id="no price: no figure"),
    pytest.param((3600.0, 2, None, 1.5, None), 3.0, id="device-hours at the price per hour"),
    pytest.param((3600.0, 1, 3.6e6, None, 0.3), 0.3, id="kWh at the price per kWh"),
    pytest.param((3600.0, 1, None, None, 0.3), None, id="a price per kWh alone and no energy read: no figure"),
    pytest.param((3600.0, 1, 7.2e6, 2.0, 0.25), 2.5, id="both prices, both parts"),
    pytest.param((3600.0, 1, None, 2.0, 0.25), 2.0, id="both prices and no energy read: the time alone"),
    pytest.param((3600.0, 1, 7.2e6, 2.0, None), 2.0, id="energy read but no price per kWh: not priced"),
    pytest.param((1800.0, 4, 0.0, 0.0, 0.0), 0.0, id="free is a figure, not none"),
]


@pytest.mark.parametrize(("inputs", "expected"), MONEY_CASES)
def test_the_money_formula(inputs, expected):
    from diagnose.verdict.money import money_for

    assert money_for(*inputs) == (pytest.approx(expected) if expected is not None else None)


def _priced_cost(price_per_hour, price_per_kwh, energy: bool) -> RunCost:
    from dataclasses import replace
    capture = _capture() if energy else replace(_capture(), energy=())
    return run_cost(capture, _Analysis(), ExperimentResults(), CostInputs(price_per_hour=price_per_hour,
                                                                         price_per_kwh=price_per_kwh))


@pytest.mark.parametrize("energy", [True, False], ids=["energy read", "no energy read"])
@pytest.mark.parametrize("prices", [(3.6, None), (None, 0.36), (3.6, 0.36)], ids=["per hour", "per kWh", "both"])
def test_compare_prices_a_side_as_its_run_does(prices, energy):
    """The same run on both sides of a comparison costs what the run's own diagnosis says, and a figure that leaves
    the energy out says so in both places."""
    from diagnose.compare.run_cost import same_run_on_both_sides
    from diagnose.report.run_cost import TIME_ONLY, compare_sentence

    cost = _priced_cost(*prices, energy=energy)
    now = cost.options[0]
    change = same_run_on_both_sides(cost, cost, cost.step_s, cost.step_s, (1.0, 1.0))
    assert change.a_money == change.b_money == now.money
    assert (now.money is None) == (prices == (None, 0.36) and not energy)
    time_only = prices == (3.6, 0.36) and not energy
    assert any(TIME_ONLY in line for line in terminal_lines(cost)) == time_only
    assert (TIME_ONLY in compare_sentence(change)) == time_only


def test_a_side_without_energy_makes_both_sides_of_a_comparison_time_only():
    from diagnose.compare.run_cost import same_run_on_both_sides

    read, unread = _priced_cost(3.6, 0.36, energy=True), _priced_cost(3.6, 0.36, energy=False)
    change = same_run_on_both_sides(read, unread, read.step_s, read.step_s / 2, (0.45, 0.55))
    assert change.a_energy_j is not None and change.b_energy_j is None  # shown as read
    assert change.a_money == pytest.approx(unread.options[0].money)  # priced alike: the time alone on both sides
    assert change.b_money < change.a_money


# -- real runs ---------------------------------------------------------------------------------------------------------
def _plain_seconds(*args: str) -> float:
    start = time.monotonic()
    subprocess.run([sys.executable, str(SAMPLES / "slow_loader.py"), *args], cwd=REPO, check=True,
                   capture_output=True, timeout=300)
    return time.monotonic() - start


@pytest.fixture(scope="module")
def short_runs(tmp_path_factory):
    """slow_loader.py for two short epochs, diagnosed, then run plainly (as its user would), then diagnosed again
    with 4 workers: the projection's check and compare's two sides."""
    root = tmp_path_factory.mktemp("cost")
    now = run_script(SAMPLES / "slow_loader.py", *SHORT_RUN, out=root / "now",
                     options=("--warmup", "3", "--steps", "8", "--experiments", "none", "--price-per-hour", "2"))
    plain_s = _plain_seconds(*SHORT_RUN)
    workers = run_script(SAMPLES / "slow_loader.py", *SHORT_RUN, "--num-workers", "4", out=root / "workers",
                         options=("--warmup", "3", "--steps", "8", "--experiments", "none", "--price-per-hour", "2"))
    return now, plain_s, workers


@pytest.mark.slow  # asserts on what it timed: the slow tier, where nothing runs beside it
def test_the_projected_run_matches_a_plain_run_of_the_script(short_runs):
    now, plain_s, _ = short_runs
    assert now.returncode == 0, now.stderr[-2000:]
    cost = now.diagnosis["run_cost"]
    assert cost["length"]["total_steps"] == 240 and cost["length"]["epochs"] == 2
    assert "range(args.epochs)" in cost["length"]["source"]
    projected = cost["options"][0]["train_s"]
    assert abs(projected - plain_s) <= PROJECTION_TOLERANCE * plain_s, (projected, plain_s)
    assert "The run: 240 steps (2 epochs of 120)" in now.stderr
    assert "Energy: unavailable" in now.stderr
    html = (now.run_dir / "report.html").read_text()
    assert 'id="run-cost"' in html and "The run: 240 steps" in html


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_compare_says_the_same_run_in_hours_and_money_on_both_sides(short_runs, tmp_path):
    now, _, workers = short_runs
    proc = diagnose_cli("compare", "--out", str(tmp_path / "cmp"), str(now.run_dir), str(workers.run_dir))
    assert proc.returncode == 0, proc.stderr[-2000:]
    change = json.loads((tmp_path / "cmp" / "compare.json").read_text())["run_cost"]
    assert change["length"]["total_steps"] == 240
    assert change["b_train_s"] < change["a_train_s"] / 2 and change["b_money"] < change["a_money"]
    assert "The same run (240 steps, 2 epochs" in proc.stderr


# -- a change's energy: the experiments' timed runs read the counters too ----------------------------------------------
def _timed(joules: float, steps: int = 40, samples: int = 640) -> Measurement:
    """A timed run's record as a GPU machine writes it (the counter's figures stand in for a GPU's)."""
    reading = EnergyReading("gpu", joules, 2.0, steps, "nvml-energy-counter", 1, samples=samples)
    return Measurement(status="completed", windows=(), applied=(), startup_s=1.0, first_step_s=0.1, losses=(),
                       peak_memory_bytes=None, steps_seen=steps, energy=(reading,))


def test_a_changes_energy_is_its_runs_energy_per_unit_over_the_baselines():
    baseline, variant = [_timed(400.0), _timed(400.0)], [_timed(100.0), _timed(100.0)]
    assert energy_ratio(baseline, variant, "steps/s") == pytest.approx(0.25)
    bigger_batch = [_timed(400.0, steps=10, samples=640)] * 2  # the same samples in fewer, larger steps
    assert energy_ratio(baseline, bigger_batch, "samples/s") == pytest.approx(1.0)
    unread = Measurement(status="completed", windows=(), applied=(), startup_s=1.0, first_step_s=0.1, losses=(),
                         peak_memory_bytes=None, steps_seen=40)
    assert energy_ratio(baseline, [_timed(100.0), unread], "steps/s") is None  # a run that read no counter: no figure
    faster = Experiment("amp", {}, "steps/s", 2.0, (1.8, 2.2), Verdict.FASTER, None, None, "", energy_ratio=0.6)
    cost = run_cost(_capture(), _Analysis(), ExperimentResults((faster,)), CostInputs(price_per_kwh=0.36))
    now, change = cost.options
    assert change.energy_j == pytest.approx(0.6 * now.energy_j) and change.energy_note == ""
    assert change.saved_money == pytest.approx(now.money - change.money)


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_a_timed_run_says_its_energy_was_unavailable_here_and_over_which_steps(tmp_path):
    plan = MeasurePlan(warmup_steps=3, warmup_s=0.2, window_s=0.3, min_window_steps=5, windows=2)
    config = RunConfig(script=str(SAMPLES / "slow_loader.py"), script_args=("--read-delay", "0.0005"),
                       out_dir=str(tmp_path), warmup_steps=0, profile_steps=0, max_seconds=60, measure=plan)
    run_in_child(config, tmp_path, lambda line, is_err: None, lambda line: None, TIMED_ENTRY)
    measurement = RunRecord(tmp_path).measure()
    (host,) = measurement.energy  # no GPU here: the host's RAPL only, and it is absent
    assert host.domain == "host" and host.joules is None and "powercap" in host.note
    assert host.steps == sum(w.wall_steps for w in measurement.windows) and host.samples == 16 * host.steps
