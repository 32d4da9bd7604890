"""specjax.models.lazy: a slice of a view (``.T``, ``.reshape`` splitting dims, ``[None]``, ``*``,
``astype``) equals that slice of the same numpy expression, and reads only the base slice it needs."""
import numpy as np
import pytest

from specjax.models import lazy


def _lazy(a, reads=None):
  def read(index):
    if reads is not None:
      reads.append(index)
    return a[tuple(slice(*i) for i in index)].copy()
  return lazy.Lazy(a.shape, a.dtype, read)


def _random_index(rng, shape):
  out = []
  for n in shape:
    a = int(rng.integers(0, n))
    out.append(slice(a, int(rng.integers(a + 1, n + 1))))
  return tuple(out)


@pytest.mark.parametrize("e,h,d", [(3, 4, 2), (5, 1, 3), (2, 3, 1), (1, 2, 2)])
def test_views_read_the_same_values_as_numpy(e, h, d):
  rng = np.random.default_rng(e * 100 + h * 10 + d)
  a = rng.normal(size=(h * d, e)).astype(np.float32)
  x = _lazy(a)
  views = {  # (lazy view, numpy reference): the importers' layout changes and the stacked-layer write
      "q": (x.T.reshape(e, h, d), a.T.reshape(e, h, d)),
      "o": (_lazy(a.T.copy()).T.reshape(h, d, e), a.reshape(h, d, e)),
      "T": (x.T, a.T), "leading 1": (x[None], a[None]), "q[None]": (x.T.reshape(e, h, d)[None], a.T.reshape(e, h, d)[None]),
      "scaled": (x.T * 0.5, a.T * 0.5), "flatten": (x.reshape(-1), a.reshape(-1)),
      "trailing 1": (x.reshape(h * d, e, 1), a.reshape(h * d, e, 1)),
      "cast": (x.astype(np.float16).T, a.astype(np.float16).T)}
  for name, (view, want) in views.items():
    assert view.shape == want.shape and view.dtype == want.dtype, name
    np.testing.assert_array_equal(np.asarray(view), want, err_msg=name)
    for _ in range(20):
      idx = _random_index(rng, want.shape)
      np.testing.assert_array_equal(view.read(idx), want[idx], err_msg=f"{name} {idx}")


def test_a_head_slice_reads_only_its_rows():
  """The q projection's head slice [:, h0:h1, :] of [e, h, d] is rows h0*d:h1*d of the stored [h*d, e]."""
  e, h, d = 6, 8, 4
  a = np.arange(h * d * e, dtype=np.float32).reshape(h * d, e)
  reads = []
  view = _lazy(a, reads).T.reshape(e, h, d)[None]
  got = view.read((slice(None), slice(None), slice(2, 4), slice(None)))
  np.testing.assert_array_equal(got, a.T.reshape(e, h, d)[None, :, 2:4])
  assert reads == [((8, 16), (0, e))]


def test_bad_slices_and_reshapes_name_the_problem():
  x = _lazy(np.zeros((4, 6), np.float32))
  with pytest.raises(ValueError, match="step 1"):
    x.read((slice(0, 4, 2),))
  with pytest.raises(ValueError, match="cannot reshape"):
    x.reshape(5, 5)
  with pytest.raises(TypeError, match="read"):
    x[1:2]  # pylint: disable=pointless-statement


def test_file_slices_equal_numpy_slices(tmp_path):
  """store.read_slice on a real safetensors file (float32 and bfloat16, 1-4 dims)."""
  import ml_dtypes  # pylint: disable=import-outside-toplevel
  from safetensors.numpy import save_file  # pylint: disable=import-outside-toplevel
  from specjax.models import store  # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(0)
  arrays = {"a": rng.normal(size=(7,)).astype(np.float32), "b": rng.normal(size=(5, 6)).astype(np.float32),
            "c": rng.normal(size=(3, 4, 5)).astype(np.float32), "d": rng.normal(size=(2, 3, 4, 5)).astype(np.float32)}
  path = tmp_path / "t.safetensors"
  save_file(arrays, str(path))
  bf16 = tmp_path / "b.safetensors"  # numpy safetensors cannot write bfloat16: write its bytes as uint16
  save_file({"e": rng.normal(size=(6, 4)).astype(ml_dtypes.bfloat16).view(np.uint16)}, str(bf16))
  raw = bf16.read_bytes()
  n = int.from_bytes(raw[:8], "little")
  header = raw[8:8 + n].replace(b'"U16"', b'"BF16"')
  bf16.write_bytes(len(header).to_bytes(8, "little") + header + raw[8 + n:])
  arrays["e"] = np.frombuffer(raw[8 + n:], ml_dtypes.bfloat16).reshape(6, 4)
  headers = {**store.read_safetensors_header(path), **store.read_safetensors_header(bf16)}
  for name, want in arrays.items():
    entry, start = headers[name]
    x = store.lazy_tensor(bf16 if name == "e" else path, entry, start)
    assert x.dtype == want.dtype
    for _ in range(30):
      idx = _random_index(rng, want.shape)
      np.testing.assert_array_equal(x.read(idx), want[idx], err_msg=f"{name} {idx}")
