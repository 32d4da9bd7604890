"""The exactness matrix: every drafter kind and option x sampling x batch shape, exact or refused.

Run by :mod:`specjax.conformance.command` (``python -m specjax.conformance``, or
``python -m specjax.bench exactness``, the same command).

For each cell the configuration's ``lossy_reason`` (``specjax.decode.lossy_reason``: the drafter's
own, plus lenience) is compared with the matrix's expectation (:mod:`specjax.conformance.cases`).
An exact cell must then hold: greedy, its tokens equal autoregressive ``specjax.generate``'s; sampled,
the joint of the first gamma + 1 = 3 tokens passes a chi-squared test against the target's exact
joint, computed here in float64 numpy from the target's logits by the definitions of temperature,
top-k and top-p (:func:`reference_probs`), independently of ``specjax.sampling``. A lossy cell must
be refused by ``speculative_generate`` without ``allow_lossy``, with an error naming the reason
(``--run_lossy`` also runs it, allowed, and prints its p-value as information).

Threshold. A cell fails when p <= ``ALPHA`` = 1e-5. The matrix has at most 300 exact sampled cells,
so for a correct implementation the chance that any cell fails is at most 300 * 1e-5 = 0.3%
(Bonferroni); a deliberately wrong rule gives p-values near 0 (printed), far below it.

Batch shapes. Greedy: ``b1`` (prompt A), ``ragged`` (A and B, lengths 5 and 3), ``refill`` (five
prompts of lengths 5, 3, 1, 4, 2 through 2 rows). Sampled: ``rows`` independent samples per cell in
one call: ``b1`` (every row prompt A: each is a batch-1 decode), ``ragged`` (rows alternate A and
B), ``refill`` (a queue of ``rows`` prompts cycling A, B, C through rows/8 rows); each prompt's
rows are counted against its own joint. ``b1`` and ``ragged`` share one compiled loop.

Power (``--wrong_rule``): an accept rule in :mod:`specjax.accept` is replaced at run time (not
edited): ``no_residual`` draws from p instead of norm(max(0, p - q)) after a rejection;
``no_q_update`` keeps testing without-replacement siblings against the full q; ``wrong_bonus`` draws
the token after a fully accepted path from the drafter's q at the leaf (one-hot q: the leaf's token
again) instead of the target's p. A cell is *touched* when tracing its verify step calls the
replaced code with an effect (``no_q_update``: without-replacement siblings and a node with two or
more children); every touched exact sampled cell must then fail.
"""
from __future__ import annotations

import contextlib
import functools
import time
import zlib

import numpy as np

from specjax.conformance import cases

ALPHA = 1e-5
ROWS = 20_000
SHAPES = ("b1", "ragged", "refill")
GREEDY_NEW = cases.GREEDY_NEW
BOUNDARY_MARGIN = 1e-5    # top-k / top-p decisions closer than this are refused by reference_probs
WRONG_RULES = ("no_residual", "no_q_update", "wrong_bonus")
CLEAR_EVERY = 24          # cells between dropping compiled programs (and at every change of drafter kind)


def samplings():
  import specjax  # pylint: disable=import-outside-toplevel
  return {"greedy": specjax.Sampling(), "t1": specjax.Sampling(temperature=1.0),
          "t0.7_topk5": specjax.Sampling(temperature=0.7, top_k=5),
          "t1_topp0.8": specjax.Sampling(temperature=1.0, top_p=0.8)}


# ----------------------------------------------------------------------------- the exact reference
def reference_probs(logits_xV, temperature, top_k=0, top_p=1.0):
  """The sampling distribution by its definition, float64 (specjax.sampling's conventions: top-k
  keeps every logit >= the k-th largest; top-p keeps the shortest sorted prefix whose mass strictly
  before each kept token is < top_p, ties at the threshold kept). Raises when a decision lies within
  ``BOUNDARY_MARGIN`` of its boundary, where float32 could decide otherwise."""
  x = np.asarray(logits_xV, np.float64) / temperature
  v = x.shape[-1]
  if 0 < top_k < v:
    srt = -np.sort(-x, -1)
    kth, gap = srt[..., top_k - 1:top_k], srt[..., top_k - 1:top_k] - srt[..., top_k:top_k + 1]
    if not np.all((gap == 0) | (gap > BOUNDARY_MARGIN)):
      raise ValueError(f"top-k boundary too close for a float64 reference: gap {gap.min()}")
    x = np.where(x >= kth, x, -np.inf)
  p = np.exp(x - x.max(-1, keepdims=True))
  p /= p.sum(-1, keepdims=True)
  if top_p < 1.0:
    srt = -np.sort(-p, -1)
    before = np.cumsum(srt, -1) - srt
    if not np.all(np.abs(before - top_p) > BOUNDARY_MARGIN):
      raise ValueError("top-p boundary too close for a float64 reference")
    p = np.where(p >= np.min(np.where(before < top_p, srt, np.inf), -1, keepdims=True), p, 0.0)
    p /= p.sum(-1, keepdims=True)
  return p


@functools.lru_cache(maxsize=None)
def exact_joint(prompt: tuple, sampling_name: str, tokens: int = cases.GAMMA + 1) -> np.ndarray:
  """The target's exact joint of its first ``tokens`` tokens after ``prompt``: ``[V] * tokens``."""
  import specjax  # pylint: disable=import-outside-toplevel
  target, s = cases.models().target, samplings()[sampling_name]
  v = cases.V
  seqs, joint = np.array([prompt]), np.ones((1,))
  for step in range(tokens):
    probs = reference_probs(np.asarray(specjax.logits(target, seqs))[:, -1], s.temperature, s.top_k, s.top_p)
    joint = (joint[:, None] * probs).reshape(-1)  # index: prefix * V + token
    if step + 1 < tokens:
      seqs = np.concatenate([np.repeat(seqs, v, 0), np.tile(np.arange(v), len(seqs))[:, None]], axis=1)
  joint = joint.reshape((v,) * tokens)
  return joint / joint.sum()


def chi2_pvalue(counts, joint) -> float:
  """Chi-squared goodness of fit of ``counts`` to ``joint`` (same shape); 0 when a count falls where
  ``joint`` is 0; cells expecting fewer than 5 are pooled into one."""
  from scipy import stats  # pylint: disable=import-outside-toplevel
  observed = np.asarray(counts, np.float64).ravel()
  expected = np.asarray(joint, np.float64).ravel()
  expected = expected / expected.sum() * observed.sum()
  if observed[expected == 0].sum() > 0:
    return 0.0
  big = expected >= 5
  obs, exp = np.append(observed[big], observed[~big].sum()), np.append(expected[big], expected[~big].sum())
  if exp[-1] == 0:
    obs, exp = obs[:-1], exp[:-1]
  return float(stats.chisquare(obs, exp).pvalue)


# ----------------------------------------------------------------------------- batch shapes
def _pad(prompts):
  width = max(len(p) for p in prompts)
  out = np.zeros((len(prompts), width), np.int32)
  for i, p in enumerate(prompts):
    out[i, :len(p)] = p
  return out, np.array([len(p) for p in prompts], np.int32)


def greedy_batch(shape):
  """``(prompts, lengths, batch_size)`` of a greedy cell."""
  names = {"b1": "A", "ragged": "AB", "refill": "ABCDE"}[shape]
  prompts, lengths = _pad([cases.PROMPTS[n] for n in names])
  return prompts, lengths, 2 if shape == "refill" else None


def sampled_batch(shape, rows):
  """``(prompts, lengths, batch_size, group names per row)`` of a sampled cell: ``rows`` samples."""
  names = {"b1": "A", "ragged": "AB", "refill": "ABC"}[shape]
  group = [names[i % len(names)] for i in range(rows)]
  prompts, lengths = _pad([cases.PROMPTS[n] for n in group] + [cases.PROMPTS["A"]])  # width of A in every shape
  return prompts[:-1], lengths[:-1], max(rows // 8, 2) if shape == "refill" else None, np.array(group)


@functools.lru_cache(maxsize=None)
def _greedy_baseline(shape):
  import specjax  # pylint: disable=import-outside-toplevel
  prompts, lengths, batch_size = greedy_batch(shape)
  out = specjax.generate(cases.models(True).target, prompts, lengths, max_new_tokens=GREEDY_NEW, batch_size=batch_size)
  return out.tokens, out.lengths


# ----------------------------------------------------------------------------- wrong rules
_current = {"key": None}  # the (config, sampling) being traced, for the touched record


@contextlib.contextmanager
def wrong_rule(name):
  """Replaces an accept rule in :mod:`specjax.accept` (see the module docstring); yields the set of
  ``(config, sampling)`` keys whose traced verify step touched it. Compiled loops are dropped on
  entry and exit (they hold the rule they were traced with)."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  from specjax import accept, sampling as sampling_lib  # pylint: disable=import-outside-toplevel
  from specjax.tree_rows import at_nodes  # pylint: disable=import-outside-toplevel
  if name not in WRONG_RULES:
    raise ValueError(f"unknown wrong rule {name!r}; expected one of {WRONG_RULES}")
  touched = set()
  real_round = accept.multi_round

  def touch():
    touched.add(_current["key"])

  if name == "no_residual":
    patches = {"residual": lambda r_BxV, q_BxV: (touch(), r_BxV)[1],
               "residual_one_hot": lambda r_BxV, x_B: (touch(), r_BxV)[1]}
  elif name == "no_q_update":
    def multi_round(rng, p, q, tokens, tree, without_replacement, *args, **kwargs):
      if without_replacement and q is not None and tree.children_table.shape[-1] > 1:
        touch()
      return real_round(rng, p, q, tokens, tree, without_replacement, *args, **dict(kwargs, update_q=False))
    patches = {"multi_round": multi_round}
  else:
    def multi_round(rng, p, q, tokens_BxN, tree, *args, **kwargs):
      touch()
      leaf_B, next_B = real_round(rng, p, q, tokens_BxN, tree, *args, **kwargs)
      depth_B = at_nodes(tree, tree.depth, leaf_B)
      num_B = kwargs.get("num_B")
      full_B = (depth_B == (tree.max_depth if num_B is None else num_B)) & (depth_B > 0)
      if q is None:  # q one-hot on the leaf's own token: "drawn from q" repeats it
        bad_B = jnp.take_along_axis(tokens_BxN, leaf_B[:, None], 1)[:, 0]
      else:
        q_leaf = jnp.take_along_axis(q, leaf_B[:, None, None], 1)[:, 0]
        bad_B = sampling_lib.sample_from(jax.random.fold_in(rng, 7), q_leaf)
      return leaf_B, jnp.where(full_B, bad_B, next_B)
    patches = {"multi_round": multi_round}
  saved = {k: getattr(accept, k) for k in patches}
  jax.clear_caches()
  try:
    for k, fn in patches.items():
      setattr(accept, k, fn)
    yield touched
  finally:
    for k, fn in saved.items():
      setattr(accept, k, fn)
    jax.clear_caches()


def probe(config, sampling_name):
  """Traces (no compile) one start, propose and verify step of ``config`` at batch 1, so a replaced
  rule records whether this configuration touches it."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  from specjax import tree as tree_lib  # pylint: disable=import-outside-toplevel
  from specjax.models import api  # pylint: disable=import-outside-toplevel
  target, drafter, s = cases.models().target, config.drafter(), samplings()[sampling_name]
  prompts, lengths = jnp.asarray([cases.PROMPTS["A"]], jnp.int32), jnp.asarray([len(cases.PROMPTS["A"])], jnp.int32)
  max_len = prompts.shape[1] + 16

  def step(target, drafter, rng):
    cache, tokens, seq_len = api.start(target, prompts, lengths, max_len)
    state = drafter.init(target, prompts, lengths, max_len)
    _, draft = drafter.propose(state, tokens, seq_len, cases.GAMMA, s, rng)
    last_B = jnp.take_along_axis(tokens, (seq_len - 1)[:, None], 1)[:, 0]
    return tree_lib.verify_and_accept(target, cache, last_B, draft, s, rng, config.lenience, drafter.feature_layers)

  _current["key"] = (config.name, sampling_name)
  jax.eval_shape(step, target, drafter, jax.random.PRNGKey(0))


# ----------------------------------------------------------------------------- one cell
def _seed(*parts) -> int:
  return zlib.crc32("/".join(parts).encode()) & 0x7FFFFFFF


def _refused(config, drafter, sampling, reason) -> str:
  """"refused" when speculative_generate refuses the cell (before compiling) naming ``reason``."""
  import specjax  # pylint: disable=import-outside-toplevel
  prompts, lengths, _ = greedy_batch("b1")
  try:
    specjax.speculative_generate(cases.models().target, drafter, prompts, lengths, gamma=cases.GAMMA, max_new_tokens=2,
                                 sampling=sampling, lenience=config.lenience, adaptive=config.adaptive_obj())
  except ValueError as e:
    return "refused" if "lossy configuration refused" in str(e) and reason in str(e) else f"WRONG-ERROR: {e}"
  return "NOT-REFUSED"


def run_cell(config, sampling_name, shape, rows=ROWS, run_lossy=False, alpha=ALPHA, wrong=None):
  """One cell's result (a dict). ``wrong``: the active wrong rule's name (sampled exact cells only)."""
  import jax  # pylint: disable=import-outside-toplevel
  import specjax  # pylint: disable=import-outside-toplevel
  t0 = time.time()
  sampling = samplings()[sampling_name]
  target, drafter = cases.models(sampling.greedy).target, config.drafter(sampling.greedy)
  reason = specjax.decode.lossy_reason(drafter, sampling, config.lenience)
  expected = config.lossy_sampled and not sampling.greedy
  res = dict(config=config.name, kind=config.kind, sampling=sampling_name, shape=shape, lossy=reason is not None,
             lossy_reason=reason, expected_lossy=expected, rows=0, p_value=None, status="", info="")
  mislabeled = (reason is not None) != expected
  kwargs = dict(gamma=cases.GAMMA, sampling=sampling, lenience=config.lenience, adaptive=config.adaptive_obj())
  _current["key"] = (config.name, sampling_name)
  if reason is not None and not run_lossy:
    res["status"] = _refused(config, drafter, sampling, reason)
  elif sampling.greedy:
    prompts, lengths, batch_size = greedy_batch(shape)
    out = specjax.speculative_generate(target, drafter, prompts, lengths, max_new_tokens=GREEDY_NEW,
                                       batch_size=batch_size, **kwargs)
    tokens, lens = _greedy_baseline(shape)
    same = np.array_equal(out.tokens, tokens) and np.array_equal(out.lengths, lens)
    res.update(rows=len(prompts), status="equal" if same else "DIFFERENT",
               accepted_per_position=out.stats["accepted_per_position"])
    res["info"] = f"accepted/depth {out.stats['accepted_per_position']}"
  else:
    prompts, lengths, batch_size, group = sampled_batch(shape, rows)
    out = specjax.speculative_generate(target, drafter, prompts, lengths, max_new_tokens=cases.GAMMA + 1,
                                       batch_size=batch_size, rng=jax.random.PRNGKey(_seed(config.name, sampling_name,
                                                                                            shape)),
                                       allow_lossy=reason is not None, **kwargs)
    counts, joints = [], []
    for name in sorted(set(group)):
      toks = np.asarray(out.tokens)[group == name, :cases.GAMMA + 1]
      c = np.zeros((cases.V,) * (cases.GAMMA + 1))
      np.add.at(c, tuple(toks.T), 1)
      counts.append(c)
      joints.append(exact_joint(cases.PROMPTS[name], sampling_name) * len(toks) / rows)
    p = chi2_pvalue(np.stack(counts), np.stack(joints))
    acc = out.stats["acceptance_per_position"]
    res.update(rows=rows, p_value=p, acceptance_per_position=acc, info=f"acceptance/depth {acc}")
    if reason is not None:
      res["status"] = "lossy-run"
    elif wrong is not None:
      res["status"] = "detected" if p <= alpha else "MISSED"
    else:
      res["status"] = "pass" if p > alpha else "FAIL"
  if mislabeled:
    res["status"] = f"MISLABELED({res['status']})"
  res["seconds"] = round(time.time() - t0, 2)
  return res


def ok(res) -> bool:
  """Whether a cell's result is what a correct implementation gives."""
  return res["status"] in ("equal", "pass", "refused", "lossy-run", "detected", "untouched")


def format_line(res) -> str:
  label = "lossy" if res["lossy"] else "exact"
  value = "equal" if res["status"] == "equal" else (
      "-" if res["p_value"] is None else f"p={res['p_value']:.3g}")
  return (f"{res['config']:<40} {res['sampling']:<11} {res['shape']:<7} {label:<6} {res['status']:<11} "
          f"{value:<12} rows={res['rows']:<6} {res['seconds']:6.1f}s  {res['info']}")


# ----------------------------------------------------------------------------- the matrix
def select(names=(), sampling_names=(), shapes=(), kinds=()):
  """The cells ``(config, sampling, shape)``, filtered: a config is kept when its name contains any of
  ``names`` and its kind is one of ``kinds`` (empty: all)."""
  from specjax import drafters  # pylint: disable=import-outside-toplevel
  for kind in kinds:
    if not drafters.spec(kind).exactness_cases():  # an unknown kind: an error naming it
      raise ValueError(f"drafter kind {kind!r} declares no exactness cases (KindSpec.cases)")
  chosen = [c for c in cases.configs() if (not names or any(n in c.name for n in names))
            and (not kinds or c.kind in kinds)]
  return [(c, s, sh) for c in chosen for s in (sampling_names or samplings()) for sh in (shapes or SHAPES)]


def run_matrix(cells, rows=ROWS, run_lossy=False, alpha=ALPHA, wrong=None, log=print):
  """Runs ``cells`` (from :func:`select`); with ``wrong`` only exact sampled cells, under that rule.
  Returns ``{"cells": [...], "seconds": ..., ...}``."""
  import jax  # pylint: disable=import-outside-toplevel
  import specjax  # pylint: disable=import-outside-toplevel
  t0 = time.time()
  results = []
  ctx = wrong_rule(wrong) if wrong else contextlib.nullcontext(None)
  with ctx as touched:
    for i, (config, s, shape) in enumerate(cells):
      if i and (config.kind != cells[i - 1][0].kind or i % CLEAR_EVERY == 0):
        # each compiled XLA:CPU program holds ~1,000 memory maps; hundreds of them pass the kernel's
        # vm.max_map_count and LLVM aborts ("Unable to allocate section memory")
        jax.clear_caches()
      if wrong:
        sampling = samplings()[s]
        if sampling.greedy or specjax.decode.lossy_reason(config.drafter(), sampling, config.lenience) is not None:
          continue  # the rules replaced are the sampled, lossless ones
        if (config.name, s) not in touched:
          probe(config, s)
        if (config.name, s) not in touched:
          res = dict(config=config.name, kind=config.kind, sampling=s, shape=shape, lossy=False, p_value=None,
                     status="untouched", rows=0, seconds=0.0, info="")
          results.append(res)
          log(format_line(res))
          continue
      res = run_cell(config, s, shape, rows, run_lossy, alpha, wrong)
      results.append(res)
      log(format_line(res))
  return {"alpha": alpha, "rows": rows, "wrong_rule": wrong, "seconds": round(time.time() - t0, 1),
          "cells": results, "failed": [r for r in results if not ok(r)]}


def summary(result) -> str:
  cells = result["cells"]
  by = lambda status: sum(r["status"] == status for r in cells)
  parts = [f"{len(cells)} cells", f"{len({r['config'] for r in cells})} configurations"]
  parts += [f"{by(s)} {s}" for s in ("equal", "pass", "refused", "lossy-run", "detected", "untouched") if by(s)]
  parts.append(f"{len(result['failed'])} failed")
  return ", ".join(parts) + f"; {result['seconds']:.0f}s"
