"""The measured tables of README.md, docs/results.md and docs/training.md, one ``@table`` function
each, reading the benchmark JSON files (rendered into the pages by ``tools/tables.py``;
docs/reproductions.md's are in ``tools/table_defs_reproductions.py``)."""
from __future__ import annotations

import table_defs_owntext
from table_kit import Sources, Table, f, minutes, n, row_of, same, t, table, x


# ---------------------------------------------------------------------------------------------- README

TARGET_NAMES = {"smollm2-135m-instruct": "SmolLM2-135M-Instruct", "gemma3-270m": "Gemma 3 270M (base)",
                "qwen2.5-coder-1.5b-instruct": "Qwen2.5-Coder-1.5B-Instruct"}


def kind_label(kind: str) -> str:
  """A drafter kind's name in tables: its declared label (``KindSpec.label``), else the name itself."""
  from specjax import drafters  # pylint: disable=import-outside-toplevel
  return drafters.spec(kind).display if kind in drafters.kinds() else kind


def drafter_label(name: str) -> str:
  """A specbench row name (``KIND[:CHECKPOINT] adaptive|fixed``) in words."""
  spec, _, mode = name.rpartition(" ") if name.endswith((" adaptive", " fixed")) else (name, "", "")
  kind, _, checkpoint = spec.partition(":")
  words = kind_label(kind) + (f" {checkpoint}" if checkpoint else "")
  return words + (f", {mode} draft length" if mode else "")


def drafter_setting(row: dict) -> str:
  """``γ N`` of a specbench row, and the acceptance estimate's memory where it is not the default."""
  from specjax.adaptive import Adaptive  # pylint: disable=import-outside-toplevel
  memory = (row.get("adaptive") or {}).get("memory", Adaptive.memory)
  return f"γ {row['gamma']}" + ("" if memory == Adaptive.memory else f", memory {memory:g}")

@table("summary", "README: where speculation pays and where it does not, one row per setting")
def summary(src: Sources) -> Table:
  rows = []
  fam = src.json("benchmarks/families/families.json")["rows"]
  for family, label, b, temp in (("draft_model", "draft model", 1, 0.0), ("draft_model", "draft model", 1, 1.0),
                                 ("draft_model", "draft model", 8, 0.0),
                                 ("specinfer_sparse", "SpecInfer token tree", 1, 0.0),
                                 ("ngram", "n-gram prompt lookup", 1, 0.0)):
    r = row_of(fam, family=family, batch_size=b, temperature=temp)
    if r["drafter_params"]:
      label += f", {r['drafter_params'] / 1e6:.2f}M params"
    if r["drafted_nodes"] != r["gamma"]:
      label += f", {r['drafted_nodes']} nodes"
    rows.append(["demo pair (byte-level Python code)", label, "held-out stdlib code", str(b), t(temp),
                 x(r["speedup"]), f(r["tokens_per_iteration"]), same(r["identical_to_autoregressive"], temp),
                 "benchmarks/families/families.json"])
  for rel in src.glob("benchmarks/specbench/*.json"):  # per target: B=1 and B=8, greedy and T=1
    sb = src.json(rel)
    cfg = sb["config"]
    for name, r in sb["drafters"].items():
      o = r["overall"]
      rows.append([TARGET_NAMES.get(cfg["target"], cfg["target"]),
                   f"{drafter_label(name)} ({drafter_setting(r)})",
                   f"Spec-Bench-format suite, {cfg['num_questions']} questions in {len(sb['categories'])} categories"
                   + ("" if cfg.get("stop_at_eos", True) else ", past EOS to a fixed length"),
                   str(cfg["batch_size"]), t(cfg["temperature"]), x(o["speedup"]), f(o["tokens_per_iteration"]),
                   same(o["identical_to_autoregressive"], cfg["temperature"]), rel])
  rows += table_defs_owntext.summary_rows(src)
  real = src.json("benchmarks/real/real.json")["rows"]
  r = row_of(real, family="ngram", batch_size=1, temperature=0.0)
  rows.append(["SmolLM2-135M-Instruct", "n-gram prompt lookup", "held-out code, translation, English", "1", "0",
               x(r["speedup"]), f(r["tokens_per_pass"]), same(r["identical_at_t0"]), "benchmarks/real/real.json"])
  trained = [r for r in real if r["family"] != "ngram" and r["batch_size"] == 1 and r["temperature"] == 0.0
             and "typical" not in r["family"]]
  best = max(trained, key=lambda r: r["speedup"])
  rows.append(["SmolLM2-135M-Instruct", f"best of the {len(trained)} other drafters tried: {best['family']}",
               "held-out code, translation, English", "1", "0", x(best["speedup"]), f(best["tokens_per_pass"]),
               same(best["identical_at_t0"]), "benchmarks/real/real.json"])
  gem = row_of(src.json("benchmarks/real_gemma/real.json")["rows"], family="ngram", batch_size=1, temperature=0.0)
  rows.append(["Gemma 3 270M (base)", "n-gram prompt lookup", "held-out code, translation, English", "1", "0",
               x(gem["speedup"]), f(gem["tokens_per_pass"]), same(gem["identical_at_t0"]),
               "benchmarks/real_gemma/real.json"])
  t5_run = src.json("benchmarks/t5_ende/results.json")
  r = max((r for r in t5_run["rows"] if r["temperature"] == 0.0), key=lambda r: r["speedup"])
  rows.append([f"T5 v1.1 EnDe, {t5_run['meta']['target_params'] / 1e6:.1f}M (trained here)", f"T5 drafter '{r['drafter']}' (γ {r['gamma']}, best of sweep)",
               "held-out gettext strings", "1", "0", x(r["speedup"]), f(r["tokens_per_iteration"]),
               same(r["identical_to_autoregressive"]), "benchmarks/t5_ende/results.json"])
  for rel in src.glob("benchmarks/runs/*.json"):  # python -m specjax.run --json_out=benchmarks/runs/NAME.json
    r = src.json(rel)
    temp = r.get("temperature", 0.0)
    rows.append([str(r.get("target")), f"{r.get('drafter')} (γ {r.get('gamma')})",
                 f"{r.get('num_prompts', 1)} prompt(s), `{r.get('config', 'specjax.run')}`",
                 str(r.get("batch_size")), t(temp), x(r.get("speedup")), f(r.get("tokens_per_iteration")),
                 same(r.get("identical_to_autoregressive"), temp), rel])
  body = [r[:-1] + [f"[json](@/{r[-1]})"] for r in rows]
  return Table(["target", "drafter", "prompts", "batch", "T", "speedup", "tokens / target pass",
                "= target alone", "data"], body,
               note="Generated by `python tools/tables.py` from the linked files.", data_line=False)


# ---------------------------------------------------------------------------------------------- docs/results.md

def _t_eos(cfg) -> str:
  """The temperature, marked where rows ran past EOS to a fixed length (--stop_at_eos=false)."""
  return t(cfg["temperature"]) + ("" if cfg.get("stop_at_eos", True) else " (no EOS)")


@table("specbench", "Spec-Bench-format suite on the real targets: speedup per category")
def specbench(src: Sources) -> Table:
  rows, groups = [], None
  for rel in src.glob("benchmarks/specbench/*.json"):  # one file per target, batch size and temperature
    d = src.json(rel)
    groups = groups or d["categories"]
    cfg = d["config"]
    for name, r in d["drafters"].items():
      o = r["overall"]
      rows.append([TARGET_NAMES.get(cfg["target"], cfg["target"]), str(cfg["batch_size"]), _t_eos(cfg),
                   f"{drafter_label(name)} ({drafter_setting(r)})",
                   *(x(r["categories"][g]["speedup"]) for g in groups), x(o["speedup"]),
                   f(o["tokens_per_iteration"]), f(o["alpha"], 3), f(o["tokens_per_s"], 1),
                   f(o["baseline_tokens_per_s"], 1), same(o["identical_to_autoregressive"], cfg["temperature"])])
  return Table(["target", "B", "T", "drafter", *groups, "overall", "accepted / call", "α", "tok/s", "AR tok/s", "= AR"],
               rows)


@table("specbench_alpha", "Spec-Bench-format suite: α and tokens per target call per category")
def specbench_alpha(src: Sources) -> Table:
  rows, groups = [], None
  for rel in src.glob("benchmarks/specbench/*.json"):
    d = src.json(rel)
    groups = groups or d["categories"]
    cfg = d["config"]
    for name, r in d["drafters"].items():
      rows.append([TARGET_NAMES.get(cfg["target"], cfg["target"]), str(cfg["batch_size"]), _t_eos(cfg),
                   f"{drafter_label(name)} ({drafter_setting(r)})",
                   *(f"{f(r['categories'][g]['alpha'], 2)} / {f(r['categories'][g]['tokens_per_iteration'])}"
                     for g in groups),
                   f"{f(r['overall']['alpha'], 2)} / {f(r['overall']['tokens_per_iteration'])}"])
  return Table(["target", "B", "T", "drafter", *(f"{g}: α / per call" for g in groups), "overall"], rows)


@table("specbench_hf", "transformers' prompt lookup and assisted generation on the Spec-Bench-format suite")
def specbench_hf(src: Sources) -> Table:
  rows, groups = [], None
  for rel in src.glob("benchmarks/specbench_hf/*.json"):  # python -m specjax.bench specbench_hf, one per target
    d = src.json(rel)
    groups = groups or d["categories"]
    cfg = d["config"]
    for name, r in d["methods"].items():
      o = r["overall"]
      rows.append([TARGET_NAMES.get(cfg["target"], cfg["target"]), name.removeprefix("transformers "),
                   *(x(r["categories"][g]["speedup"]) for g in groups), x(o["speedup"]),
                   f(o["tokens_per_target_call"]), f(o["tokens_per_s"], 1), f(o["baseline_tokens_per_s"], 1),
                   str(cfg["torch_threads"]), same(o["identical_to_generate"])])
  return Table(["target", "transformers", *groups, "overall", "tokens / target call", "tok/s", "generate tok/s",
                "threads", "= generate"], rows)


def _families(src: Sources, rel: str) -> Table:
  rows = []
  for r in src.json(rel)["rows"]:
    temp = r["temperature"]
    name = r["family"] + (" (lossy)" if r.get("lossy") else "")
    rows.append([name, str(r["batch_size"]), t(temp), str(r["gamma"]), str(r["drafted_nodes"]), n(r["drafter_params"]),
                 f(r["c"], 3), f(r["v"]), f(r["alpha"], 3), f(r["tokens_per_iteration"]),
                 f(r["baseline_tokens_per_s"], 1), f(r["tokens_per_s"], 1), x(r["speedup"]), x(r["expected_speedup"]),
                 same(r["identical_to_autoregressive"], temp)])
  return Table(["family", "B", "T", "γ", "drafted nodes", "drafter params", "c", "v", "α", "tokens/iter",
                "AR tok/s", "spec tok/s", "speedup", "expected", "= AR"], rows)


@table("families", "every drafter family on the demo target (python -m specjax.bench families)")
def families(src: Sources) -> Table:
  return _families(src, "benchmarks/families/families.json")


@table("families_lossy", "lossy relaxations on the demo target, flagged")
def families_lossy(src: Sources) -> Table:
  return _families(src, "benchmarks/families/lossy/families.json")


@table("eagle", "EAGLE-3 head: chain, static tree, EAGLE-2 dynamic tree, beside MTP")
def eagle(src: Sources) -> Table:
  rows = []
  for r in src.json("benchmarks/eagle/families.json")["rows"]:
    temp = r["temperature"]
    kept = " / ".join(f"{p:.2f}" for p in r["acceptance_per_position"])
    rows.append([r["family"], str(r["batch_size"]), t(temp), str(r["gamma"]), str(r["drafted_nodes"]), kept,
                 f(r["tokens_per_iteration"]), f(r["c"], 3), f(r["v"]), f(r["batch_utilization"]),
                 x(r["speedup"]), same(r["identical_to_autoregressive"], temp)])
  return Table(["drafter", "B", "T", "γ", "nodes", "P(kept) at depth 1..γ", "tokens/pass", "c", "v", "utilization",
                "speedup", "= AR"], rows)


@table("gamma_sweep", "an earlier gamma sweep of the demo pair on a loaded machine (python -m specjax.bench gamma)")
def gamma_sweep(src: Sources) -> Table:
  rows = []
  for r in src.json("benchmarks/results/results.json")["rows"]:
    temp = r["temperature"]
    rows.append([r["drafter"], str(r["batch_size"]), t(temp), str(r["gamma"]), f(r["baseline_tokens_per_s"], 1),
                 f(r["tokens_per_s"], 1), x(r["speedup"]), x(r["predicted_speedup"]), f(r["alpha"], 3),
                 f(r["alpha_iid"], 3), f(r["mean_accepted"]), f(r["c"], 3), f(r["v"]),
                 same(r["identical_to_autoregressive"], temp)])
  return Table(["drafter", "B", "T", "γ", "AR tok/s", "spec tok/s", "speedup", "formula", "α", "α iid",
                "mean accepted", "c", "v", "= AR"], rows)


def _compare_hf(src: Sources, rel: str) -> Table:
  d = src.json(rel)
  rows = [[str(r["batch_size"]), r["method"], f(r["tokens_per_s"], 1), same(r["identical_to_hf_greedy"]),
           n(r["target_calls"]), f(r["mean_accepted"]), r.get("note") or ""] for r in d["rows"]]
  m = d["meta"]
  note = (f"target {m['target_params']:,} params, drafter {m['drafter_params']:,}; greedy, {m['max_new_tokens']} new "
          f"tokens per row, median of {m['repeats']}; torch threads {m['torch_threads']}, jax {m['jax']}, "
          f"transformers {m['transformers']}.")
  return Table(["batch", "method", "tok/s", "same tokens as transformers greedy", "target calls", "mean accepted",
                "note"], rows, note=note)


@table("compare_hf", "the demo pair in specjax and in Hugging Face transformers, torch 1 thread")
def compare_hf(src: Sources) -> Table:
  return _compare_hf(src, "benchmarks/compare_hf/compare_hf.json")


@table("compare_hf_torch2", "the same comparison with torch on 2 threads")
def compare_hf_torch2(src: Sources) -> Table:
  return _compare_hf(src, "benchmarks/compare_hf/compare_hf_torch2threads.json")


@table("refill", "continuous refill at batch 8 against static batches (python -m specjax.bench batch)")
def refill(src: Sources) -> Table:
  d = src.json("benchmarks/batch/bench_batch.json")
  rows = [[r["decoder"], n(r["tokens"]), f(r["static_tok_s"], 1), f(r["refill_tok_s"], 1), x(r["gain"]),
           f(r["static_utilization"], 3), f(r["refill_utilization"], 3), same(r["same_tokens"])] for r in d["refill"]]
  return Table(["decoder", "tokens", "static tok/s", "refill tok/s", "gain", "static util.", "refill util.",
                "same tokens"], rows, note=d["header"] + ".")


@table("batch_sweep", "speedup against batch size with refill on (python -m specjax.bench batch)")
def batch_sweep(src: Sources) -> Table:
  d = src.json("benchmarks/batch/bench_batch.json")
  rows = [[str(r["batch"]), r["drafter"], f(r["ar_tok_s"], 1), f(r["spec_tok_s"], 1), x(r["speedup"]),
           x(r["predicted"]), f(r["alpha"], 3), f(r["tokens_per_iteration"]), f(r["c"], 3), f(r["v"]),
           f(r["utilization"], 3), same(r["same_tokens"])] for r in d["sweep"]]
  return Table(["B", "drafter", "AR tok/s", "spec tok/s", "speedup", "predicted", "α", "tokens/iter", "c", "v",
                "util.", "= AR"], rows)


@table("profile", "one decode step piece by piece, demo pair and SmolLM2 (python -m specjax.bench profile)")
def profile(src: Sources) -> Table:
  rows = []
  for label, rel in (("demo pair", "benchmarks/profile/profile_demo.json"),
                     ("SmolLM2-135M, n-gram", "benchmarks/profile/profile_smollm2.json")):
    d = src.json(rel)
    for r in d["rows"]:
      rows.append([label, str(r["batch"]), f(r["ar_ms_per_step"]), f(r["minimal_ms_per_step"]), f(r["ar_over_minimal"]),
                   f(r["draft_ms"]), f(r["verify_ms"]), f(r["accept_ms"], 3), f(r["commit_ms"], 3), f(r["pieces_ms"]),
                   f(r["iteration_in_loop_ms"]), f(r["v"])])
  return Table(["model", "batch", "generate ms/step", "minimal loop ms/step", "generate / minimal", "draft ms",
                "verify ms", "accept ms", "commit ms", "sum of pieces ms", "iteration in the loop ms", "v"], rows,
               note="Speculative pieces at the profile's gamma; times in ms, median of the profile's repeats.")


@table("large_vocab", "per-step and per-iteration cost at V = 4,096 and 262,144, before and after (tiny decoders)")
def large_vocab(src: Sources) -> Table:
  rows = []
  for vocab in (4096, 262144):
    before = src.json(f"benchmarks/large_vocab/before_v{vocab}.json")["rows"]
    after = src.json(f"benchmarks/large_vocab/after_v{vocab}.json")["rows"]
    for b in before:
      a = row_of(after, sampling=b["sampling"])
      rows.append([n(vocab), b["sampling"], f"{f(b['ar_ms'], 1)} → {f(a['ar_ms'], 1)}",
                   f"{f(b['chain_spec_ms'], 0)} → {f(a['chain_spec_ms'], 0)} ({f(a['chain_floor_ms'], 0)})",
                   f"{f(b['tree_spec_ms'], 0)} → {f(a['tree_spec_ms'], 0)} ({f(a['tree_floor_ms'], 0)})"])
  return Table(["vocab", "sampling", "AR step ms, before → after", "chain iteration ms (floor after)",
                "tree iteration ms (floor after)"], rows)


@table("large_vocab_gemma", "the same costs on Gemma 3 270M itself, batch 1 and 8")
def large_vocab_gemma(src: Sources) -> Table:
  rows = []
  for b in (1, 8):
    d = src.json(f"benchmarks/large_vocab/gemma3_b{b}.json")
    for r in d["rows"]:
      rows.append([str(d["meta"]["batch"]), r["sampling"], f(r["ar_ms"], 1),
                   f"{f(r['chain_spec_ms'], 1)} ({f(r['chain_floor_ms'], 1)})",
                   f"{f(r['tree_spec_ms'], 1)} ({f(r['tree_floor_ms'], 1)})"])
  return Table(["batch", "sampling", "AR step ms", "chain γ 7 iteration ms (floor)", "21-node tree iteration ms (floor)"],
               rows)


@table("load_memory", "peak host memory of loading an 853M-param bf16 Llama folder, one device and streamed onto "
       "a mesh (python -m specjax.bench load_memory)")
def load_memory_table(src: Sources) -> Table:
  from specjax.bench import load_memory  # pylint: disable=import-outside-toplevel  (no jax at import)
  d = src.json("benchmarks/load_memory/load_memory.json")
  scanned = src.json("benchmarks/load_memory/load_memory_scanned.json")  # the default on accelerators
  meta = d["meta"]
  head, rows = load_memory.table_cells(d["rows"] + scanned["rows"], meta["target_ratio"],
                                       meta.get("generate_target_ratio", 1.6))
  return Table(head, rows, note=f"{n(meta['params'])} params, {f(meta['file_bytes'] / 1e9)} GB of bfloat16 in "
               f"{meta['shards']} safetensors files; jax {meta['jax']} on CPU, fake CPU devices for the mesh, each "
               "load in a fresh process. Baseline: the process after importing jax and specjax, starting its "
               "devices and tracing a toy model once. Scanned layers (`scan_layers`, the default on "
               "accelerators): each layer written into its `[L, ...]` stack on the devices as it is read. First "
               "generate: the same process then decodes its first tokens (compile included; "
               f"{meta.get('dtype') or 'config'} compute); bfloat16 weights are cast layer by layer at "
               "each step, with no float32 copy of them held through the decode loop.")


@table("real_vs_hf", "SmolLM2 and Gemma 3 in specjax and in transformers, same GGUF "
       "(python -m specjax.bench hf --real)")
def real_vs_hf(src: Sources) -> Table:
  d = src.json("benchmarks/real_models/compare_hf_real.json")
  rows = []
  for model in d["meta"]["models"]:
    for b in d["meta"]["batch_sizes"]:
      group = [r for r in d["rows"] if r["model"] == model and r["batch_size"] == b]
      best = row_of(group, is_best_transformers=True)
      gen = row_of(group, method="specjax generate")
      spec = [r for r in group if r["method"].startswith("specjax speculative")][0]
      rows.append([model, str(b), f"{f(best['tokens_per_s'], 1)} ({best['method'].split('(')[-1].rstrip(')')})",
                   f"{f(gen['tokens_per_s'], 1)} ({x(gen['ratio_vs_transformers_best'])})",
                   f"{f(spec['tokens_per_s'], 1)} ({x(spec['ratio_vs_transformers_best'])})",
                   f(spec["tokens_per_iteration"]), same(all(r["identical_to_hf_greedy"] for r in group))])
  return Table(["model", "batch", "transformers best tok/s", "specjax generate tok/s", "specjax n-gram (γ 4) tok/s",
                "tokens per target call", "every row = transformers greedy"], rows)


def _real(src: Sources, rel: str) -> Table:
  rows = []
  for r in src.json(rel)["rows"]:
    temp = r["temperature"]
    name = r["family"] + (f" (K={r['k']})" if r.get("k") else "")
    lossy = "typical" in r["family"]
    rows.append([name, str(r["batch_size"]), t(temp), str(r["gamma"]), n(r["drafter_params"]), f(r["alpha"], 3),
                 f(r["tokens_per_pass"]), f(r["c"], 3), f(r.get("c_full_vocab"), 3), f(r["v"]), f(r["ar_tok_s"], 1),
                 f(r["spec_tok_s"], 1), x(r["speedup"]), x(r["expected_speedup"]), x(r["formula_speedup"]),
                 "LOSSY" if lossy else same(r["identical_at_t0"], temp)])
  return Table(["drafter", "B", "T", "γ", "params", "α", "tokens/pass", "c", "c (full V)", "v", "AR tok/s",
                "spec tok/s", "speedup", "expected", "formula", "= AR at T=0"], rows)


@table("real_families", "every drafter family trained for SmolLM2-135M, held-out prompts "
       "(python -m specjax.bench families --target)")
def real_families(src: Sources) -> Table:
  return _real(src, "benchmarks/real/real.json")


@table("real_eagle", "SmolLM2-135M with its EAGLE-3 head, chain and dynamic tree, beside n-gram")
def real_eagle(src: Sources) -> Table:
  return _real(src, "benchmarks/real_eagle/real.json")


@table("gemma_families", "Gemma 3 270M: n-gram and Medusa heads")
def gemma_families(src: Sources) -> Table:
  return _real(src, "benchmarks/real_gemma/real.json")


@table("real_peers", "SmolLM2-135M beside transformers and llama.cpp, batch 1 (python -m specjax.bench peers)")
def real_peers(src: Sources) -> Table:
  d = src.json("benchmarks/real_peers/peers.json")
  rows = []
  for r in d["rows"]:
    method = r["method"] + (f"; {f(r['tokens_per_pass'])} tokens/pass" if r.get("tokens_per_pass") else "")
    agree = same(r["identical_to_transformers_greedy"])
    if not r["identical_to_transformers_greedy"]:
      agree += f" ({r['token_agreement']:.0%} of positions agree)"
    rows.append([method, f(r["tok_s"], 1), x(r["vs_specjax_ar"]), x(r["vs_transformers_best"]), agree])
  return Table(["method", "tok/s", "vs specjax generate", "vs transformers generate (best)", "= transformers greedy"],
               rows)


# ---------------------------------------------------------------------------------------------- docs/training.md

@table("training_demo", "the demo pair and its heads: size, training, held-out result (training.json beside the weights)")
def training_demo(src: Sources) -> Table:
  rows = []
  tgt = src.json("specjax/assets/demo/target/training.json")
  rows.append(["target (`demo/target`)", n(tgt["params"]), f"{n(tgt['train_tokens'])} tokens", minutes(tgt["wall_s"]),
               f"{f(tgt['held_out_bits_per_byte'])} bits/byte"])
  dr = src.json("specjax/assets/demo/drafter/training.json")
  kd, seq = dr["kd_stage"], dr["seqkd_stage"]
  rows.append(["draft model (`demo/drafter`): KD stage", n(kd["params"]), f"{n(kd['train_tokens'])} tokens",
               minutes(kd["wall_s"]), f"{f(kd['held_out_bits_per_byte'])} bits/byte; greedy agreement "
               f"{f(kd['held_out_after']['greedy_agreement'], 3)}, α(T=1) {f(kd['held_out_after']['alpha_t1'], 3)}"])
  after = seq["held_out_after"]
  rows.append(["draft model: sequence-level KD stage", n(seq["params"]), f"{n(seq['train_tokens'])} tokens",
               minutes(seq["wall_s"]), f"{f(seq['held_out_bits_per_byte'])} bits/byte; greedy agreement "
               f"{f(after['corpus']['greedy_agreement'], 3)} on corpus text, "
               f"{f(after['generated']['greedy_agreement'], 3)} on target-generated text"])
  med = src.json("specjax/assets/demo/medusa/config.json")
  rows.append([f"Medusa-1, {med['config']['num_heads']} heads (`demo/medusa`)", "–",
               f"{n(med['steps'])} steps on {med['train_sequences']} generated sequences", minutes(med["wall_s"]),
               "top-1 per head " + " / ".join(f"{v:.3f}" for v in med["held_out_top1_after"])
               + " (untrained copies of the LM head: " + " / ".join(f"{v:.2f}" for v in med["held_out_top1_before"]) + ")"])
  for name, label in (("mtp", "shared MTP head (`demo/mtp`)"), ("eagle", "EAGLE-3 head (`demo/eagle`)"),
                      ("dflash", "DFlash block drafter (`demo/dflash`)")):
    rec = src.json(f"specjax/assets/demo/{name}/training.json")
    acc = rec["acceptance_greedy"]
    lengths = ", ".join(f"{acc[k]['acceptance_length']:.2f}" for k in sorted(acc, key=int))
    rows.append([label, n(rec["params"]), f"{n(rec['steps'])} steps", minutes(rec["train_wall_s"]),
                 f"acceptance length at draft lengths {', '.join(sorted(acc, key=int))}: {lengths}"])
  return Table(["model", "params", "training", "wall", "held-out result"], rows)


@table("training_real", "drafters trained for SmolLM2-135M and Gemma 3 270M (training.json beside the weights)")
def training_real(src: Sources) -> Table:
  rows = []
  d = src.json("specjax/assets/smollm2/draft_lm/training.json")
  rows.append(["`smollm2/draft_lm`: draft model", d["target"], n(d["stored_params"]),
               f"{n(d['config']['out_vocab'])} ({d['subset_coverage_held_out']:.1%} of held-out tokens)",
               f"{n(d['train_target_tokens'])} generated + {n(d['teacher_labelled_tokens'])} labelled tokens",
               f"{d['steps']} x {d['batch_size']}", minutes(d["wall_s"]),
               f"greedy agreement {f(d['held_out_after']['greedy_agreement'])}"])
  for rel, label in (("smollm2/mtp", "shared MTP head"), ("smollm2/medusa", "Medusa-1 heads"),
                     ("gemma3/medusa", "Medusa-1 heads")):
    d = src.json(f"specjax/assets/{rel}/training.json")
    result = f"accept length {f(d['held_out_after']['accept_len'])}"
    heads = [d["held_out_after"][k] for k in sorted(d["held_out_after"]) if k.startswith("head")]
    if heads:
      result += "; head top-1 " + " / ".join(f"{h:.2f}" for h in heads)
    rows.append([f"`{rel}`: {label}", d["target"], n(d["params"]),
                 f"{n(d['k'])} ({d['subset_coverage']:.1%} of generated tokens)",
                 f"{n(d['train_rows'])} generated sequences, {d['crop']}-token crops",
                 f"{d['steps']} x {d['batch']}", minutes(d["wall_s"]), result])
  return Table(["shipped as", "target", "stored params", "draft vocabulary K", "data", "steps x rows", "wall",
                "held-out, teacher-forced"], rows)


@table("compile_depth", "first call (trace + compile + run) against depth, layers unrolled or scanned "
       "(python -m specjax.bench compile_depth)")
def compile_depth(src: Sources) -> Table:
  rows, notes = [], []
  for rel in ("benchmarks/compile_depth/tiny_width.json", "benchmarks/compile_depth/smollm2_shape.json"):
    d = src.json(rel)
    m = d["meta"]
    shape = f"d_model {m['d_model']}, vocab {n(m['vocab'])}"
    for r in d["rows"]:
      rows.append([shape, str(r["depth"]), r["layout"], f(r["generate_first_s"], 1), f(r["speculative_first_s"], 1),
                   f(r["generate_ms_per_token"]), f(r["speculative_ms_per_token"])])
    notes.append(f"[{rel.rsplit('/', 1)[-1]}](@/{rel}): batch {m['batch']}, {m['max_new_tokens']} new tokens")
  return Table(["target", "layers", "layout", "generate first call (s)", "speculative first call (s)",
                "generate ms/token", "speculative ms/token"], rows,
               note="Random decoders drafted by a 1-layer draft model (γ 4), every compiled program dropped before "
                    "each first call, no persistent cache; " + "; ".join(notes) + f". jax {m['jax']} on "
                    f"{m['backend']}.", data_line=False)


@table("precision", "decode speed per storage / compute / KV cache dtype (python -m specjax.bench precision)")
def precision(src: Sources) -> Table:
  d = src.json("benchmarks/precision/precision.json")
  m = d["meta"]
  rows = [[r["model"], r["setting"], f"{r['param_dtype']} / {r['dtype']} / {r['cache_dtype']}", f(r["ms_per_token"]),
           x(r["vs_float32"]), "yes" if r["same_tokens_as_float32"] else "no"] for r in d["rows"]]
  return Table(["model", "setting", "params / compute / KV cache", "ms per token", "time vs float32",
                "greedy tokens = float32's"], rows,
               note=f"Greedy generate, batch {m['batch']}, {m['max_new_tokens']} new tokens, median of {m['repeats']} "
                    f"calls alternating between the settings; jax {m['jax']} on {m['backend']}.")
