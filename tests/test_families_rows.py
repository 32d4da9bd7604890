"""``bench families``' rows from command-line drafters: ``--drafters``, ``--drafter_option``, ``--variant``.

Fast: the rows and options are parsed and built in process (a tiny target, a data folder of a few
rows); nothing is measured.
"""
import json

import jax
import numpy as np
import pytest

import specjax
from specjax import testing
from specjax.bench import common, families, real_rows
from specjax.bench import __main__ as bench_main

V = 64


def bench(*args) -> int:
  return bench_main.main(["specjax.bench", *map(str, args)])


def rows_by_name(items, options=()):
  return {r.name: r for r in real_rows.parse_rows(items, options)}


@pytest.fixture(scope="module")
def target():
  return testing.tiny_decoder(V, seed=0)


@pytest.fixture()
def data(tmp_path):
  """A data folder as ``python -m specjax.train data`` writes it (train shards only)."""
  rng = np.random.default_rng(0)
  (tmp_path / "shards").mkdir()
  np.savez(tmp_path / "shards" / "00000.npz", prompts=rng.integers(0, V, (6, 5)).astype(np.int32),
           prompt_lengths=np.full((6,), 5, np.int32), tokens=rng.integers(0, V // 2, (6, 9)).astype(np.int32),
           lengths=np.array([9, 8, 7, 9, 9, 3], np.int32), kinds=np.array(["code"] * 6), sources=np.array(["x"] * 6))
  return tmp_path


# ----------------------------------------------------------------------------- --target: rows
def test_every_row_defaults_to_the_settings_of_its_trained_weights():
  """The defaults the per-kind flags had (--drafter, --gamma, --specinfer_tree, --ngram_gamma, --table_k,
  --table_gamma, --mtp, --mtp_gamma, --medusa, --medusa_tree, --dflash, --eagle, --eagle_gamma,
  --eagle_top_k, --eagle_total_tokens), now each row's options."""
  rows = rows_by_name(list(real_rows.row_table()))
  got = {name: (r.kind, r.values) for name, r in rows.items()}
  medusa = {"checkpoint": "smollm2/medusa", "tree": "chain3+1x2"}
  eagle = {"checkpoint": "smollm2/eagle", "gamma": 4}
  assert got == {
      "draft_lm": ("draft_model", {"checkpoint": "smollm2/draft_lm", "gamma": 5}),
      "specinfer": ("specinfer", {"checkpoint": "smollm2/draft_lm", "paths": "chain4+1x2",
                                  "siblings": "without_replacement"}),
      "ngram": ("ngram", {"n": 3, "gamma": 4}),
      "table": ("table", {"k": 4096, "gamma": 4}),
      "mtp": ("mtp", {"checkpoint": "smollm2/mtp", "gamma": 3}),
      "medusa": ("medusa", medusa),
      "medusa_typical": ("medusa", {**medusa, "acceptance": "typical"}),
      "dflash": ("dflash", {"checkpoint": "runs/smollm2_dflash/head"}),
      "eagle": ("eagle", {**eagle, "tree": "chain"}),
      "eagle_dynamic": ("eagle", {**eagle, "tree": "dynamic", "top_k": 4, "total_tokens": 8}),
  }
  assert real_rows.default_drafters() == ("draft_lm", "ngram")
  assert real_rows.tree_depth("specinfer", rows["specinfer"].values) == 4
  assert real_rows.tree_depth("medusa", rows["medusa"].values) == 3


def test_options_reach_rows_by_kind_then_by_name_and_a_checkpoint_wins():
  rows = rows_by_name(["medusa:gemma3/medusa", "medusa_typical", "wide=ngram", "ngram", "draft_lm:other/lm"],
                      ["medusa.tree=chain4+1x1", "medusa.checkpoint=both/medusa", "wide.n=5", "ngram.gamma=6",
                       "draft_lm.gamma=2"])
  assert rows["medusa"].values == {"checkpoint": "gemma3/medusa", "tree": "chain4+1x1"}  # :CHECKPOINT wins
  assert rows["medusa_typical"].values == {"checkpoint": "both/medusa", "tree": "chain4+1x1", "acceptance": "typical"}
  assert rows["wide"].kind == "ngram" and rows["wide"].values == {"n": 5, "gamma": 6}  # the row's name last
  assert rows["ngram"].values == {"n": 3, "gamma": 6}
  assert rows["draft_lm"].values == {"checkpoint": "other/lm", "gamma": 2}
  suffix = rows_by_name(["suffix"], ["suffix.top=16"])["suffix"]  # any registered kind, at its own defaults
  assert suffix.kind == "suffix" and suffix.values == {"top": 16}
  assert real_rows.split_item("x=medusa_typical:f") == ("x", "medusa_typical", "f")


def test_a_kind_declared_outside_specjax_brings_its_named_rows(monkeypatch):
  """``KindSpec.rows`` are the named rows: a kind registered here (nothing in specjax names it) is a
  row of ``families --target``, in its declared order, checked when registered."""
  monkeypatch.setattr(specjax.drafters.registry, "_REGISTRY", dict(specjax.drafters.registry._REGISTRY))
  ngram = specjax.drafters.spec("ngram")
  declare = lambda *rows: specjax.drafters.register_kind(specjax.drafters.KindSpec(  # noqa: E731
      kind="lookup", build=ngram.build, options=ngram.options, rows=rows))
  declare(specjax.drafters.Row("lookup_wide", "lookup:some/corpus", ("lookup.n=5", "lookup.gamma=6"), order=25,
                               default=True))
  assert real_rows.row_table()["lookup_wide"] == ("lookup:some/corpus", ("lookup.n=5", "lookup.gamma=6"))
  assert real_rows.default_drafters() == ("draft_lm", "lookup_wide", "ngram")
  rows = real_rows.parse_rows(["ngram", "lookup_wide", "draft_lm"], ["lookup_wide.n=4"])
  assert rows[1].kind == "lookup" and rows[1].values == {"checkpoint": "some/corpus", "n": 4, "gamma": 6}
  assert sorted([r.name for r in rows], key=real_rows.order_key(rows)) == ["draft_lm", "lookup_wide", "ngram"]
  assert "lookup_wide" in families._flags()["drafters"].help
  with pytest.raises(ValueError, match="a drafter of its own kind"):
    declare(specjax.drafters.Row("wide", "ngram"))
  with pytest.raises(ValueError, match="option 'ngram.n=5' must read lookup.OPTION=VALUE"):
    declare(specjax.drafters.Row("wide", "lookup", ("ngram.n=5",)))
  with pytest.raises(ValueError, match="'lookup.bogus=1' must read"):
    declare(specjax.drafters.Row("wide", "lookup", ("lookup.bogus=1",)))
  declare(specjax.drafters.Row("ngram", "lookup"))  # a row named after another kind
  with pytest.raises(ValueError, match="row 'ngram' is declared twice or names another drafter kind"):
    real_rows.row_table()


@pytest.mark.parametrize("items, options, message", [
    (["ngram"], ["mtp.gamma=3"], "--drafter_option=mtp.gamma=3: no row"),
    (["ngram", "wide=ngram"], ["narrow.n=2"], "--drafter_option=narrow.n=2: no row"),
    (["ngram"], ["ngram.bogus=1"], "has no option 'bogus'"),
    (["ngram"], ["ngram.n=x"], "expected int"),
    (["ngram"], ["ngramn=1"], "KIND.OPTION=VALUE"),
    (["nope"], [], "'nope' is neither a row"),
    (["eagle=ngram"], [], "'eagle' is another drafter kind"),
    (["ngram", "ngram:x"], [], "two rows named 'ngram'"),
    (["=ngram"], [], "[NAME=]ROW_OR_KIND"),
])
def test_bad_rows_and_options_are_errors_naming_them(items, options, message):
  with pytest.raises(common.UsageError) as e:
    real_rows.parse_rows(items, options)
  assert message in str(e.value)


def test_resolved_values_gamma_from_the_tree_unless_given_and_head_weights_must_exist(tmp_path):
  rows = rows_by_name(["specinfer", "medusa", "mtp:/no/such/head", "table", "deep=specinfer"],
                      ["medusa.tree=chain5+1x2", "deep.gamma=3", "deep.paths=chain3"])
  assert real_rows.resolved_values(rows["specinfer"], tmp_path)["gamma"] == 4
  assert real_rows.resolved_values(rows["deep"], tmp_path)["gamma"] == 3
  medusa = real_rows.resolved_values(rows["medusa"], tmp_path)  # shipped: specjax/assets/smollm2/medusa
  assert medusa["gamma"] == 5 and medusa["checkpoint"].endswith("specjax/assets/smollm2/medusa")
  with pytest.raises(common.UsageError, match=r"no mtp weights at '/no/such/head' \(python -m specjax.train mtp"):
    real_rows.resolved_values(rows["mtp"], tmp_path)
  assert real_rows.resolved_values(rows["table"], tmp_path) == {"k": 4096, "gamma": 4, "corpus": str(tmp_path)}
  head = tmp_path / "dflash"  # DFlash: gamma = its trained block size less one
  head.mkdir()
  (head / "config.json").write_text(json.dumps({"family": "dflash", "config": {"block_size": 6}}))
  (head / "model.safetensors").write_bytes(b"")
  dflash = rows_by_name([f"dflash:{head}"])["dflash"]
  assert real_rows.resolved_values(dflash, tmp_path) == {"checkpoint": str(head), "gamma": 5}
  assert rows_by_name([f"dflash:{head}"], ["dflash.gamma=2"])["dflash"].values["gamma"] == 2


def test_table_row_builds_through_the_registry_as_counted_from_the_data_folder(target, data):
  """The table row: ``specjax.drafters.build('table', corpus=--data, k)``, the same table the data
  folder's prompts + generations give counted directly over its k most generated tokens."""
  from specjax.data import generated  # pylint: disable=import-outside-toplevel
  from specjax.drafters import vocab  # pylint: disable=import-outside-toplevel
  row = rows_by_name(["table"], ["table.k=8"])["table"]
  drafter, gamma = real_rows.build_row(row, real_rows.resolved_values(row, data), target)
  subset = vocab.top_k_subset(generated.token_counts(data, V), 8)
  direct = specjax.drafters.TableDrafter.from_corpus(generated.joined(generated.load_shards(data))[0], V,
                                                     subset_K=subset)
  assert gamma == 4 and drafter.subset_K.shape == (8,)
  for a, b in zip(jax.tree_util.tree_leaves(drafter), jax.tree_util.tree_leaves(direct)):
    np.testing.assert_array_equal(a, b)
  full, _ = real_rows.build_row(row, {"corpus": str(data), "gamma": 4}, target)
  assert full.subset_K is None and full.log_probs.shape == (V, V)
  ngram, gamma = real_rows.build_row(*(lambda r: (r, r.values))(rows_by_name(["ngram"])["ngram"]), target)
  assert isinstance(ngram, specjax.drafters.NGram) and ngram.n == 3 and gamma == 4


def test_row_order_and_tree_labels():
  rows = real_rows.parse_rows(["x=ngram", "eagle", "ngram", "draft_lm"], [])
  key = real_rows.order_key(rows)
  assert sorted([r.name for r in rows], key=key) == ["draft_lm", "ngram", "eagle", "x"]
  assert real_rows.tree_label("medusa", {"tree": "chain3+1x2"}) == "chain3+1x2"
  assert real_rows.tree_label("specinfer", {"children": (2, 1)}) == "children=2,1"
  options_of = {"ngram": {"kind": "ngram"}, "sp": {"kind": "specinfer", "checkpoint": "a/b"}}
  assert real_rows.small_model_of(options_of) == "a/b" and real_rows.small_model_of({}) == ""


@pytest.mark.parametrize("args, message", [
    (["--target=smollm2-135m-instruct", "--drafter_option=mtp.gamma=3"], "--drafter_option=mtp.gamma=3: no row"),
    (["--target=smollm2-135m-instruct", "--drafters=ngram", "--drafter_option=draft_lm.gamma=3"],
     "--drafter_option=draft_lm.gamma=3"),
    (["--target=smollm2-135m-instruct", "--families=ngram", "--drafters=ngram"], "give one"),
    (["--target=smollm2-135m-instruct", "--batch_sizes=8", "--b1_prompts=2"], "--b1_prompts: not used"),
    (["--target=smollm2-135m-instruct", "--mtp_gamma=3"], "mtp_gamma"),
    (["--target=smollm2-135m-instruct", "--variant=x:ngram"], "--variant: not used with --target"),
    (["--drafters=ngram"], "--drafters: not used with the demo target"),
    (["--families=medusa", "--drafter_option=eagle.top_k=3"], "--drafter_option=eagle.top_k=3: no row set"),
    (["--families=medusa", "--drafter_option=medusa.gamma=x"], "--drafter_option=medusa.gamma=x: drafter option"),
])
def test_families_flags_refused_before_anything_loads(capsys, args, message):
  assert bench("families", *args) == 2
  err = capsys.readouterr().err.strip()
  assert len(err.splitlines()) == 1 and message in err, err


# ----------------------------------------------------------------------------- the demo target
def test_variant_keys_take_the_drafter_option_form_and_read_as_the_options_types():
  name, config_file, overrides = families.parse_variant(
      "w:specinfer:specinfer.children=2,1,1:drafter.checkpoint=123:specinfer.gamma=3:allow_lossy=True")
  assert (name, config_file) == ("w", "specinfer_demo.py")
  assert overrides == {"drafter.children": (2, 1, 1), "drafter.checkpoint": "123", "drafter.gamma": 3,
                       "allow_lossy": True}  # "123": a checkpoint is text
  assert families.parse_variant("t:medusa:drafter.top_k=3,2")[2] == {"drafter.top_k": (3, 2)}
  with pytest.raises(common.UsageError, match="expected int"):
    families.parse_variant("w:specinfer:specinfer.gamma=x")


def test_drafter_options_set_every_demo_row_set_of_that_kind_or_name():
  demo = families.demo_families()
  sets = [("medusa", *demo["medusa"]), ("draft_model", *demo["draft_model"]),
          families.parse_variant("sparse:specinfer:drafter.gamma=3")]
  got = families.with_drafter_options(sets, ["medusa.tree=chain2", "specinfer.siblings=iid", "sparse.paths=chain3"])
  assert got == [("medusa", "medusa_demo.py", {"drafter.tree": "chain2"}), sets[1],
                 ("sparse", "specinfer_demo.py", {"drafter.gamma": 3, "drafter.siblings": "iid",
                                                  "drafter.paths": "chain3"})]
  config = families.family_config(*got[2], 1, 0.0, pair="", max_new_tokens=8, repeats=1)
  assert config.drafter.paths == "chain3" and config.drafter.siblings == "iid" and config.drafter.gamma == 3
  with pytest.raises(common.UsageError, match="no row set"):
    families.with_drafter_options(sets, ["eagle.top_k=2"])


@pytest.mark.slow
def test_target_run_writes_real_json_rows_and_merges(tmp_path, data):
  """``families --target`` on the demo target (its own folder) and a small data folder: the rows of
  --drafters with their options, real.json's row format, and --merge keeping the other rows."""
  from specjax.bench import common as bench_common  # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(1)
  held_out = [{"kind": k, "ids": rng.integers(32, 127, 6).tolist()} for k in ["code", "ende", "text"] * 3]
  (data / "prompts_held_out.json").write_text(json.dumps(held_out))
  target = bench_common.REPO / "specjax" / "assets" / "demo" / "target"
  args = [f"--target={target}", f"--data={data}", "--batch_sizes=1", "--temperatures=0", "--max_new_tokens=4",
          "--b1_prompts=1", f"--out_dir={tmp_path / 'out'}"]
  assert bench("families", *args, "--drafters=wide=ngram", "--drafter_option=wide.n=2") == 0
  assert bench("families", *args, "--merge", "--drafters=table", "--drafter_option=table.k=16") == 0
  saved = json.loads((tmp_path / "out" / "real.json").read_text())
  assert [r["family"] for r in saved["rows"]] == ["table", "wide"]  # the shipped rows' order first
  table, wide = saved["rows"]
  assert set(wide) == {"family", "batch_size", "temperature", "gamma", "drafter_params", "alpha", "tokens_per_pass",
                       "c", "v", "ar_tok_s", "spec_tok_s", "speedup", "expected_speedup", "formula_speedup",
                       "identical_at_t0", "generated_tokens", "prompts", "max_new_tokens"}
  assert wide["identical_at_t0"] is True and wide["gamma"] == 4 and table["k"] == 16 and table["identical_at_t0"]
  assert saved["meta"]["drafters"] == {"table": {"kind": "table", "k": 16, "gamma": 4, "corpus": str(data)}}
  assert saved["meta"]["earlier_runs"][0][-2:] == ["--drafters=wide=ngram", "--drafter_option=wide.n=2"]


def test_full_vocab_twin_of_every_truncated_kind_drafts_over_the_whole_vocabulary_exactly():
  """``KindSpec.full_vocab_twin`` (real.json's ``c_full_vocab``): each truncated-vocabulary case of a kind
  that declares one becomes a drafter of the same type without ``subset_K``, which decodes exactly."""
  from specjax.conformance import cases as matrix_cases  # pylint: disable=import-outside-toplevel
  models = matrix_cases.models(True)
  prompts, lengths = np.array([matrix_cases.PROMPTS["A"]], np.int32), np.array([5], np.int32)
  reference = specjax.generate(models.target, prompts, lengths, max_new_tokens=6).tokens
  seen = set()
  for spec in specjax.drafters.specs():
    truncated = [c for c in spec.exactness_cases() if "subset_K" in c.options and not c.adaptive]
    if spec.full_vocab_twin is None or not truncated:
      continue
    drafter = truncated[0].build(models)
    twin = spec.full_vocab_twin(drafter, models.target)
    assert drafter.subset_K is not None and twin.subset_K is None and type(twin) is type(drafter), spec.kind
    gamma = drafter.tree.max_depth if drafter.tree is not None else matrix_cases.GAMMA
    out = specjax.speculative_generate(models.target, twin, prompts, lengths, gamma=gamma, max_new_tokens=6)
    np.testing.assert_array_equal(out.tokens, reference, err_msg=spec.kind)
    seen.add(spec.kind)
  assert {"draft_model", "specinfer", "eagle", "mtp", "dflash", "medusa"} <= seen, seen
