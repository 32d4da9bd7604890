"""Sharded decoding == one device (also GQA/MQA/T5 head counts the model axis does not divide);
clear errors; Megatron collectives per layer; the dry run.

Needs exactly 8 CPU devices: tests/conftest.py asks for them before jax is imported, unless XLA_FLAGS
already names a device count; then this module runs itself once more in a child process with 8 (one
test here, the whole module there), so it never skips.
"""
import functools
import os
import pathlib
import re
import subprocess
import sys

import flax.linen as nn
import jax
import numpy as np
import pytest

import specjax
from specjax import dryrun, sharding, testing
from specjax.drafters import DraftModel, NGram
from specjax.sampling import Sampling

CPU = jax.devices("cpu")
IN_PROCESS = len(CPU) == 8  # else: test_in_a_child_process_with_8_devices, at the end of this file
# "decoder": heads, kv_heads, mlp, vocab all divide 8, so every mesh below shards every weight. The
# other families have head counts the model axis does not divide (replicated, see sharding.py):
#   gqa: an 8-head target with 2 KV heads (Llama-3 style) drafted by a SmolLM2-shaped model (9 heads,
#        3 KV heads, tied embeddings): on 2x4 and 1x8 the target's K/V replicate, the drafter's whole
#        attention replicates, both MLPs split;
#   gemma_style: Gemma 3 270M's shape, 4 heads and ONE KV head (MQA), every family piece on;
#   t5: 4 heads (1x8: attention and relative-position bias replicated, MLP split).
DIMS = dict(vocab_size=64, num_heads=8, head_dim=4, mlp_dim=64)
PROMPTS_BxP = np.random.default_rng(0).integers(2, 64, (8, 6))
LENGTHS_B = np.array([6, 3, 5, 6, 2, 4, 6, 1])
GAMMA, MAX_NEW = 3, 8


def _mesh(shape):
  return sharding.make_mesh(shape, devices=CPU)


@functools.lru_cache(maxsize=None)
def _models(family):
  with jax.default_device(CPU[0]):
    if family == "decoder":
      target = testing.tiny_decoder(num_kv_heads=8, **DIMS)
    elif family == "gqa":
      target = testing.tiny_decoder(num_kv_heads=2, **DIMS)
      smollm2 = testing.tiny_decoder(vocab_size=64, num_layers=1, num_heads=9, num_kv_heads=3, head_dim=4, mlp_dim=64,
                                     tie_embeddings=True, seed=3)
      return target, smollm2
    elif family == "gemma_style":  # every family piece on, a window shorter than the sequences; MQA
      target = testing.tiny_decoder(layer_windows=(4, 0), local_rope_theta=100.0, norm_offset=1.0,
                                    sandwich_norms=True, qk_norm=True, qkv_bias=True, scale_embeddings=True,
                                    mlp_activation="gelu_tanh", query_pre_attn_scalar=6.0,
                                    **dict(DIMS, num_heads=4, num_kv_heads=1, head_dim=8))
    else:
      target = testing.tiny_t5(**dict(DIMS, num_heads=4), num_encoder_layers=1, num_decoder_layers=1)
    return target, testing.perturbed(target, 0.3, seed=1)  # a drafter that mostly agrees


def _run(family, drafter_kind, temperature, mesh_shape=None):
  target, draft = _models(family)
  drafter = DraftModel(draft) if drafter_kind == "draft" else NGram(2)
  mesh = None if mesh_shape is None else _mesh(mesh_shape)
  with jax.default_device(CPU[0]):
    kw = dict(max_new_tokens=MAX_NEW, sampling=Sampling(temperature), rng=jax.random.PRNGKey(7), mesh=mesh)
    if drafter_kind == "ar":
      return specjax.generate(target, PROMPTS_BxP, LENGTHS_B, **kw)
    return specjax.speculative_generate(target, drafter, PROMPTS_BxP, LENGTHS_B, gamma=GAMMA, **kw)


_reference = functools.lru_cache(maxsize=None)(_run)  # one single-device run per setting


@pytest.mark.parametrize("family,drafter_kind,temperature,mesh_shape", [
    ("decoder", "draft", 0.0, "1x8"),
    ("decoder", "draft", 0.0, "8x1"),
    ("gemma_style", "draft", 0.0, "2x4"),
    ("gemma_style", "draft", 1.0, "1x8"),
    ("decoder", "draft", 1.0, "2x4"),
    ("decoder", "ngram", 0.0, "1x8"),
    ("decoder", "ngram", 1.0, "2x4"),
    ("decoder", "ar", 1.0, "2x4"),
    ("t5", "draft", 1.0, "2x4"),
    # head counts the model axis does not divide (replicated K/V or attention), greedy and seeded sampling
    ("gqa", "draft", 0.0, "2x4"),
    ("gqa", "draft", 1.0, "1x8"),
    ("gemma_style", "draft", 1.0, "8x1"),
    ("t5", "draft", 0.0, "1x8"),
    # not on 8x1: T5 and gqa (model=1 divides every head count, so their heads play no part there:
    # the same layout as the decoders' 8x1 cases, which cover it)
])  # each setting costs two compiles (~5 s each on 2 cores): one per combination that matters
def test_sharded_tokens_equal_single_device(family, drafter_kind, temperature, mesh_shape):
  ref = _reference(family, drafter_kind, temperature)
  out = _run(family, drafter_kind, temperature, mesh_shape)
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  np.testing.assert_array_equal(out.lengths, ref.lengths)
  assert out.stats["iterations"] == ref.stats["iterations"]


def test_shard_places_params_by_rules():
  target, draft = _models("decoder")
  mesh = _mesh("2x4")
  placed = sharding.shard(DraftModel(draft), mesh).model.params  # a DraftModel has its model placed
  q, down = placed["layer_0"]["attn"]["q"], placed["layer_0"]["mlp"]["down"]
  assert q.sharding.shard_shape(q.shape) == (32, 2, 4) and down.sharding.shard_shape(down.shape) == (16, 32)
  assert q.sharding.mesh == sharding.factored_mesh(mesh)  # model=4 as model_0 x model_1 (same devices, order)
  assert sharding.mesh_shape_str(q.sharding.mesh) == "2x4"
  assert placed["final_norm"]["scale"].sharding.is_fully_replicated
  assert sharding.shard(NGram(2), mesh) == NGram(2)
  assert sharding.cache_sharding(mesh).spec == jax.sharding.PartitionSpec(None, "data", "model", None, None)
  assert sharding.make_mesh({"data": 2, "model": 4}, devices=CPU).shape == _mesh("2x4").shape
  x = np.ones((8, 4), np.float32)
  assert sharding.constrain(x, ("batch", "embed")) is x  # no mesh in context: a no-op
  with jax.set_mesh(mesh):
    y = jax.jit(lambda v: sharding.constrain(v * 2, ("batch", "mlp")))(x)
  assert y.sharding.spec == jax.sharding.PartitionSpec("data", "model")
  del target


def test_mesh_larger_than_devices():
  with pytest.raises(ValueError, match=r"needs 16 devices but only 8 are present"):
    sharding.make_mesh("4x4", devices=CPU)
  with pytest.raises(ValueError, match="must look like"):
    sharding.make_mesh("2by4")


def _abstract(**cfg):
  module = dryrun.build_module(dict(dict(family="decoder"), **cfg))
  return dryrun.abstract_model(module, _mesh("1x1"))  # ShapeDtypeStructs: no weights


def test_heads_the_model_axis_does_not_divide_are_replicated():
  P = jax.sharding.PartitionSpec
  mesh = _mesh("2x4")
  gqa = _abstract(num_heads=4, num_kv_heads=2, mlp_dim=64, vocab_size=64, num_layers=1)
  specs = sharding.param_shardings(gqa, mesh)
  assert specs["layer_0"]["attn"]["q"].spec == P(None, "model", None)  # query heads still split
  assert specs["layer_0"]["attn"]["o"].spec == P("model", None, None)
  assert specs["layer_0"]["attn"]["k"].spec == P(None, None, None)      # 2 KV heads on model=4: replicated
  assert specs["layer_0"]["mlp"]["down"].spec == P("model", None)       # and the MLP still splits
  report = sharding.layout_report(gqa, mesh, factored=False)
  assert list(report) == ["kv_heads"] and report["kv_heads"]["size"] == 2 and report["kv_heads"]["split"] == 1
  assert "num_kv_heads=2 does not divide model=4" in report["kv_heads"]["note"]
  # what shard() does: on the factored mesh the 2 KV heads split 2 ways, each kept by the 2 devices
  # whose query heads use it (q split 4 ways: devices 0,1 hold heads 0-1 -> KV head 0)
  fm = sharding.factored_mesh(mesh)
  k_spec = sharding.param_shardings(gqa, fm)["layer_0"]["attn"]["k"]
  assert k_spec.shard_shape((32, 2, 32)) == (32, 1, 32)
  report = sharding.layout_report(gqa, mesh)
  assert report["kv_heads"]["split"] == 2 and "each KV head kept by the 2 devices" in report["kv_heads"]["note"]
  assert sharding.cache_sharding(fm, num_kv_heads=2).shard_shape((2, 4, 2, 16, 4)) == (2, 2, 1, 16, 4)
  assert sorted(report["kv_heads"]["params"]) == ["layer_0/attn/k", "layer_0/attn/v"]
  with pytest.raises(ValueError, match=r"num_kv_heads=2 is not divisible by mesh axis model=4"):
    sharding.param_shardings(gqa, mesh, strict=True)  # the old error, on request
  # KV cache [L, B, K, S, D]: K replicated with the K/V projections; batch stays an error
  assert sharding.cache_sharding(mesh, num_kv_heads=2).spec == P(None, "data", None, None, None)
  assert sharding.cache_sharding(mesh, num_kv_heads=8).spec == P(None, "data", "model", None, None)
  with pytest.raises(ValueError, match=r"batch=3 is not divisible by mesh axis data=2"):
    sharding.cache_sharding(mesh, shape=(2, 3, 2, 16, 4))
  # T5 with 4 heads on 1x8: attention (and its relative-position bias) replicated, MLP split
  t5 = dryrun.abstract_model(dryrun.build_module(dict(family="t5", num_heads=4, mlp_dim=64, vocab_size=64)),
                             _mesh("1x1"))
  report = sharding.layout_report(t5, _mesh("1x8"), factored=False)
  assert set(report) == {"heads", "kv_heads"} and "attention (q, o) replicated" in report["heads"]["note"]
  assert any("rel_bias" in p for p in report["heads"]["params"])
  report = sharding.layout_report(t5, _mesh("1x8"))  # factored: 4 heads split 4 ways, replicated 2x
  assert report["heads"]["split"] == 4 and "split 4 ways, replicated 2x" in report["heads"]["note"]
  t5_specs = sharding.param_shardings(t5, _mesh("1x8"))
  assert all(s.is_fully_replicated for s in jax.tree_util.tree_leaves(t5_specs["encoder"]["layers_0"]["self_attn"]))
  assert t5_specs["encoder"]["layers_0"]["mlp"]["down"].spec == P("model", None)
  assert sharding.layout_report(gqa, _mesh("8x1")) == {}  # model=1: everything "splits"
  with jax.set_mesh(mesh):  # constrain falls back the same way (it sees the shape)
    y = jax.jit(lambda v: sharding.constrain(v * 2, ("batch", "kv_heads")))(np.ones((8, 2), np.float32))
  assert y.sharding.shard_shape(y.shape) == (4, 2)  # batch split over data=2, the 2 KV heads whole


def test_non_divisible_batch_is_an_error():
  target, draft = _models("decoder")
  with pytest.raises(ValueError, match=r"batch=3 is not divisible by mesh axis data=2"):
    specjax.speculative_generate(target, DraftModel(draft), PROMPTS_BxP[:3], LENGTHS_B[:3], gamma=GAMMA,
                                 max_new_tokens=2, mesh=_mesh("2x4"))


def test_drafter_heads_are_placed_on_the_mesh():
  """MTP / DFlash heads (a ``.head`` Model) and Medusa's arrays go on the target's mesh."""
  from specjax.drafters import DFlash, MTP, medusa  # pylint: disable=import-outside-toplevel
  from specjax.models import block_drafter, heads  # pylint: disable=import-outside-toplevel
  mesh = _mesh("1x8")
  cfg = block_drafter.BlockDrafterConfig(vocab_size=64, d_model=32, num_layers=1, num_heads=4, num_kv_heads=1,
                                         head_dim=8, mlp_dim=64, target_layers=(0, 1), block_size=4)
  def zeros(module):  # host zeros of the head's shapes: placement is what is tested, not values
    args, kwargs = module.dummy_inputs()
    shapes = nn.unbox(jax.eval_shape(lambda: module.init(jax.random.PRNGKey(0), *args, **kwargs))["params"])
    return specjax.Model(module, jax.tree_util.tree_map(lambda x: np.zeros(x.shape, np.float32), shapes))

  dflash = DFlash(zeros(block_drafter.BlockDrafter(cfg)))
  mtp = MTP(zeros(heads.MTPHead(heads.MTPConfig(vocab_size=64, d_model=32, mlp_dim=64))))
  med = medusa.Medusa(medusa.init_heads(None, 2, 32), np.zeros((32, 64), np.float32))
  layer = sharding.shard(dflash, mesh).head.params["layer_0"]
  shard_shape = lambda x: x.sharding.shard_shape(x.shape)
  assert shard_shape(layer["q"]) == (32, 1, 8) and layer["k"].sharding.is_fully_replicated  # 4 heads 4 ways, 1 KV
  assert shard_shape(layer["mlp"]["down"]) == (8, 32)                                        # the MLP splits 8 ways
  placed = sharding.shard(mtp, mesh).head.params
  assert shard_shape(placed["block_0"]["up"]) == (32, 8)
  placed = sharding.shard(med, mesh)
  assert shard_shape(placed.lm_head_ExV) == (32, 8)
  assert placed.heads["w_KxExE"].sharding.is_fully_replicated and sharding._on_mesh(placed, sharding.factored_mesh(mesh))


def test_count_collectives_parses_hlo():
  hlo = """
  %all-reduce.1 = f32[1,1,32]{2,1,0} all-reduce(%x), channel_id=2, replica_groups=[1,8]<=[8], to_apply=%add
  %ars = bf16[4]{0} all-reduce-start(%y), replica_groups={{0,1},{2,3}}
  %ard = bf16[4]{0} all-reduce-done(%ars)
  %all-gather = s32[1,1,8]{1,0,2} all-gather(%z), replica_groups=mesh['axis_0'=2,'axis_1'=4] {'axis_1'}
  %cp = f32[2]{0} collective-permute(%w), source_target_pairs={{0,1}}
  """
  counts = dryrun.count_collectives(hlo)
  assert counts == {"all-reduce": 2, "all-gather": 1, "reduce-scatter": 0, "all-to-all": 0,
                    "collective-permute": 1, "total": 4}
  expected = 2 * 7 / 8 * 128 + 2 * 1 / 2 * 8 + 3 / 4 * 32 + 8
  assert dryrun.collective_bytes(hlo, 8) == pytest.approx(expected)


def _step_collectives(layers, num_tokens=1, mesh_shape="1x8", batch=1, kv_heads=8):
  module = dryrun.build_module(dict(DIMS, family="decoder", d_model=32, num_kv_heads=kv_heads, num_layers=layers))
  mesh = sharding.factored_mesh(_mesh(mesh_shape))  # the layout shard() uses
  model = dryrun.abstract_model(module, mesh)  # ShapeDtypeStructs: no weights
  cache = dryrun.abstract_cache(model, mesh, batch=batch, prompt_len=4, max_len=16)
  return dryrun.count_collectives(dryrun.compile_step(model, cache, mesh, batch, num_tokens))


def test_replicated_kv_heads_add_no_collectives():
  """2 KV heads on model=8: K/V split 2 ways, each computed by the 4 devices that use it from the
  replicated residual stream, so a layer still pays exactly the two Megatron all-reduces (and the
  step no cache-sized all-gather)."""
  two, four = _step_collectives(2, kv_heads=2), _step_collectives(4, kv_heads=2)
  assert (four["all-reduce"] - two["all-reduce"]) / 2 == 2 and four["total"] - two["total"] == 4


def test_data_axis_adds_no_collectives_per_layer():
  """The cache write's batch is a scatter batching dim: a 'data' split gathers nothing per layer
  (a plain batch-index scatter all-gathered its indices and updates over 'data', 4 per layer)."""
  two, four = _step_collectives(2, mesh_shape="2x4", batch=2), _step_collectives(4, mesh_shape="2x4", batch=2)
  assert four["total"] - two["total"] == 4


def test_megatron_layout_pays_two_all_reduces_per_layer():
  two, four = _step_collectives(2), _step_collectives(4)
  assert (four["all-reduce"] - two["all-reduce"]) / 2 == 2  # after attention-out and after MLP-down
  assert four["total"] - two["total"] == 4                  # and nothing else grows with depth
  fixed = two["total"] - 2 * 2  # embedding lookup (all-reduce) + argmax over split vocab (2 all-gathers)
  assert fixed <= 4
  assert _step_collectives(2, num_tokens=GAMMA + 1)["total"] == two["total"]  # verify: same collectives
  # Chen's point: an 8-layer drafter pays ~1/10 of an 80-layer target's collectives per step
  assert (2 * 8 + fixed) / (2 * 80 + fixed) < 0.13


def _tiny_plan(mesh="2x4"):
  layer = dict(DIMS, family="decoder", d_model=32, num_kv_heads=8, tie_embeddings=False)
  return dict(target=dict(layer, num_layers=6),
              drafter=dict(kind="draft_model", gamma=GAMMA, model=dict(layer, num_layers=1)), mesh=mesh, hardware="h100", alpha=0.8, batch_size=2, prompt_len=8, max_new_tokens=8,
              temperature=0.0)


@functools.lru_cache(maxsize=None)
def _tiny_dry_run():
  return dryrun.dry_run(_tiny_plan())  # compiles three steps: once for the two tests below


def test_dry_run_refuses_a_plan_that_does_not_fit_before_compiling(monkeypatch):
  need = dryrun.memory_need(dryrun.build_module(_tiny_plan()["target"]), sharding.factored_mesh(
      sharding.make_mesh("2x4")), 2, 8, 8 + 8 + GAMMA + 1, GAMMA + 1)
  assert need["param_bytes"] == _tiny_dry_run()["per_device_target_param_bytes"]  # same accounting
  plan = _tiny_plan(mesh="2x1")
  plan["target"].update(d_model=8192, mlp_dim=28672, num_layers=80, head_dim=128, num_heads=64, num_kv_heads=8,
                        vocab_size=32000)  # 70B-sized: 276 GB in float32 on each H100 (80 GB) of a 2x1 mesh
  monkeypatch.setattr(dryrun, "compile_step", lambda *a, **k: pytest.fail("compiled a plan that cannot fit"))
  with pytest.raises(ValueError, match=r"does not fit: per device target params 27\d\.\d+ GB.*> h100 memory 80"):
    dryrun.dry_run(plan)


def test_dry_run_tiny_plan():
  r = _tiny_dry_run()
  steps = r["steps"]
  assert steps["target"]["compiled_depths"] == [2, 4] and steps["draft"]["compiled_depths"] == [1]
  # extrapolated to 6 layers: 2 Megatron all-reduces per layer
  assert steps["target"]["n_all-reduce"] == steps["draft"]["n_all-reduce"] + 2 * 5
  # float32; per layer q, k, v, o (1024 each) and gate, up, down (2048 each) split 4 ways over 'model', 2 norms
  # (32 each) replicated; embed + lm_head (2048 each) split 4 ways; final norm replicated
  assert r["per_device_target_param_bytes"] == 4 * (6 * ((4 * 1024 + 3 * 2048) / 4 + 2 * 32) + 2 * 2048 / 4 + 32)
  assert 0 < r["c"] < 1 <= r["v"]
  assert r["predicted_speedup"] == pytest.approx(dryrun.walltime_improvement(0.8, GAMMA, r["c"], r["v"]), rel=1e-2)
  assert r["steps"]["target"]["collective_s"] > 0 and r["latency_model"]["hop_latency_s"] == 0.5e-6  # h100 row
  assert r["target_step_ms"] == pytest.approx(1e3 * sum(steps["target"][k] for k in ("body_s", "collective_s",
                                                                                    "overhead_s")), abs=2e-4)
  table = dryrun.format_table(r)
  assert "target" in table and "h100" in table and "coll. ms" in table


def test_chinchilla_config_fields():
  cfg = dryrun._load_config(str(pathlib.Path(__file__).parents[1] / "configs" / "chinchilla70b_4b.py"))
  assert (cfg.target.num_layers, cfg.target.d_model, cfg.target.num_heads, cfg.target.head_dim) == (80, 8192, 64, 128)
  assert (cfg.drafter.model.num_layers, cfg.drafter.model.d_model, cfg.mesh) == (8, 6144, "1x16")
  assert (cfg.drafter.gamma, cfg.hardware, cfg.drafter.kind, cfg.batch_size) == (4, "tpu_v4", "draft_model", 1)
  assert dryrun.mesh_size(cfg) == 16 and cfg.paper.baseline_ms_per_token == 14.1
  cpu = dryrun._load_config(str(pathlib.Path(__file__).parents[1] / "configs" / "chinchilla70b_4b.py") + ":cpu")
  assert cpu.target.num_layers == 10 * cpu.drafter.model.num_layers and dryrun.mesh_size(cpu) == 1
  dryrun.build_module(cpu.target.to_dict()), dryrun.build_module(cpu.drafter.model.to_dict())


def test_dry_run_needing_more_devices_runs_in_a_subprocess():
  plan = _tiny_plan(mesh="2x8")
  plan["drafter"] = dict(kind="ngram", gamma=GAMMA)
  plan["target"]["num_layers"] = 2  # compiled as is: 2 compiles in the child process
  r = dryrun.dry_run(plan)
  assert r["num_devices"] == 16 and r["compile_backend"] == "cpu"
  assert r["draft_step_ms"] == 0 and r["c"] == 0 and r["collectives_per_target_step"] >= 2 * 2


def test_in_a_child_process_with_8_devices():
  """This module under ``--xla_force_host_platform_device_count=8`` in a fresh interpreter: what runs when
  this process has another device count (XLA_FLAGS set by the caller); every test must pass there."""
  flags = re.sub(r"--xla_force_host_platform_device_count=\S*", "", os.environ.get("XLA_FLAGS", ""))
  env = dict(os.environ, XLA_FLAGS=(flags + " --xla_force_host_platform_device_count=8").strip())
  proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__], env=env,
                        cwd=pathlib.Path(__file__).parents[1], capture_output=True, text=True, timeout=3600)
  assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
  assert re.search(r"\b\d+ passed\b", proc.stdout) and "skipped" not in proc.stdout, proc.stdout[-2000:]


# Exactly one of the two ways runs: in this process with 8 devices, or the child above.
for _name in [n for n in globals() if n.startswith("test_")]:
  if (_name == "test_in_a_child_process_with_8_devices") == IN_PROCESS:
    del globals()[_name]
