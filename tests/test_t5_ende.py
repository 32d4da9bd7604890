"""The trained T5 EnDe pair (specjax/assets/t5_ende): tokenizer, split, translation, exactness, config."""
import json
import pathlib

import numpy as np
import pytest

import specjax
from specjax import checkpoint, loading
from specjax.data import ende, sentencepiece_tok
from specjax.models import bundle
from specjax.train import seq2seq
from specjax.train import __main__ as train_main

ASSETS = pathlib.Path(specjax.__file__).parent / "assets" / "t5_ende"
REPO = pathlib.Path(__file__).resolve().parent.parent
N, WIDTH, NEW = 6, 40, 24  # prompts, encoder width, new tokens: short, one compile per decoder


@pytest.fixture(scope="module")
def tok():
  return sentencepiece_tok.load()


@pytest.fixture(scope="module")
def split():
  return ende.split_pairs()


@pytest.fixture(scope="module")
def pair():
  # the large drafter: the most drafts accepted, so the most accept/rollback paths exercised
  return checkpoint.load_model(ASSETS / "target"), checkpoint.load_model(ASSETS / "drafter_large")


@pytest.fixture(scope="module")
def held_out_batch(tok, split):
  """N held-out (source, reference) pairs of ragged lengths, encoder inputs right-padded to WIDTH."""
  pairs = [p for p in split["held_out"] if 15 <= len(p[0]) <= 60][::37][:N]
  rows = [tok.encode(ende.T5_PREFIX + en) for en, _ in pairs]
  assert len(pairs) == N and max(map(len, rows)) <= WIDTH
  return seq2seq.pad(rows, WIDTH), np.array([len(r) for r in rows], np.int32), pairs


@pytest.fixture(scope="module")
def greedy(pair, held_out_batch):
  target, _ = pair
  prompts, lengths, _ = held_out_batch
  return specjax.generate(target, prompts, lengths, max_new_tokens=NEW, eos_id=1)


def test_tokenizer_is_t5_style(tok):
  assert tok.kind == "sentencepiece" and tok.vocab_size == 2000
  assert (tok.pad_id, tok.eos_id, tok.unk_id) == (0, 1, 2)
  text = "Die Datei „%s“ konnte nicht geöffnet werden"
  ids = tok.encode(text)
  assert ids[-1] == tok.eos_id and tok.eos_id not in ids[:-1]
  assert tok.decode(ids, skip_special_tokens=True) == text
  assert len(ids) < len(text) / 2  # pieces, not characters


def test_model_folders_carry_the_tokenizer():
  for name in ("target", "drafter_small", "drafter_base", "drafter_large"):
    model, tk = loading.load_pretrained(ASSETS / name)
    assert model.vocab_size == tk.vocab_size == 2000 and tk.kind == "sentencepiece", name


def test_split_is_by_catalogue_and_unseen(split):
  train_en = {en for en, _ in split["train"]}
  held_en = {en for en, _ in split["held_out"]}
  assert not train_en & held_en
  assert len(split["held_out"]) > 1000 and len(split["train"]) > 30_000
  with pytest.raises(ValueError, match="no-such-catalogue"):
    ende.split_pairs(held_out=("no-such-catalogue",))


def test_drafter_size_ratios(pair):
  target = pair[0]
  ratios = {d: target.num_params / checkpoint.load_model(ASSETS / f"drafter_{d}").num_params
            for d in ("small", "base", "large")}
  # the paper's T5-small/base/large against T5-XXL: 1/140, 1/45, 1/14
  assert 100 < ratios["small"] < 180 and 35 < ratios["base"] < 60 and 10 < ratios["large"] < 20, ratios


def test_target_learned_german_from_english(tok, pair, held_out_batch):
  """Teacher-forced cross-entropy on unseen pairs, trained vs the same architecture untrained
  (ln 2000 = 7.6 nats). The shipped target is still weak (chrF 29.2 on 300 held-out pairs,
  benchmarks/t5_ende/README.md), so chrF is reported, not pinned here."""
  _, _, pairs = held_out_batch
  data = seq2seq.tokenize(pairs, tok, ende.T5_PREFIX)
  batch = seq2seq.make_batch(data, range(N), WIDTH)
  loss_fn = seq2seq.ce_loss(pair[0].module)
  trained = float(loss_fn(pair[0].params, batch)[0])
  untrained = float(loss_fn(bundle.init_model(pair[0].module, 0).params, batch)[0])
  assert trained < 4.0 and untrained > 7.0, (trained, untrained)


def test_target_reads_its_source(tok, pair, split):
  """The same German references scored with their own English sources and with the sources of
  other pairs (rolled by one row): a target that translates needs its source, a decoder-only
  language model of German would score both alike. 64 unseen pairs, teacher-forced."""
  pairs = [p for p in split["held_out"] if len(p[0]) <= 120][::17][:64]
  own = seq2seq.tokenize(pairs, tok, ende.T5_PREFIX)
  other = seq2seq.Tokenized(own.enc[1:] + own.enc[:1], own.dec)
  loss_fn = seq2seq.ce_loss(pair[0].module)
  own_ce, other_ce = (seq2seq.eval_metrics(loss_fn, pair[0].params, d, max_pairs=64)["loss"] for d in (own, other))
  assert other_ce - own_ce > 1.0, (own_ce, other_ce)


@pytest.mark.parametrize("gamma", [3, 7])
def test_greedy_speculative_equals_autoregressive(pair, held_out_batch, greedy, gamma):
  target, drafter = pair
  prompts, lengths, _ = held_out_batch
  spec = specjax.speculative_generate(target, specjax.drafters.DraftModel(drafter), prompts, lengths, gamma=gamma,
                                      max_new_tokens=NEW, eos_id=1)
  np.testing.assert_array_equal(spec.tokens, greedy.tokens)
  np.testing.assert_array_equal(spec.lengths, greedy.lengths)
  assert spec.stats["mean_accepted"] > 0.1  # the drafter's tokens are kept, not only the target's
  assert 0.1 < spec.stats["alpha"] <= 1.0


@pytest.mark.slow
def test_walltime_table_on_the_t5_pair(tmp_path, capsys):
  """``python -m specjax.bench walltime --t5_ende``, shortened: two prompts, the small drafter, greedy."""
  from specjax.bench import __main__ as bench_main  # pylint: disable=import-outside-toplevel
  assert bench_main.main(["specjax.bench", "walltime", "--t5_ende", "--drafters=small", "--prompts=2",
                          "--gammas=1,2", "--temperatures=0", "--max_new_tokens=4", "--repeats=1",
                          f"--out_dir={tmp_path}"]) == 0
  data = json.loads((tmp_path / "results.json").read_text())
  assert [(r["drafter"], r["gamma"]) for r in data["rows"]] == [("small", 1), ("small", 2)]
  for r in data["rows"]:
    assert r["identical_to_autoregressive"] is True and r["speedup"] > 0 and r["v"] > 0 and r["c"] > 0
  assert data["meta"]["prompts"] == 2 and len(data["meta"]["prompt_texts"]) == 2
  assert sorted(data["meta"]["v_by_gamma"]) == ["1", "2"]
  table = (tmp_path / "table2.md").read_text()
  assert "| Leviathan et al., T5-XXL 11B | T5-small | 77M (1/143) | 0 | 7 |" in table
  assert "| specjax, T5 " in table and "| small |" in table and table in capsys.readouterr().out + "\n"
  assert "| small |" in (tmp_path / "sweep.md").read_text()
  assert (tmp_path / "speedup_vs_gamma.png").read_bytes()[:4] == b"\x89PNG"


def test_cpu_config_uses_the_trained_pair_and_real_prompts(tok):
  import importlib.util  # pylint: disable=import-outside-toplevel
  spec = importlib.util.spec_from_file_location("t5cfg", REPO / "configs" / "t5xxl_small.py")
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  cfg = mod.get_config("cpu")
  assert cfg.target.checkpoint == "t5_ende/target" and cfg.drafter.checkpoint == "t5_ende/drafter_small"
  from specjax import prompts as prompts_lib  # pylint: disable=import-outside-toplevel
  from specjax import experiment  # pylint: disable=import-outside-toplevel
  prompts, lengths = prompts_lib.from_config(experiment.normalize(cfg), tok, 2000)
  texts = [tok.decode(prompts[i, :lengths[i]], skip_special_tokens=True) for i in range(len(prompts))]
  assert len(texts) >= 4 and all(t.startswith(ende.T5_PREFIX.strip()) for t in texts), texts
  held = {ende.T5_PREFIX + en for en, _ in ende.split_pairs()["held_out"]}
  assert all(json.loads(line) in held for line in pathlib.Path(cfg.prompts_file).read_text().splitlines())
  paper = mod.get_config("")
  assert paper.target.checkpoint == "google/flan-t5-xxl" and paper.target.d_model == 4096  # the dry run keeps the sizes


def _write_mo(path, pairs):
  """A minimal GNU .mo file (little-endian, no hash table): what msgfmt writes, for the test."""
  import struct  # pylint: disable=import-outside-toplevel
  keys = [k.encode() for k, _ in pairs]
  values = [v.encode() for _, v in pairs]
  n, header = len(pairs), 7 * 4
  data_start = header + 16 * n
  blob, orig, trans = b"", [], []
  for table, strings in ((orig, keys), (trans, values)):
    for s in strings:
      table.append((len(s), data_start + len(blob)))
      blob += s + b"\0"
  out = struct.pack("<7I", 0x950412DE, 0, n, header, header + 8 * n, 0, 0)
  out += b"".join(struct.pack("<2I", *e) for e in orig + trans)
  path.write_bytes(out + blob)


def test_extra_catalogues_grow_the_training_side_only(split, tmp_path):
  """scripts/fetch_debian_catalogues.sh's folders: new pairs train, the held-out side is unchanged
  and a held-out English string in an extra catalogue still stays out of training."""
  held_en, held_de = split["held_out"][0]
  _write_mo(tmp_path / "extra-tool.mo", [("Frobnicate the widget", "Das Widget frobnizieren"),
                                         ("Unfold %s twice", "%s zweimal entfalten"), (held_en, held_de)])
  grown = ende.split_pairs(ende.DEFAULT_DIRS + (tmp_path,))
  assert grown["held_out"] == split["held_out"]
  assert set(grown["train"]) - set(split["train"]) == {("Frobnicate the widget", "Das Widget frobnizieren"),
                                                        ("Unfold %s twice", "%s zweimal entfalten")}


def test_msgctxt_is_not_part_of_the_english_source(tmp_path):
  """GTK/KDE/LibreOffice catalogues key an entry with msgctxt as "context\\x04msgid": the source is
  the msgid alone, and one msgid under two contexts is one pair."""
  _write_mo(tmp_path / "ctx-tool.mo", [("", "Content-Type: text/plain; charset=UTF-8\n"),
                                       ("STR_NEW_FILE\x04New Document", "Neues Dokument"),
                                       ("menu\x04New Document", "Neues Dokument (Menü)"),
                                       ("%1 is a path\x04Open '%1'", "'%1' öffnen")])
  pairs = ende.load_pairs_by_file([tmp_path])["ctx-tool"]
  assert [en for en, _ in pairs] == ["New Document", "Open '%1'"] and ("Open '%1'", "'%1' öffnen") in pairs


def _train_t5_ende(*flags):
  return train_main.main(["specjax.train", "t5_ende", *flags])


def test_warm_start_refuses_a_folder_of_another_shape(tmp_path, capsys):
  """``python -m specjax.train t5_ende --init_from`` (continuing the shipped target with a fresh
  optimizer) names the folder whose config is not the target's, before any data is read or a step
  is taken; on any other stage it is refused rather than silently ignored."""
  assert _train_t5_ende("--stage=target", f"--init_from={ASSETS / 'drafter_small'}", f"--workdir={tmp_path}",
                        "--steps=1") == 2
  err = capsys.readouterr().err
  assert f"--init_from={ASSETS / 'drafter_small'} holds" in err and len(err.strip().splitlines()) == 1, err
  assert not (tmp_path / "target").exists()
  assert _train_t5_ende("--stage=drafters", f"--init_from={ASSETS / 'target'}", f"--workdir={tmp_path}",
                        "--steps=1") == 2
  assert "applies to --stage=target only, not --stage=drafters" in capsys.readouterr().err
  assert not (tmp_path / "drafters").exists()


def test_word_dropout_hides_decoder_inputs_only():
  rng = np.random.default_rng(0)
  data = seq2seq.Tokenized([list(rng.integers(3, 50, 10)) + [1] for _ in range(200)],
                           [list(rng.integers(3, 50, int(n))) + [1] for n in rng.integers(5, 20, 200)])
  clean, noisy = seq2seq.Batches(data, 0)(3), seq2seq.Batches(data, 0, dec_input_dropout=0.3)(3)
  for key in ("enc", "enc_len", "labels"):
    np.testing.assert_array_equal(noisy[key], clean[key])
  real = clean["dec_in"] != 0  # the start token and pads are 0 and never replaced
  dropped = noisy["dec_in"] != clean["dec_in"]
  assert not dropped[~real].any() and (noisy["dec_in"][dropped] == 2).all()
  assert 0.25 < dropped[real].mean() < 0.35
  with pytest.raises(ValueError, match="dec_input_dropout=1.0"):
    seq2seq.Batches(data, 0, dec_input_dropout=1.0)


@pytest.mark.xla_optimized  # hundreds of training steps: optimised compile halves the run
def test_training_learns_to_read_the_encoder(tmp_path):
  """The seq2seq training path (specjax.train.seq2seq + loop) learns a task only the source can
  solve: reverse a random string. Rules out a broken cross-attention gradient as the reason the
  EnDe target ignores its source (benchmarks/t5_ende/README.md); shuffled sources must score low."""
  from specjax.models.t5 import T5, T5Config  # pylint: disable=import-outside-toplevel
  from specjax.train import loop  # pylint: disable=import-outside-toplevel
  vocab_size, rng = 64, np.random.default_rng(0)

  def rows(n):
    src = [list(rng.integers(3, vocab_size, int(k))) for k in rng.integers(3, 12, n)]
    return seq2seq.Tokenized([s + [1] for s in src], [s[::-1] + [1] for s in src])  # EOS = 1

  train, held = rows(4000), rows(128)
  module = T5(T5Config(vocab_size=vocab_size, d_model=64, num_encoder_layers=2, num_decoder_layers=2, num_heads=4,
                       head_dim=16, mlp_dim=128, relative_attention_num_buckets=32, relative_attention_max_distance=128))
  cfg = loop.TrainConfig(steps=400, learning_rate=5e-3, warmup_steps=20, checkpoint_every=10_000)
  params = loop.train(bundle.init_model(module, 0).params, seq2seq.ce_loss(module),
                      seq2seq.Batches(train, 0, buckets=((16, 64),)), cfg, tmp_path, desc="reverse")
  acc = seq2seq.eval_metrics(seq2seq.ce_loss(module), params, held, max_pairs=128)["token_accuracy"]
  shuffled = seq2seq.Tokenized(held.enc[1:] + held.enc[:1], held.dec)
  acc_shuffled = seq2seq.eval_metrics(seq2seq.ce_loss(module), params, shuffled, max_pairs=128)["token_accuracy"]
  assert acc > 0.75 and acc_shuffled < 0.3, (acc, acc_shuffled)  # 400 steps: 0.81 vs 0.04
