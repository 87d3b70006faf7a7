"""dreamddp-plan: agrees with the simulator, its curves are monotone, its bisection inverts them,
bad input is one line naming the field, and a 1,000-worker 100B cluster needs no torch."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from dreamddp.comm.cost import LinkModel
from dreamddp.planner.cli import main
from dreamddp.planner.link import HierLink
from dreamddp.planner.predict import Planner
from dreamddp.planner.spec import Cluster, Level, model_of
from dreamddp.prediction import simulate
from dreamddp.schedule.profile import Profile

ROOT = Path(__file__).resolve().parents[1]


def small(replicas=4, gbps=1.0, latency_ms=0.5, H=4):
    model = model_of({"n_layers": 6, "params": 6e6}, {"step_time_s": 0.06}, replicas)
    return Planner(model, Cluster(replicas=replicas, slow=Level(gbps, latency_ms / 1e3)), H)


@pytest.mark.parametrize("recipe,algo,options", [
    ("ssgd", "ssgd", {}), ("ascwfbp", "ascwfbp", {}), ("diloco", "flsgd", {"outer_optimizer": "nesterov"}),
    ("plsgd_enp", "plsgd_enp", {}), ("dreamddp", "dreamddp", {}),
    ("streaming_diloco_fp4", "streaming_diloco", {"tau": 1, "compress": "e3m0", "fragments": 2}),
])
def test_iteration_time_equals_the_simulators(recipe, algo, options):
    """On a flat ring (one worker per replica) the planner's time is prediction.simulate's, which
    times the same plan with simulate_plan on the ring LinkModel."""
    p = small()
    names = list(p.layout.names)
    fwd = dict(zip(names, p.compute.fwd))
    bp = dict(zip(names, p.compute.bp))
    link = LinkModel(1.0, 0.5e-3)
    profile = Profile(names, bp, {u: link.seconds("all_reduce", b, 4) for u, b in zip(names, p.nbytes)}, fwd,
                      dict(zip(names, p.nbytes)), 0.0)
    ours = p.predict(recipe)
    theirs = simulate(algo, profile, H=4, world=4, link=link, **options)
    assert ours.iteration_s == pytest.approx(theirs.mean_iter, rel=1e-12)
    assert ours.utilization == pytest.approx(0.06 / theirs.mean_iter, rel=1e-12)


def test_hierarchical_link_formula():
    c = Cluster(replicas=3, workers_per_replica=4, slow=Level(10, 1e-3), fast=Level(100, 1e-5))
    S = 1e9
    want = 2 * 2 / 3 * S * 8 / 10e9 + 4 * 1e-3 + 2 * 3 / 4 * S * 8 / 100e9 + 6 * 1e-5
    assert HierLink(c).seconds("all_reduce", S) == pytest.approx(want)
    assert HierLink(c).slow_bytes("all_reduce", S) == pytest.approx(2 * 2 / 3 * S / 4)
    flat = Cluster(replicas=5, slow=Level(3, 2e-3))
    assert HierLink(flat).seconds("all_gather", S) == pytest.approx(LinkModel(3, 2e-3).seconds("all_gather", S, 5))


@pytest.mark.parametrize("recipe", ["ascwfbp", "diloco", "streaming_diloco", "streaming_diloco_fp4", "dreamddp"])
def test_utilization_is_monotone_in_bandwidth(recipe):
    p = small(latency_ms=0.0)
    u = [p.utilization(recipe, g) for g in np.logspace(-2, 3, 16)]
    assert all(b >= a - 1e-9 for a, b in zip(u, u[1:])), u
    assert u[0] < 0.5 and u[-1] > 0.95


@pytest.mark.parametrize("recipe", ["ascwfbp", "diloco", "streaming_diloco"])
def test_needed_rate_inverts_the_curve(recipe):
    p = small(latency_ms=0.0)
    for target in (0.5, 0.9):
        g = p.needed_gbps(recipe, target)
        assert p.utilization(recipe, g) >= target
        assert p.utilization(recipe, g / (1 + 1e-3)) < target
    assert p.needed_gbps("diloco", 1.0) == float("inf") or p.utilization("diloco", 1e6) >= 1.0


def test_latency_can_make_a_target_unreachable():
    p = small(latency_ms=50.0)
    assert p.needed_gbps("ssgd", 0.99) == float("inf")


def _write(tmp_path, text, name="m.yaml"):
    f = tmp_path / name
    f.write_text(text)
    return str(f)


@pytest.mark.parametrize("text,field", [
    ("model: {n_layers: 0, params: 1e9}\ncompute: {step_time_s: 1}\n", "model.n_layers"),
    ("model: {n_layers: 4, params: 1e9}\ncompute: {step_time_s: -1}\n", "compute.step_time_s"),
    ("model: {n_layers: 4, params: 1e9}\ncompute: {tokens_per_step: 1e6, mfu: 0.4}\n", "compute.peak_flops"),
    ("model: {n_layer: 4, params: 1e9}\ncompute: {step_time_s: 1}\n", "model.n_layer"),
    ("model: {n_layers: 4, params: 1e9}\ncompute: {step_time_s: 1}\ncluster: {slow: {gbps: 0}}\n",
     "cluster.slow.gbps"),
    ("model: {layers: [{name: a, params: 1}, {params: 2}]}\ncompute: {step_time_s: 1}\n", "model.layers[1].name"),
    ("model: {n_layers: 4, params: 1e9}\ncompute: {step_time_s: 1}\ncluster: {worker_speeds: [1, 2]}\n",
     "cluster.worker_speeds[1]"),
])
def test_bad_input_is_one_line_naming_the_field(tmp_path, capsys, text, field):
    assert main(["predict", _write(tmp_path, text)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("dreamddp-plan: error: ") and field in err, err


def test_missing_file_and_bad_yaml_exit_2(tmp_path, capsys):
    assert main(["predict", str(tmp_path / "nope.yaml")]) == 2
    assert main(["predict", _write(tmp_path, "model: [unclosed\n")]) == 2
    errs = capsys.readouterr().err.strip().splitlines()
    assert len(errs) == 2 and all(e.startswith("dreamddp-plan: error: ") for e in errs)


def test_flops_form_and_profile_dir(tmp_path, capsys):
    f = _write(tmp_path, "model: {n_layers: 4, d_model: 256, vocab: 1000}\n"
                         "compute: {tokens_per_step: 1.0e5, mfu: 0.5, peak_flops: 1.0e14}\n"
                         "cluster: {replicas: 2, workers_per_replica: 2}\n")
    assert main(["predict", f, "--recipes", "ssgd", "dreamddp", "--targets", "0.9", "--out", str(tmp_path / "o")]) == 0
    assert (tmp_path / "o" / "utilization.png").stat().st_size > 0
    assert "dreamddp-plan predict" in (tmp_path / "o" / "README.md").read_text()
    profile = ROOT / "tests" / "fixtures"
    dirs = [d for d in profile.rglob("nbytes.json")] if profile.is_dir() else []
    if dirs:
        assert main(["predict", str(dirs[0].parent), "--recipes", "ssgd", "--gbps", "1"]) == 0


def test_a_thousand_workers_and_100B_without_torch(tmp_path):
    f = _write(tmp_path, "model: {n_layers: 108, params: 1.0e11}\ncompute: {step_time_s: 4.9}\n"
                         "cluster: {replicas: 125, workers_per_replica: 8, slow: {gbps: 10, latency_ms: 10}}\n")
    code = ("import sys\nfrom dreamddp.planner.cli import main\n"
            f"rc = main(['predict', {f!r}, '--H', '100'])\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\nsys.exit(rc)\n")
    start = time.perf_counter()
    r = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    took = time.perf_counter() - start
    assert r.returncode == 0, r.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    assert "torch" not in imported
    assert "| dreamddp" in r.stdout and "streaming_diloco" in r.stdout
    assert took < 60, took
