"""The one checkpoint layout (specjax.models.store): a round trip per kind of saved model, the shared
errors, and the layering of specjax.models (it imports nothing above itself)."""
import ast
import json
import pathlib

import jax
import ml_dtypes
import numpy as np
import pytest

import specjax
from specjax import checkpoint, testing
from specjax.checkpoint import CheckpointError
from specjax.drafters import medusa as medusa_lib
from specjax.drafters import vocab
from specjax.models import draft_lm, heads, store

MODELS = pathlib.Path(specjax.__file__).parent / "models"


def _bf16(x):
  return np.asarray(x, np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)


def _flat(params):
  from flax import traverse_util  # pylint: disable=import-outside-toplevel
  return traverse_util.flatten_dict(jax.device_get(params), sep="/")


def _assert_bf16_exact(saved, loaded, skip=()):
  saved, loaded = _flat(saved), _flat(loaded)
  assert set(saved) == set(loaded)
  rounded_any = False
  for k, x in saved.items():
    if k in skip:
      np.testing.assert_array_equal(np.asarray(loaded[k], np.float32), np.asarray(x, np.float32))
      continue
    want = _bf16(x)
    np.testing.assert_array_equal(np.asarray(loaded[k], np.float32), want, err_msg=k)
    rounded_any |= not np.array_equal(want, np.asarray(x, np.float32))
  assert rounded_any, "bf16 storage should round some weights"


def _stored(folder):
  from safetensors.numpy import load_file  # pylint: disable=import-outside-toplevel
  return load_file(str(pathlib.Path(folder) / store.WEIGHTS_FILE))


@pytest.fixture(scope="module")
def target():
  return testing.tiny_decoder(32, seed=1)


def test_model_round_trip(target, tmp_path):
  folder = checkpoint.save_model(target, tmp_path / "m", dtype="bfloat16")
  assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors"]
  assert json.loads((folder / "config.json").read_text())["family"] == "decoder"
  assert {a.dtype for a in _stored(folder).values()} == {np.dtype(ml_dtypes.bfloat16)}
  loaded = checkpoint.load_model(folder, param_dtype="float32")
  assert loaded.config == target.config
  _assert_bf16_exact(target.params, loaded.params)
  exact = checkpoint.load_model(checkpoint.save_model(target, tmp_path / "f32"), param_dtype="float32")
  for x, y in zip(jax.tree_util.tree_leaves(target.params), jax.tree_util.tree_leaves(exact.params)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_head_round_trip(target, tmp_path):
  module = heads.MTPHead(heads.MTPConfig(vocab_size=32, d_model=32, mlp_dim=48))
  head = heads.init_head(module, seed=3)
  folder = heads.save_head(head, tmp_path / "h", dtype="bfloat16", extra={"note": "x"})
  meta = json.loads((folder / "config.json").read_text())
  assert meta["family"] == "mtp_head" and meta["note"] == "x" and meta["config"]["mlp_dim"] == 48
  loaded = heads.load_head(folder)
  assert loaded.config == head.config
  _assert_bf16_exact(head.params, loaded.params)


def test_draft_lm_round_trip_leaves_frozen_params_out(target, tmp_path):
  cfg = draft_lm.DraftLMConfig(vocab_size=32, embed_dim=32, out_vocab=6, d_model=16, num_layers=1, num_heads=2,
                               num_kv_heads=1, head_dim=8, mlp_dim=32, frozen_head=True)
  subset = np.array([0, 3, 4, 9, 20, 31], np.int32)
  small = draft_lm.init(cfg, target, seed=2, subset_K=subset)
  folder = draft_lm.save(small, subset, tmp_path / "d", dtype="bfloat16", extra={"steps": 7})
  assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors", store.SUBSET_FILE]
  assert not set(_stored(folder)) & set(draft_lm.FROZEN_KEYS)  # the target's, never stored
  assert json.loads((folder / "config.json").read_text())["steps"] == 7
  loaded, subset_K = draft_lm.load(folder, target)
  np.testing.assert_array_equal(subset_K, subset)
  assert loaded.config == cfg
  _assert_bf16_exact(small.params, loaded.params, skip=draft_lm.FROZEN_KEYS)
  (folder / store.SUBSET_FILE).unlink()
  with pytest.raises(CheckpointError, match=f"checkpoint file missing: .*{store.SUBSET_FILE}"):
    draft_lm.load(folder, target)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_medusa_round_trip_is_a_head_bundle(target, tmp_path, dtype):
  rng = np.random.RandomState(0)
  bundle_heads = {"w_KxExE": rng.randn(3, 32, 32).astype(np.float32) * 0.1,
                  "b_KxE": rng.randn(3, 32).astype(np.float32) * 0.1}
  folder = medusa_lib.save_heads(bundle_heads, tmp_path / "med", dtype=dtype, target="tiny")
  meta = json.loads((folder / "config.json").read_text())
  assert meta == {"family": "medusa", "config": {"num_heads": 3, "d_model": 32}, "target": "tiny"}
  loaded = medusa_lib.load_heads(folder)
  as_head = heads.load_head(folder)  # the same bundle, read as any head
  assert isinstance(as_head.module, heads.MedusaHeads)
  storage = np.float16 if dtype == "float16" else ml_dtypes.bfloat16
  for k, x in bundle_heads.items():
    assert loaded[k].dtype == np.float32
    np.testing.assert_array_equal(np.asarray(loaded[k]), x.astype(storage).astype(np.float32))
    np.testing.assert_array_equal(np.asarray(as_head.params[k]), np.asarray(loaded[k]))
  # the module computes what the drafter does with the plain dict
  h = rng.randn(2, 32).astype(np.float32)
  lm = rng.randn(32, 32).astype(np.float32)
  np.testing.assert_allclose(np.asarray(as_head.module.apply({"params": as_head.params}, h) @ lm),
                             np.asarray(medusa_lib.head_logits(loaded, lm, h)), rtol=1e-5, atol=1e-5)


def test_shipped_medusa_heads_load_with_their_subset():
  for name, k in (("demo", None), ("smollm2", 4096), ("gemma3", 4096)):
    folder = store.ASSETS / name / "medusa"
    assert not (folder / "heads.npz").exists() and store.read_family(folder) == "medusa"
    loaded = medusa_lib.load_heads(folder)
    assert loaded["w_KxExE"].dtype == np.float32 and loaded["w_KxExE"].shape[0] in (3, 4)
    subset = vocab.load_subset(folder)
    assert (subset is None) if k is None else subset.shape == (k,)


def test_errors_name_the_file(target, tmp_path):
  assert checkpoint.CheckpointError is store.CheckpointError
  with pytest.raises(CheckpointError, match="checkpoint file missing: .*nowhere.*config.json"):
    heads.load_head(tmp_path / "nowhere")
  folder = checkpoint.save_model(target, tmp_path / "m")
  # wrong family, in every direction
  with pytest.raises(CheckpointError, match=r"m/config.json: family 'decoder' is not a head family"):
    heads.load_head(folder)
  with pytest.raises(CheckpointError, match=r"m/config.json: family 'decoder' is not a medusa family"):
    medusa_lib.load_heads(folder)
  with pytest.raises(CheckpointError, match=r"m/config.json: family 'decoder' is not a draft_lm family"):
    draft_lm.load(folder, target)
  med = medusa_lib.save_heads(medusa_lib.init_heads(None, 2, 32), tmp_path / "med")
  with pytest.raises(CheckpointError, match=r"med/config.json: family 'medusa' is not a model family"):
    checkpoint.load_model(med)
  # shape mismatch, from the config
  cfg = json.loads((med / "config.json").read_text())
  cfg["config"]["d_model"] = 16
  (med / "config.json").write_text(json.dumps(cfg))
  with pytest.raises(CheckpointError, match=r"med/model.safetensors: param '\w+' has shape \(2, 32.*, config "
                                            r"expects \(2, 16"):
    medusa_lib.load_heads(med)
  # corrupt files
  (med / "config.json").write_text("{not json")
  with pytest.raises(CheckpointError, match=r"med/config.json: not a valid specjax config"):
    medusa_lib.load_heads(med)
  weights = folder / "model.safetensors"
  weights.write_bytes(weights.read_bytes()[:100])
  with pytest.raises(CheckpointError, match=r"m/model.safetensors: corrupt or truncated"):
    checkpoint.load_model(folder)
  # vocab subsets: corrupt, out of range, the old file name
  (tmp_path / "s").mkdir()
  (tmp_path / "s" / store.SUBSET_FILE).write_bytes(b"junk")
  with pytest.raises(CheckpointError, match=f"s/{store.SUBSET_FILE}: corrupt vocab subset"):
    store.read_subset(tmp_path / "s")
  np.save(tmp_path / "s" / store.SUBSET_FILE, np.array([1, 40], np.int32))
  with pytest.raises(CheckpointError, match=f"s/{store.SUBSET_FILE}: vocab subset ids out of range"):
    store.read_subset(tmp_path / "s", vocab_size=32)
  (tmp_path / "s" / store.SUBSET_FILE).rename(tmp_path / "s" / "subset.npy")
  with pytest.raises(CheckpointError, match=f"s/subset.npy: the vocab subset file is named {store.SUBSET_FILE}"):
    vocab.load_subset(tmp_path / "s")
  (tmp_path / "old").mkdir()
  np.savez(tmp_path / "old" / "heads.npz", w_KxExE=np.zeros((1, 2, 2)), b_KxE=np.zeros((1, 2)))
  with pytest.raises(CheckpointError, match="old/heads.npz: Medusa heads are saved as a head bundle"):
    medusa_lib.load_heads(tmp_path / "old")


def _imports(path: pathlib.Path):
  """Every module a file imports (anywhere in it, lazily too), relative imports resolved."""
  package = "specjax.models"
  for node in ast.walk(ast.parse(path.read_text(), str(path))):
    if isinstance(node, ast.Import):
      yield from (a.name for a in node.names)
    elif isinstance(node, ast.ImportFrom):
      if node.level:
        base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
        mod = f"{base}.{node.module}" if node.module else base
      else:
        mod = node.module
      if mod in ("specjax", "specjax.models"):  # `from specjax import precision`: the module imported
        yield from (f"{mod}.{a.name}" for a in node.names)
      else:
        yield mod


# leaf modules any layer may use: no specjax imports of their own beyond these
LEAVES = ("specjax.precision", "specjax.suggest")


def test_models_import_nothing_above_the_models():
  files = sorted(MODELS.glob("*.py"))
  assert len(files) > 5
  bad = []
  for path in files:
    for mod in _imports(path):
      top = mod == "specjax" or mod.startswith("specjax.")
      if top and not (mod == "specjax.models" or mod.startswith("specjax.models.") or mod in LEAVES):
        bad.append(f"{path.name}: {mod}")
  assert not bad, f"specjax.models imports from above the models layer: {bad}"


def test_store_is_low_level():
  allowed = {"__future__", "itertools", "json", "mmap", "pathlib", "numpy", "jax", "flax", "safetensors", "ml_dtypes",
             "specjax", "math", "typing"}
  mods = set(_imports(MODELS / "store.py"))
  assert {m.split(".")[0] for m in mods} <= allowed, mods
  assert {m for m in mods if m.startswith("specjax")} == {"specjax.precision", "specjax.models.lazy"}
  lazy_mods = set(_imports(MODELS / "lazy.py"))  # below store: numpy and the standard library only
  assert {m.split(".")[0] for m in lazy_mods} <= allowed - {"jax", "flax", "safetensors", "specjax"}, lazy_mods
  for leaf in LEAVES:  # the leaves import nothing of specjax
    src = pathlib.Path(specjax.__file__).parent / (leaf.split(".")[1] + ".py")
    assert not [m for m in _imports(src) if m.startswith("specjax")], leaf


def test_packed_checkpoint_loads_the_same_params_and_errors_name_the_file(target, tmp_path, monkeypatch):
  from specjax.models import packed  # pylint: disable=import-outside-toplevel
  monkeypatch.setenv("SPECJAX_CACHE", str(tmp_path / "cache"))
  plain = checkpoint.save_model(target, tmp_path / "plain", dtype="bfloat16")
  folder = checkpoint.save_model(target, tmp_path / "packed", dtype="bfloat16")
  raw = (folder / store.WEIGHTS_FILE).read_bytes()
  packed.pack_weights(folder)
  assert sorted(p.name for p in folder.iterdir()) == ["config.json", store.PACKED_WEIGHTS_FILE]
  assert (folder / store.PACKED_WEIGHTS_FILE).stat().st_size < len(raw)
  unpacked = packed.weights_path(folder)
  assert unpacked.is_relative_to(tmp_path / "cache" / "assets") and unpacked.read_bytes() == raw
  a, b = checkpoint.load_model(plain), checkpoint.load_model(folder)
  for x, y in zip(jax.tree_util.tree_leaves(a.params), jax.tree_util.tree_leaves(b.params)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  assert packed.weights_folder(plain) == plain  # a plain file is read where it is
  bad = tmp_path / "bad"
  bad.mkdir()
  (bad / "config.json").write_text((folder / "config.json").read_text())
  (bad / store.PACKED_WEIGHTS_FILE).write_bytes(b"not xz")
  with pytest.raises(CheckpointError, match=r"bad/model.safetensors.xz: corrupt xz file"):
    checkpoint.load_model(bad)
  (bad / store.PACKED_WEIGHTS_FILE).unlink()
  with pytest.raises(CheckpointError, match=r"checkpoint file missing: .*bad/model.safetensors"):
    checkpoint.load_model(bad)


def test_shipped_checkpoints_unpack_and_load():
  from specjax.models import packed  # pylint: disable=import-outside-toplevel
  folders = sorted(p.parent for p in store.ASSETS.rglob(store.PACKED_WEIGHTS_FILE))
  assert len(folders) >= 14
  for folder in folders:
    header = store.read_safetensors_header(packed.weights_path(folder))
    assert header, folder
