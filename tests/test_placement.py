"""Loading with ``mesh=``: each tensor placed as it is read equals load-then-shard (values, dtypes,
shardings), and host memory peaks near the file's size, on one device and on a mesh.

The equality tests need the 8 fake CPU devices tests/conftest.py asks for; the memory test runs each
load in a fresh process of its own (specjax.bench.load_memory), with its own device count.
"""
import jax
import numpy as np
import pytest
from safetensors.numpy import save_file

import test_hf_import as hf  # its numpy-only HF folder writer

from specjax import checkpoint, gguf_import, loading, placement, sharding
from specjax.bench import load_memory
from specjax.hf_import import from_hf

CPU = jax.devices("cpu")
pytestmark = pytest.mark.skipif(len(CPU) < 8, reason="needs 8 CPU devices (tests/conftest.py sets XLA_FLAGS)")
MESHES = ("1x8", "2x4")


def _mesh(shape):
  return sharding.make_mesh(shape, devices=CPU)


def _assert_same_placement(got, want):
  """Same param names, values, dtypes and shardings."""
  got_leaves = jax.tree_util.tree_leaves_with_path(got.params)
  want_leaves = jax.tree_util.tree_leaves_with_path(want.params)
  assert [p for p, _ in got_leaves] == [p for p, _ in want_leaves]
  assert got.module == want.module
  for (path, a), (_, b) in zip(got_leaves, want_leaves):
    name = jax.tree_util.keystr(path)
    assert a.dtype == b.dtype, name
    assert a.sharding == b.sharding, (name, a.sharding, b.sharding)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=name)


@pytest.mark.parametrize("shape", MESHES)
@pytest.mark.parametrize("param_dtype", ["bfloat16", "float32"])
def test_hf_folder_on_a_mesh_equals_load_then_shard(tmp_path, shape, param_dtype):
  folder = hf._write(tmp_path / "llama", hf._llama_cfg(), hf._llama_tensors(), dtype="BF16")  # 4 heads, 2 KV heads
  mesh = _mesh(shape)
  placed = from_hf(folder, param_dtype=param_dtype, mesh=mesh)
  _assert_same_placement(placed, sharding.shard(from_hf(folder, param_dtype=param_dtype), mesh))
  assert sharding.ensure_sharded(placed, mesh) is placed  # already on the mesh: nothing moves
  split = {str(x.sharding.spec) for x in jax.tree_util.tree_leaves(placed.params)}
  assert len(split) > 2, split  # heads, KV heads and MLP columns split differently on this mesh


@pytest.mark.parametrize("shape", [None, "2x4"])
def test_scanned_layers_are_written_into_their_stack_on_the_devices(tmp_path, shape):
  """A scanned decoder's [L, ...] params, each layer written into place as it is read, equal the
  stacked-on-the-host load (sharded after); a bundle missing one layer's tensor names it."""
  folder = hf._write(tmp_path / "llama", hf._llama_cfg(), hf._llama_tensors(), dtype="BF16")
  mesh = _mesh(shape) if shape else None
  placed = from_hf(folder, param_dtype="bfloat16", mesh=mesh, scan_layers=True)
  assert placed.params["layers"]["mlp"]["down"].shape[0] == 2 and "layer_0" not in placed.params
  want = from_hf(folder, param_dtype="bfloat16", scan_layers=True)
  _assert_same_placement(placed, sharding.shard(want, mesh) if mesh else want)
  bundle = checkpoint.save_model(want, tmp_path / "bundle")
  flat = checkpoint.read_safetensors(bundle / "model.safetensors", np.float32)
  del flat["layer_1/mlp/down"]
  save_file(flat, str(bundle / "model.safetensors"))
  with pytest.raises(checkpoint.CheckpointError, match=r"missing \['layers/mlp/down'\], unexpected \['layer_0/mlp/down'\]"):
    checkpoint.load_model(bundle, mesh=mesh, scan_layers=True)


def test_tied_gguf_bundle_and_load_pretrained_on_a_mesh(tmp_path):
  """A tied embedding (the importer places for an untied model until the file decides), the GGUF
  path, a specjax bundle, and load_pretrained on a sharded HF folder with a tokenizer."""
  pytest.importorskip("gguf", reason="GGUF reading needs `pip install gguf`")
  from test_loading import _hf_folder, _hf_tensors, _write_gguf  # pylint: disable=import-outside-toplevel
  mesh = _mesh("1x8")
  tensors = _hf_tensors()
  tied = _hf_folder(tmp_path / "tied", tensors)
  _assert_same_placement(from_hf(tied, mesh=mesh), sharding.shard(from_hf(tied), mesh))
  _write_gguf(tmp_path / "m.gguf", tensors)
  _assert_same_placement(gguf_import.from_gguf(tmp_path / "m.gguf", mesh=mesh),
                         sharding.shard(gguf_import.from_gguf(tmp_path / "m.gguf"), mesh))
  bundle = checkpoint.save_model(from_hf(tied), tmp_path / "bundle")
  _assert_same_placement(checkpoint.load_model(bundle, param_dtype="bfloat16", mesh=mesh),
                         sharding.shard(checkpoint.load_model(bundle, param_dtype="bfloat16"), mesh))
  folder = load_memory.write_llama_folder(tmp_path / "hf", layers=1, hidden=64, heads=4, kv_heads=2,
                                          intermediate=128, vocab=512, shards=2, verbose=False)
  model, _ = loading.load_pretrained(folder, param_dtype="bfloat16", mesh=mesh, verbose=False)
  _assert_same_placement(model, sharding.shard(loading.load_pretrained(folder, param_dtype="bfloat16",
                                                                       verbose=False)[0], mesh))


def test_a_wrong_shape_is_reported_not_placed(tmp_path):
  model = from_hf(hf._write(tmp_path / "llama", hf._llama_cfg(), hf._llama_tensors()))
  folder = checkpoint.save_model(model, tmp_path / "m")
  with pytest.raises(checkpoint.CheckpointError, match=r"param 'embed' has shape \(128, 64\), config expects \(128, 48\)"):
    checkpoint.load_model(folder, d_model=48, mesh=_mesh("1x8"))
  flat = placement.PlacedParams(model.module, _mesh("2x4"))
  flat["embed"] = np.zeros((3, 3), np.float32)  # not the module's shape: kept as given
  flat["not_a_param"] = np.zeros(2, np.float32)
  assert all(isinstance(v, np.ndarray) for v in flat.values())


# ----------------------------------------------------------------------------- peak host memory
# 8 layers, d 1024, 8 heads / 4 KV heads (on 1x8 the K/V repeat twice, as in the 852M-param shape),
# vocabulary 4000, untied: 102.6M params, 205 MB of bfloat16 in two shards; each load takes ~1 s
SHAPE = dict(layers=8, hidden=1024, heads=8, kv_heads=4, intermediate=2816, vocab=4000)
BOUND = 1.3  # peak RSS above the process's baseline, as a multiple of the files' size


@pytest.fixture(scope="module")
def folder_205mb(tmp_path_factory):
  return load_memory.write_llama_folder(tmp_path_factory.mktemp("load_memory") / "llama", **SHAPE, verbose=False)


@pytest.mark.parametrize("case", ["one_device", "mesh", "shard_after"])
def test_peak_host_memory_is_near_the_file_size(folder_205mb, case):
  """Streamed loads stay under the bound; loading on one device and then sharding (a whole host
  copy beside the placed one) does not, so the measurement tells the two apart."""
  row = load_memory.measure(folder_205mb, case, "1x8", timeout=300)
  assert row["file_bytes"] > 200e6 and row["num_params"] == 102_581_248
  message = (f"{case}: peak RSS {row['peak_minus_baseline_bytes'] / 1e6:.0f} MB above the baseline for "
             f"{row['file_bytes'] / 1e6:.0f} MB of weights ({row['ratio']}x)")
  if case == "shard_after":
    assert row["ratio"] > 1.6, message
    return
  assert row["ratio"] <= BOUND, message
  if case == "mesh":
    assert row["already_on_mesh"]
    assert row["replicated_bytes"] > 0  # 4 KV heads on model=8: each kept by 2 devices
