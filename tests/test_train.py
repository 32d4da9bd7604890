"""Training: loss falls; an interrupted-and-resumed run gives the same loss curve as an uninterrupted one."""
import jax.numpy as jnp
import ml_dtypes
import numpy as np

from specjax import checkpoint, testing
from specjax.data import code_corpus
from specjax.data.tokenizer import ByteTokenizer
from specjax.train import loop, objectives

TOK = ByteTokenizer()


def _setup():
  model = testing.tiny_decoder(TOK.vocab_size, seed=0, weight_scale=1.0, tie_embeddings=True)
  data = np.asarray(TOK.encode("def add(a, b):\n    return a + b\n\n" * 50), np.int32)
  batch_fn = lambda step: jnp.asarray(code_corpus.batch_at(data, step, 4, 32, seed=0))
  cfg = loop.TrainConfig(steps=12, learning_rate=1e-2, warmup_steps=2, checkpoint_every=4, log_every=1)
  return model, objectives.lm_loss(model.module, TOK.pad_id), batch_fn, cfg


def test_resume_is_exact_and_loss_falls(tmp_path):
  model, loss_fn, batch_fn, cfg = _setup()
  straight = loop.train(model.params, loss_fn, batch_fn, cfg, tmp_path / "straight")
  loop.train(model.params, loss_fn, batch_fn, cfg, tmp_path / "resumed", stop_after=8)  # "interrupted"
  resumed = loop.train(model.params, loss_fn, batch_fn, cfg, tmp_path / "resumed")
  a = [r["loss"] for r in loop.read_metrics(tmp_path / "straight")]
  b = [r["loss"] for r in loop.read_metrics(tmp_path / "resumed")]
  assert len(a) == len(b) == 12
  np.testing.assert_array_equal(a, b)
  for x, y in zip(jax_leaves(straight), jax_leaves(resumed)):
    np.testing.assert_array_equal(x, y)
  assert a[-1] < a[0] * 0.7
  assert (tmp_path / "straight" / "checkpoints").is_dir()
  assert loop.plot_loss(tmp_path / "straight").exists()


def jax_leaves(tree):
  import jax  # pylint: disable=import-outside-toplevel
  return jax.tree_util.tree_leaves(tree)


def test_checkpoint_round_trip(tmp_path):
  model, *_ = _setup()
  folder = checkpoint.save_model(model, tmp_path / "m", dtype="bfloat16")
  loaded = checkpoint.load_model(folder)
  narrower = False
  for x, y in zip(jax_leaves(model.params), jax_leaves(loaded.params)):  # bf16 storage: exactly its rounding
    rounded = np.asarray(x, np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)  # nearest, ties to even
    np.testing.assert_array_equal(np.asarray(y, np.float32), rounded)
    narrower |= not np.array_equal(rounded, np.asarray(x, np.float32))
  assert narrower, "bf16 storage should round some weights"
  assert loaded.config == model.config


def test_sharded_train_step_matches_one_device(tmp_path):
  """The train step under the inference rules (data x model mesh) gives the same losses."""
  import jax  # pylint: disable=import-outside-toplevel
  from specjax import sharding  # pylint: disable=import-outside-toplevel
  if len(jax.devices()) < 8:
    raise AssertionError("tests/conftest.py should provide 8 fake CPU devices")
  model, loss_fn, batch_fn, cfg = _setup()
  cfg = loop.TrainConfig(steps=4, learning_rate=1e-2, warmup_steps=1, checkpoint_every=4, log_every=1)
  mesh = sharding.make_mesh({"data": 4, "model": 2})
  sharded = loop.train(model.params, loss_fn, batch_fn, cfg, tmp_path / "mesh", mesh=mesh, model=model)
  loop.train(model.params, loss_fn, batch_fn, cfg, tmp_path / "one")
  a = [r["loss"] for r in loop.read_metrics(tmp_path / "mesh")]
  b = [r["loss"] for r in loop.read_metrics(tmp_path / "one")]
  np.testing.assert_allclose(a, b, rtol=2e-5)
  assert len(jax_leaves(sharded)[0].sharding.device_set) == 8
