"""The latency-aware dry run: hop counts, collective cost, the calibration that never fits the number it
predicts, the saved Chinchilla prediction within +-30% of Chen et al.'s 14.1 ms, and the modern configs'
layouts (no compiles here: the compiled dry runs are in tests/test_sharding.py and benchmarks/dryrun/)."""
import json
import pathlib

import jax
import pytest

from specjax import dryrun, hardware, latency, sharding

ROOT = pathlib.Path(__file__).parents[1]
V4 = hardware.get("tpu_v4")


def test_hops_by_topology():
  assert latency.hops("all-reduce", 16) == 30                 # ring: reduce-scatter + all-gather, 2(n-1)
  assert latency.hops("all-gather", 16) == latency.hops("reduce-scatter", 16) == 15
  assert latency.hops("collective-permute", 16) == 1 and latency.hops("all-reduce", 1) == 0
  assert latency.torus_dims(16) == (4, 2, 2) and latency.torus_dims(16, 2) == (4, 4)
  assert latency.hops("all-reduce", 16, "torus") == 2 * (2 + 1 + 1)  # bidirectional rings per torus dim
  assert latency.hops("all-reduce", 16, "torus", torus_ndim=2) == 2 * (2 + 2)
  with pytest.raises(ValueError, match="unknown topology"):
    latency.hops("all-reduce", 4, "mesh")


def test_collective_cost_is_latency_plus_bytes_over_bandwidth():
  lat = latency.LatencyModel.of(V4)
  assert (lat.hop_latency_s, lat.dispatch_s, lat.link_bandwidth) == (1e-6, 5e-6, 45e9)
  size = 8192 * 2  # one bf16 token of Chinchilla's residual stream
  expected = 5e-6 + 30 * 1e-6 + 2 * 15 / 16 * size / 45e9
  assert lat.collective_s("all-reduce", size, 16) == pytest.approx(expected)
  assert lat.collective_s("all-reduce", size, 1) == 0.0
  # at batch 1 the latency terms dominate: bytes / bandwidth is under 2% of the all-reduce
  assert (2 * 15 / 16 * size / 45e9) / expected < 0.02
  ops = [("all-reduce", size, 16), ("all-gather", 64, 16), ("all-reduce", size, 1)]  # group 1: free
  terms = latency.collective_terms(ops, lat)
  assert terms["coll_n"] == 2 and terms["coll_hops"] == 45
  assert latency.collective_seconds(terms, lat) == pytest.approx(terms["coll_s"])
  doubled = latency.collective_terms(ops * 2, lat)
  assert doubled["coll_s"] == pytest.approx(2 * terms["coll_s"])  # linear: depth extrapolation is exact


def _fake_step(layers, memory_bytes, collectives, compiled=True):
  """A profiled step as profile_step returns it (per-layer 2 all-reduces of 16 KB on 16 chips)."""
  ops = [("all-reduce", 16384, 16)] * collectives
  step = dict(flops=0.0, memory_bytes=memory_bytes, num_layers=layers, n_total=collectives,
              compiled_depths=[2, 4] if compiled else [], bandwidth_only_s=memory_bytes / V4.hbm_bandwidth)
  for topo in ("ring", "torus"):
    step.update({f"{topo}_{k}": v for k, v in latency.collective_terms(ops, latency.LatencyModel.of(V4, topology=topo)).items()})
  return step


def test_calibration_fits_the_draft_and_never_reads_the_target():
  steps = {"target": _fake_step(80, 8.2e9, 164), "verify": _fake_step(80, 8.2e9, 164),
           "draft": _fake_step(8, 5.0e8, 19)}
  cfg = dict(paper=dict(baseline_ms_per_token=14.1, draft_ms_per_token=1.8, source="t", draft_source="d"))
  lat, cal, rows = dryrun.calibrated_latency_model(cfg, steps, V4)
  assert cal["fitted"] == "step_overhead_s" and cal["on"] == "draft step"
  draft_row = next(r for r in rows if r["step"] == "draft")
  assert draft_row["role"] == "calibration"
  assert draft_row["predicted_ms"]["+ step overhead fit on draft"]["ms"] == pytest.approx(1.8, abs=1e-3)
  target_row = next(r for r in rows if r["step"] == "target")
  assert target_row["role"] == "prediction" and target_row["published_ms"] == 14.1
  # the target's published number changes the error column only, never the model
  other = dict(cfg, paper=dict(cfg["paper"], baseline_ms_per_token=99.0))
  lat2, _, rows2 = dryrun.calibrated_latency_model(other, steps, V4)
  assert lat2 == lat
  assert rows2[0]["predicted_ms"] == {k: dict(v, error=pytest.approx(v["ms"] / 99.0 - 1, abs=2e-3))
                                      for k, v in target_row["predicted_ms"].items()}
  # no published drafter time: nothing is fitted, the hardware-only model predicts
  lat3, cal3, rows3 = dryrun.calibrated_latency_model(dict(paper=dict(baseline_ms_per_token=14.1)), steps, V4)
  assert cal3["mode"] is None and lat3.step_overhead_s == 0 and [r["role"] for r in rows3] == ["prediction"]
  # config overrides reach the model (hop latency, dispatch, topology, fixed overheads)
  lat4, _, _ = dryrun.calibrated_latency_model(dict(latency=dict(hop_latency_us=2, dispatch_us=0, topology="torus",
                                                                 step_overhead_us=100)), steps, V4)
  assert (lat4.hop_latency_s, lat4.dispatch_s, lat4.topology) == (2e-6, 0.0, "torus")
  assert lat4.step_overhead_s == pytest.approx(1e-4)


def test_saved_chinchilla_prediction_is_within_30_percent_of_chen():
  """Recomputes the prediction from the saved compiled costs (benchmarks/dryrun/chinchilla70b_4b.json,
  ``python -m specjax.dryrun configs/chinchilla70b_4b.py --out ...``) with the current latency code."""
  saved = json.loads((ROOT / "benchmarks" / "dryrun" / "chinchilla70b_4b.json").read_text())
  cfg = dryrun._load_config(str(ROOT / "configs" / "chinchilla70b_4b.py")).to_dict()
  lat, cal, rows = dryrun.calibrated_latency_model(cfg, saved["steps"], V4)
  assert cal["published_ms"] == 1.8 and 0 < lat.step_overhead_s < 1.8e-3
  target = next(r for r in rows if r["step"] == "target")
  assert target["published_ms"] == 14.1
  predicted = target["predicted_ms"]["+ step overhead fit on draft"]["ms"]
  assert abs(predicted / 14.1 - 1) <= 0.30, predicted
  assert abs(target["bandwidth_only_ms"] / 14.1 - 1) > 0.30  # what the bandwidth-only model missed
  assert saved["collectives_per_target_step"] >= 160        # 2 all-reduces per layer, 80 layers
  assert 7.5 < saved["per_device_target_param_bytes"] / 1e9 < 9.5  # ~65B bf16 params over 16 chips


@pytest.mark.parametrize("config,model,mesh,replicated", [
    ("llama3_70b_8b.py", "target", (1, 16), {"kv_heads"}),          # 8 KV heads on 16: K/V replicated
    ("llama3_70b_8b.py", "drafter", (1, 16), {"kv_heads"}),
    ("gemma3_27b_270m.py", "target", (1, 8), set()),                # 32 / 16 heads split 8 ways
    ("gemma3_27b_270m.py", "drafter", (1, 8), {"heads", "kv_heads"}),  # 4 heads, 1 KV head: attention replicated
    ("chinchilla70b_4b.py", "target", (1, 16), set()),
])
def test_modern_configs_layouts(config, model, mesh, replicated):
  cfg = dryrun._load_config(str(ROOT / "configs" / config))
  assert dryrun.mesh_size(cfg) == mesh[0] * mesh[1]
  fields = cfg.target if model == "target" else cfg.drafter.model
  module = dryrun.with_depth(dryrun.build_module(fields.to_dict()), 1)  # one layer: the layout repeats
  abstract = jax.sharding.AbstractMesh(mesh, ("data", "model"))  # 16 devices without 16 devices
  assert set(sharding.layout_report(_shapes(module), abstract)) == replicated


def _shapes(module):
  import flax.linen as nn  # pylint: disable=import-outside-toplevel
  from specjax.models import bundle  # pylint: disable=import-outside-toplevel
  args, kwargs = bundle._dummy_inputs(module)  # pylint: disable=protected-access
  return dryrun.Model(module, nn.unbox(jax.eval_shape(lambda: module.init(jax.random.PRNGKey(0), *args, **kwargs))
                                       ["params"]))


def test_table_prints_predicted_vs_published_with_sources():
  saved = json.loads((ROOT / "benchmarks" / "dryrun" / "chinchilla70b_4b.json").read_text())
  table = dryrun.format_table(saved)
  assert "predicted vs published" in table and "14.1" in table and "arXiv 2302.01318" in table
  for column in ("FLOPs ms", "HBM ms", "coll. ms", "weights GB/dev", "KV GB/dev"):
    assert column in table
  assert "| step | published ms |" in dryrun.format_markdown(saved)
