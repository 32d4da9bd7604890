"""The exactness matrix (specjax.conformance.matrix) in the suite: every public drafter kind and option.

Full coverage where it costs no compile: every cell's label (its ``lossy_reason`` against the
matrix's own expectation) and every lossy cell's refusal (``speculative_generate`` refuses before
compiling). The cells that run cost one compiled loop each (5-15 s on a loaded 2-core CPU), and the
whole matrix has about 300 (``python -m specjax.conformance`` runs them all), so here every exact
configuration runs one sampled cell, the (sampling, batch shape) pairs rotated over the
configurations so that each of the nine pairs is run by three or more of them; a representative
set runs greedy cells; and each wrong accept rule is planted in cells it touches, which must fail.
The bench's float64 reference is checked against tests/stats_util.py's, written separately.
"""
import dataclasses

import numpy as np
import pytest
import stats_util  # tests/ is on sys.path under pytest

import specjax
from specjax import tree as tree_lib
from specjax.conformance import cases as cfgs
from specjax.conformance import matrix as exactness

ROWS = 10_000          # rows per sampled cell here (the command's default is 20k)
POWER_ROWS = 20_000    # rows per wrong-rule cell
CONFIGS = {c.name: c for c in cfgs.configs()}
SAMPLED = ("t1", "t0.7_topk5", "t1_topp0.8")
PAIRS = [(s, sh) for sh in exactness.SHAPES for s in SAMPLED]


def _exact_configs():
  return [c for c in cfgs.configs() if not c.lossy_sampled]


def rotated_cells():
  """One sampled cell per exact configuration, the nine (sampling, shape) pairs in turn."""
  return [(c.name, *PAIRS[i % len(PAIRS)]) for i, c in enumerate(_exact_configs())]


# ----------------------------------------------------------------------------- coverage, labels, refusals
def test_every_public_kind_and_option_is_in_the_matrix():
  configs = cfgs.configs()
  assert set(specjax.drafters.kinds()) <= {c.kind for c in configs}
  for kind in specjax.drafters.kinds():  # every option field of every kind (checkpoint and seed pick weights)
    fields = {f.name for f in dataclasses.fields(specjax.drafters.options_class(kind))} - {"gamma", "checkpoint",
                                                                                           "seed"}
    covered = {o.split("=")[0] for c in configs if c.kind == kind for o in c.options}
    assert fields <= covered | {"num_heads"}, (kind, fields - covered)  # medusa num_heads: untrained heads only
  options = {(c.kind, o) for c in configs for o in c.options}
  for siblings in tree_lib.SIBLINGS:
    assert ("specinfer", f"siblings={siblings}") in options
  names = set(CONFIGS)
  for shape in ("chain", "static"):
    assert {f"eagle/{shape}/siblings={s}" for s in tree_lib.SIBLINGS} <= names
  assert {"eagle/dynamic/score=rank", "eagle/dynamic/score=drawn"} <= names
  assert {("medusa", "acceptance=rejection"), ("medusa", "acceptance=typical")} <= options
  for kind in ("draft_model", "table", "specinfer", "medusa", "mtp", "dflash", "eagle"):
    assert (kind, "subset_K") in options, kind  # truncated vocabularies
  for kind in ("draft_model", "ngram", "mtp", "dflash", "eagle"):  # chains: adaptive draft length on and off
    assert any(c.kind == kind and c.adaptive for c in configs) and any(c.kind == kind and not c.adaptive
                                                                       for c in configs), kind
  for kind in ("recycling",):  # static trees with node budgets: the budget switch on and off
    assert any(c.kind == kind and c.adaptive for c in configs) and any(c.kind == kind and not c.adaptive
                                                                       for c in configs), kind
  assert any(c.lenience < 1 for c in configs)
  assert len(exactness.select()) == len(configs) * 4 * 3


def test_every_cell_is_labeled_as_expected_and_every_lossy_cell_is_refused():
  results = []
  for config, s, shape in exactness.select():
    sampling = exactness.samplings()[s]
    reason = specjax.decode.lossy_reason(config.drafter(), sampling, config.lenience)
    assert (reason is not None) == (config.lossy_sampled and not sampling.greedy), (config.name, s, reason)
    if reason is not None:
      results.append(exactness.run_cell(config, s, shape))
  assert len(results) == sum(c.lossy_sampled for c in cfgs.configs()) * len(SAMPLED) * len(exactness.SHAPES)
  for res in results:
    assert res["status"] == "refused", exactness.format_line(res)


def test_reference_agrees_with_stats_util():
  """Three prompts of different lengths, each under another of the three samplings."""
  target = cfgs.models().target
  for name, s in zip(("A", "B", "C"), SAMPLED):
    np.testing.assert_allclose(exactness.exact_joint(cfgs.PROMPTS[name], s),
                               stats_util.exact_joint(target, exactness.samplings()[s],
                                                      np.array([cfgs.PROMPTS[name]]), tokens=3), rtol=1e-5, atol=1e-9)


# ----------------------------------------------------------------------------- exact cells
def test_the_rotation_covers_every_pair_three_times():
  counts = {pair: 0 for pair in PAIRS}
  for _, s, shape in rotated_cells():
    counts[(s, shape)] += 1
  assert min(counts.values()) >= 3, counts
  assert {name for name, _, _ in rotated_cells()} == {c.name for c in _exact_configs()}


@pytest.mark.parametrize("name,sampling,shape", rotated_cells())
def test_sampled_cell_is_exact(name, sampling, shape):
  res = exactness.run_cell(CONFIGS[name], sampling, shape, rows=ROWS)
  print(exactness.format_line(res))
  assert res["status"] == "pass", exactness.format_line(res)
  assert res["acceptance_per_position"][-1] > 0.002, "the bonus token after a full path is barely tested"


GREEDY = [("draft_model/adaptive", "refill"), ("ngram/n=2", "refill"), ("specinfer/paths=chain2+1x1", "refill"),
          ("medusa/tree=dense3x2/subset", "b1"), ("mtp/subset", "refill"), ("eagle/dynamic/score=rank", "ragged"),
          ("table/order=2", "b1"), ("dflash", "ragged"),  # every kind: the smoke subset (tests/smoke.txt) runs these
          ("recycling/k=3", "b1"), ("recycling/k=2,budgets=0,2,5/adaptive", "ragged"),
          ("recycling/k=2,budgets=0,2,5/adaptive", "refill"),
          ("suffix/scope=run,corpus", "refill"), ("suffix/scope=batch/adaptive", "refill"),
          ("hybrid/fallback=draft_model/adaptive", "ragged"), ("hybrid/fallback=ngram,pool_file", "b1")]


@pytest.mark.parametrize("name,shape", GREEDY)
def test_greedy_cell_equals_autoregressive(name, shape):
  res = exactness.run_cell(CONFIGS[name], "greedy", shape)
  print(exactness.format_line(res))
  assert res["status"] == "equal", exactness.format_line(res)
  assert min(res["accepted_per_position"]) > 0, "drafts must be accepted at every depth"


# ----------------------------------------------------------------------------- power
POWER = [("no_residual", "draft_model", "t1_topp0.8", "b1"),
         ("no_q_update", "eagle/dynamic/score=rank", "t1", "b1"),
         ("wrong_bonus", "eagle/static/siblings=iid", "t1", "ragged"),
         # deterministic siblings each tested against p, the residual never updated between them
         ("no_residual", "recycling/k=3", "t1", "b1"),
         # a rejected suffix draft's token left in the residual the bonus token is drawn from
         ("no_residual", "suffix/scope=run,corpus", "t1", "b1"),
         ("no_residual", "hybrid/fallback=draft_model", "t1", "ragged")]


@pytest.mark.parametrize("rule,name,sampling,shape", POWER)
def test_a_wrong_rule_fails_the_cells_it_touches(rule, name, sampling, shape):
  result = exactness.run_matrix([(CONFIGS[name], sampling, shape)], rows=POWER_ROWS, wrong=rule, log=print)
  (res,) = result["cells"]
  assert res["status"] == "detected", exactness.format_line(res)


def test_a_wrong_rule_leaves_untouched_cells_alone():
  """Without-replacement q updates never matter to a chain: the probe must say so, without running it."""
  result = exactness.run_matrix([(CONFIGS["draft_model"], "t1", "b1")], wrong="no_q_update", log=print)
  assert [r["status"] for r in result["cells"]] == ["untouched"]
