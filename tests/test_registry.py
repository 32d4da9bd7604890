"""The drafter registry: a drafter written outside specjax registers itself and runs unchanged."""
import dataclasses
import importlib
import sys
import textwrap

import ml_collections
import numpy as np
import pytest

import specjax
from specjax import experiment, testing

USER_MODULE = textwrap.dedent('''
    """A user's own drafter: proposes the row's last token again (a repeat drafter)."""
    import dataclasses

    import flax
    import jax.numpy as jnp

    import specjax
    from specjax.models import kv_cache


    @flax.struct.dataclass
    class Repeat(specjax.drafters.Drafter):
      kind = "repeat_last"

      def init(self, target, prompts_BxP, prompt_lengths_B, max_len, prefill=None):
        return ()

      def propose(self, state, tokens_BxS, seq_len_B, gamma, sampling, rng):
        last_B = kv_cache.gather_rows(tokens_BxS, (seq_len_B - 1)[:, None])[:, 0]
        return state, specjax.drafters.Draft(jnp.repeat(last_B[:, None], gamma, 1), None)


    @dataclasses.dataclass(frozen=True)
    class RepeatOptions(specjax.drafters.Options):
      gamma: int = 2


    specjax.drafters.register("repeat_last", lambda options, target: Repeat(), RepeatOptions)
''')


@pytest.fixture(scope="module")
def user_module(tmp_path_factory):
  folder = tmp_path_factory.mktemp("user_code")
  (folder / "my_drafters.py").write_text(USER_MODULE)
  sys.path.insert(0, str(folder))
  yield "my_drafters"
  sys.path.remove(str(folder))


def test_user_drafter_registers_and_runs_exactly(user_module):
  importlib.import_module(user_module)
  assert "repeat_last" in specjax.drafters.kinds()
  target = testing.tiny_decoder(vocab_size=32, seed=1)
  drafter = specjax.drafters.build("repeat_last", {}, target)
  prompts, lengths = np.array([[3, 4, 5, 5], [7, 7, 0, 0]]), np.array([4, 2])
  base = specjax.generate(target, prompts, lengths, max_new_tokens=12)
  out = specjax.speculative_generate(target, drafter, prompts, lengths, gamma=2, max_new_tokens=12)
  np.testing.assert_array_equal(out.tokens, base.tokens)
  assert out.stats["lossy"] is False


def test_cli_config_imports_user_modules_first(user_module):
  """``config.imports`` is imported before the drafter section is checked, so a user's kind and its
  options resolve; a misspelt option of it is still an error naming it."""
  config = experiment.normalize(ml_collections.ConfigDict(
      {"target": {}, "drafter": {"kind": "repeat_last", "gamma": 2}, "imports": (user_module,)}))
  drafter = experiment.make_drafter(config, testing.tiny_decoder(vocab_size=32))
  assert drafter.kind == "repeat_last"
  with pytest.raises(ValueError, match="no option 'gama'"):
    experiment.normalize(ml_collections.ConfigDict(
        {"target": {}, "drafter": {"kind": "repeat_last", "gama": 2}, "imports": (user_module,)}))


def test_flat_config_keys_name_their_new_place():
  with pytest.raises(ValueError, match=r"'drafter_kind' is now 'drafter.kind'"):
    experiment.normalize(ml_collections.ConfigDict({"target": {}, "drafter_kind": "ngram"}))
  with pytest.raises(ValueError, match=r"'medusa_tree' is now 'drafter.tree'"):
    experiment.normalize(ml_collections.ConfigDict({"target": {}, "medusa_tree": "chain2"}))
  with pytest.raises(ValueError, match=r"unknown config key 'temprature' \(did you mean 'temperature'\?\)"):
    experiment.normalize(ml_collections.ConfigDict({"target": {}, "temprature": 0.5}))
  # a --config.drafter.kind= switch leaves the old kind's options behind: they are dropped, not errors
  config = experiment.normalize(ml_collections.ConfigDict(
      {"target": {}, "drafter": dict(experiment.drafter_section("eagle"), kind="ngram")}))
  assert experiment.drafter_options(config) == {"gamma": 4, "checkpoint": "", "seed": 0}


def test_unknown_kinds_and_options_name_the_bad_value():
  target = testing.tiny_decoder(vocab_size=32)
  with pytest.raises(ValueError, match=r"unknown drafter kind 'ngarm' \(did you mean 'ngram'\?\)"):
    specjax.drafters.build("ngarm", {}, target)
  with pytest.raises(ValueError, match=r"no option 'nn' \(did you mean 'n'\?\)"):
    specjax.drafters.build("ngram", {"nn": 2}, target)
  with pytest.raises(TypeError, match="subclassing"):
    specjax.drafters.register("bad", lambda o, t: None, dict)


def test_command_line_drafters_read_kind_checkpoint_and_typed_options():
  parse = specjax.drafters.parse_drafter
  assert parse("suffix", ["suffix.top=16", "suffix.factor=2", "ngram.gamma=3", "suffix.corpus=/a=b"]) == (
      "suffix", {"top": 16, "factor": 2.0, "corpus": "/a=b"})  # other kinds' options skipped; float widened
  assert parse("recycling", ["recycling.budgets=(0,2)"]) == ("recycling", {"budgets": (0, 2)})
  assert parse("draft_model:some/dir", ["draft_model.gamma=3"]) == ("draft_model",
                                                                     {"gamma": 3, "checkpoint": "some/dir"})
  for bad, message in ((["suffix.nope=1"], r"no option 'nope'"), (["suffix.top=x"], r"suffix.top='x': expected int"),
                       (["suffix.top=1.5"], "expected int"), (["suffixtop=1"], "must read KIND.OPTION=VALUE")):
    with pytest.raises(ValueError, match=message):
      parse("suffix", bad)
  with pytest.raises(ValueError, match="unknown drafter kind 'sufix'"):
    parse("sufix", [])


def test_every_shipped_kind_declares_its_options():
  for kind in ("draft_model", "ngram", "table", "specinfer", "medusa", "mtp", "dflash", "eagle"):
    options = specjax.drafters.make_options(kind, {})
    assert options.gamma >= 1 and hasattr(options, "checkpoint")


@pytest.mark.parametrize("kind", ["mtp", "dflash", "eagle", "medusa"])
def test_head_drafters_take_the_loops_prefill(monkeypatch, kind):
  """In the loop no head drafter runs the target over the prompt again: with the fallback pass
  disabled, speculative decoding still runs (and stays exact)."""
  target = testing.tiny_decoder(vocab_size=32, seed=1, num_layers=4)
  options = {"gamma": 3} if kind != "medusa" else {"gamma": 2, "tree": "chain2"}
  drafter = specjax.drafters.build(kind, options, target)

  def no_second_prefill(*args, **kwargs):
    raise AssertionError("a drafter ran the target over the prompt a second time")
  monkeypatch.setattr(specjax.drafters.base, "run_prefill", no_second_prefill)
  prompts, lengths = np.array([[3, 4, 5, 6], [9, 8, 0, 0]]), np.array([4, 2])
  out = specjax.speculative_generate(target, drafter, prompts, lengths, gamma=options["gamma"], max_new_tokens=6)
  np.testing.assert_array_equal(out.tokens, specjax.generate(target, prompts, lengths, max_new_tokens=6).tokens)
  with pytest.raises(AssertionError, match="second time"):  # outside the loop the fallback is what runs
    drafter.init(target, prompts, lengths, 12)


def test_a_kind_is_one_declaration_checked_when_registered(monkeypatch):
  monkeypatch.setattr(specjax.drafters.registry, "_REGISTRY", dict(specjax.drafters.registry._REGISTRY))
  spec = specjax.drafters.spec("ngram")
  assert spec.options is specjax.drafters.options_class("ngram") and spec.label == "n-gram"
  assert {c.name for c in spec.exactness_cases()} >= {"ngram/n=2"}
  build = lambda options, target: specjax.drafters.NGram()  # noqa: E731
  with pytest.raises(TypeError, match="frozen"):
    specjax.drafters.register_kind(specjax.drafters.KindSpec(
        kind="unfrozen", build=build, options=dataclasses.make_dataclass("O", [], bases=(specjax.drafters.Options,))))
  with pytest.raises(TypeError, match=r"build\(options, target\)"):
    specjax.drafters.register_kind(specjax.drafters.KindSpec(kind="one_arg", build=lambda options: None))
  with pytest.raises(ValueError, match="must be named 'named'"):
    specjax.drafters.register_kind(specjax.drafters.KindSpec(
        kind="named", build=build, cases=(specjax.drafters.Case("other/n=2", ("n",), build),)))
  assert "unfrozen" not in specjax.drafters.kinds() and "named" not in specjax.drafters.kinds()


def test_a_drafter_that_is_not_a_pytree_is_refused_at_build_naming_the_fix(monkeypatch):
  monkeypatch.setattr(specjax.drafters.registry, "_REGISTRY", dict(specjax.drafters.registry._REGISTRY))
  class NotAPytree(specjax.drafters.Drafter):  # no @flax.struct.dataclass
    kind = "not_a_pytree"

    def init(self, target, prompts_BxP, prompt_lengths_B, max_len, prefill=None):
      return ()

    def propose(self, state, tokens_BxS, seq_len_B, gamma, sampling, rng):
      raise AssertionError("never reached")

  specjax.drafters.register("not_a_pytree", lambda options, target: NotAPytree())
  with pytest.raises(TypeError, match=r"not a registered pytree: decorate the class with @flax.struct.dataclass"):
    specjax.drafters.build("not_a_pytree", {}, testing.tiny_decoder(vocab_size=32))


USER_KIND = textwrap.dedent('''
    """A user's kind declared with its exactness cases: proposes the row's last token again."""
    import dataclasses

    import flax
    import jax.numpy as jnp

    import specjax
    from specjax.models import kv_cache


    @flax.struct.dataclass
    class RepeatAgain(specjax.drafters.Drafter):
      kind = "repeat_again"

      def init(self, target, prompts_BxP, prompt_lengths_B, max_len, prefill=None):
        return ()

      def propose(self, state, tokens_BxS, seq_len_B, gamma, sampling, rng):
        last_B = kv_cache.gather_rows(tokens_BxS, (seq_len_B - 1)[:, None])[:, 0]
        return state, specjax.drafters.Draft(jnp.repeat(last_B[:, None], gamma, 1), None)


    specjax.drafters.register_kind(specjax.drafters.KindSpec(
        kind="repeat_again", build=lambda options, target: RepeatAgain(),
        cases=(specjax.drafters.Case("repeat_again", (), lambda models: RepeatAgain()),)))
''')


def test_the_exactness_command_runs_a_users_kind_from_its_module(tmp_path, monkeypatch, capsys):
  from specjax.conformance import command as exactness  # pylint: disable=import-outside-toplevel
  monkeypatch.setattr(specjax.drafters.registry, "_REGISTRY", dict(specjax.drafters.registry._REGISTRY))
  (tmp_path / "my_kind.py").write_text(USER_KIND)
  monkeypatch.syspath_prepend(str(tmp_path))
  argv = ["exactness", "--imports=my_kind", "--kind=repeat_again", "--samplings=greedy", "--shapes=b1"]
  assert exactness.main(argv) == 0
  out = capsys.readouterr().out
  assert "repeat_again" in out and "1 equal" in out and "0 failed" in out
  assert exactness.main(["exactness", "--kind=ngram,no_such_kind", "--list"]) == 2
  assert "unknown drafter kind 'no_such_kind'" in capsys.readouterr().err


def test_a_kind_switch_on_the_command_line_brings_that_kinds_options(user_module):
  from specjax import config_util  # pylint: disable=import-outside-toplevel
  argv, overrides = config_util.split_drafter_overrides(
      ["run", "--config=c.py", "--config.drafter.kind=ngram", "--config.drafter.n=2", "--config.drafter.periodic=false",
       "--config.temperature=1"])
  assert argv == ["run", "--config=c.py", "--config.temperature=1"]
  config = ml_collections.ConfigDict({"target": {}, "drafter": experiment.drafter_section(
      "draft_model", checkpoint="demo/drafter", gamma=7)})
  experiment.apply_drafter_overrides(config, overrides)
  assert dict(config.drafter) == {"kind": "ngram", "gamma": 7, "checkpoint": "demo/drafter", "n": 2, "min_match": 1,
                                  "periodic": False}
  drafter = experiment.make_drafter(experiment.normalize(config), testing.tiny_decoder(vocab_size=32))
  assert (drafter.n, drafter.periodic) == (2, False)
  # a user's kind, its module named by config.imports, with its own option
  config = ml_collections.ConfigDict({"target": {}, "imports": (user_module,),
                                      "drafter": experiment.drafter_section("ngram")})
  experiment.apply_drafter_overrides(config, {"kind": "repeat_last", "gamma": "3"})
  assert config.drafter.kind == "repeat_last" and config.drafter.gamma == 3
  with pytest.raises(ValueError, match=r"drafter kind 'ngram' has no option 'nn' \(did you mean 'n'\?\)"):
    experiment.apply_drafter_overrides(config, {"kind": "ngram", "nn": "2"})
  with pytest.raises(ValueError, match=r"--config.drafter.n='two': expected a value of type int"):
    experiment.apply_drafter_overrides(config, {"kind": "ngram", "n": "two"})
