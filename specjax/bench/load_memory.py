"""Peak host memory of loading a bfloat16 Llama HF folder: on one device, and streamed onto a mesh.

  python -m specjax.bench load_memory             # the 852,559,872-param shape (1.7 GB), 3 cases
  python -m specjax.bench load_memory --layers=2 --hidden=512 --heads=8 --kv_heads=2 --intermediate=1408 \\
      --vocab=8000 --out_dir=/tmp/load_memory --name=smoke

Writes once, and keeps in ``--folder`` (default ``$SPECJAX_CACHE/bench/load_memory/<shape>``, never
in the repository), a ``LlamaForCausalLM`` folder of random bfloat16 weights in ``--shards``
safetensors files (written shard by shard) with a word-level tokenizer. Then each case runs in a
fresh Python process on CPU (its XLA_FLAGS set before jax is imported):

* ``one_device``: ``load_pretrained(folder, param_dtype="bfloat16")`` on 1 CPU device;
* ``mesh``: the same with ``mesh=`` a ``--mesh`` mesh of fake CPU devices: each tensor goes to its
  final sharding as it is read (:mod:`specjax.placement`);
* ``shard_after``: ``specjax.shard(load_pretrained(folder, param_dtype="bfloat16"), mesh)``, the
  one-device copy first and the placed one beside it (for comparison).

Each process reads its peak RSS after importing jax and specjax, starting its devices and tracing
a toy model once (the baseline: JAX's first trace costs ~45 MB per process, whatever the model),
loads, and reports the peak raw and minus the baseline, its ratio to the files' size
(the target: at most ``--target_ratio``, on one device and on the mesh), the load time and the
bytes the devices hold (on fake CPU devices those are host memory too; above the params' size by
what the mesh replicates, e.g. KV heads fewer than the ``model`` axis). The peak is ``VmHWM``
(/proc/self/status); ``ru_maxrss`` is reported beside it but survives exec, so a child of a large
parent (this command, right after writing the folder) starts at the parent's peak. Prints the table
and writes ``<out_dir>/<name>.json`` and ``.md``.
"""
from __future__ import annotations

import json
import os
import pathlib
import platform
import subprocess
import sys

from specjax.bench import common

CASES = ("one_device", "mesh", "shard_after")
DONE = "complete.json"  # written last: a folder without it is rewritten
TOKENIZER_WORDS = 256


# ----------------------------------------------------------------------------- the folder
def llama_shapes(layers: int, hidden: int, heads: int, kv_heads: int, intermediate: int, vocab: int) -> dict:
  """``{HF tensor name: shape}`` of an untied Llama, in file order."""
  if hidden % heads:
    raise common.UsageError(f"--hidden={hidden} is not divisible by --heads={heads}")
  d = hidden // heads
  shapes = {"model.embed_tokens.weight": (vocab, hidden)}
  for i in range(layers):
    p = f"model.layers.{i}"
    shapes.update({f"{p}.self_attn.q_proj.weight": (heads * d, hidden), f"{p}.self_attn.k_proj.weight": (kv_heads * d, hidden),
                   f"{p}.self_attn.v_proj.weight": (kv_heads * d, hidden), f"{p}.self_attn.o_proj.weight": (hidden, heads * d),
                   f"{p}.mlp.gate_proj.weight": (intermediate, hidden), f"{p}.mlp.up_proj.weight": (intermediate, hidden),
                   f"{p}.mlp.down_proj.weight": (hidden, intermediate), f"{p}.input_layernorm.weight": (hidden,),
                   f"{p}.post_attention_layernorm.weight": (hidden,)})
  shapes.update({"model.norm.weight": (hidden,), "lm_head.weight": (vocab, hidden)})
  return shapes


def default_folder(shape: dict, shards: int) -> pathlib.Path:
  from specjax import loading  # pylint: disable=import-outside-toplevel
  key = "-".join(f"{k}{v}" for k, v in shape.items()) + f"-shards{shards}"
  return loading.cache_dir() / "bench" / "load_memory" / f"llama-bf16-{key}"


def _shard_groups(shapes: dict, shards: int) -> list[list[str]]:
  """Consecutive names cut into ``shards`` groups of about equal size (as transformers shards)."""
  sizes = {n: 2 * max(1, _numel(s)) for n, s in shapes.items()}
  total, groups, acc = sum(sizes.values()), [[]], 0
  for name, size in sizes.items():
    if acc >= total * len(groups) / shards and len(groups) < shards:
      groups.append([])
    groups[-1].append(name)
    acc += size
  return groups


def _numel(shape) -> int:
  out = 1
  for s in shape:
    out *= int(s)
  return out


def write_llama_folder(folder, *, layers: int, hidden: int, heads: int, kv_heads: int, intermediate: int,
                       vocab: int, shards: int = 2, seed: int = 0, verbose: bool = True) -> pathlib.Path:
  """An HF Llama folder of random bfloat16 weights (norm scales 1), unless ``folder`` holds one
  already. Each shard is built and saved alone, so writing holds one shard, not the model."""
  import ml_dtypes  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  from safetensors.numpy import save_file  # pylint: disable=import-outside-toplevel
  folder = pathlib.Path(folder)
  shapes = llama_shapes(layers, hidden, heads, kv_heads, intermediate, vocab)
  if (folder / DONE).is_file():
    return folder
  tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
  tmp.mkdir(parents=True, exist_ok=True)
  rng = np.random.default_rng(seed)
  groups = _shard_groups(shapes, shards)
  files = (["model.safetensors"] if len(groups) == 1 else
           [f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors" for i in range(len(groups))])
  for file, names in zip(files, groups):
    if verbose:
      print(f"writing {tmp / file} ({len(names)} tensors)", flush=True)
    tensors = {}
    for name in names:
      shape = shapes[name]
      x = np.ones(shape, np.float32) if len(shape) == 1 else 0.02 * rng.standard_normal(shape, np.float32)
      tensors[name] = x.astype(ml_dtypes.bfloat16)
    save_file(tensors, str(tmp / file), metadata={"format": "pt"})
    del tensors
  if len(groups) > 1:
    weight_map = {n: file for file, names in zip(files, groups) for n in names}
    common.write_json(tmp / "model.safetensors.index.json", {"metadata": {}, "weight_map": weight_map})
  common.write_json(tmp / "config.json", dict(
      architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=vocab, hidden_size=hidden,
      intermediate_size=intermediate, num_hidden_layers=layers, num_attention_heads=heads,
      num_key_value_heads=kv_heads, head_dim=hidden // heads, rms_norm_eps=1e-5, hidden_act="silu",
      rope_theta=10000.0, tie_word_embeddings=False, torch_dtype="bfloat16"))
  _write_tokenizer(tmp, min(vocab, TOKENIZER_WORDS))
  params = sum(_numel(s) for s in shapes.values())
  common.write_json(tmp / DONE, {"params": params, "seed": seed, "files": files})
  if folder.exists():  # an unfinished folder from an interrupted run
    import shutil  # pylint: disable=import-outside-toplevel
    shutil.rmtree(folder)
  tmp.rename(folder)
  return folder


def _write_tokenizer(folder: pathlib.Path, words: int) -> None:
  import tokenizers  # pylint: disable=import-outside-toplevel
  vocab = ["<unk>", "<s>", "</s>"] + [f"w{i}" for i in range(words - 3)]
  tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({w: i for i, w in enumerate(vocab)}, unk_token="<unk>"))
  tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
  tok.save(str(folder / "tokenizer.json"))
  common.write_json(folder / "tokenizer_config.json", {"bos_token": "<s>", "eos_token": "</s>"})


def weights_bytes(folder) -> int:
  return sum(p.stat().st_size for p in pathlib.Path(folder).glob("*.safetensors"))


# ----------------------------------------------------------------------------- one case, in a child process
def _maxrss_bytes() -> int:
  import resource  # pylint: disable=import-outside-toplevel
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def peak_rss_bytes() -> int:
  """This process's peak RSS: ``VmHWM`` of /proc/self/status where there is one, else ``ru_maxrss``.
  ``ru_maxrss`` survives exec: a child spawned by a large parent starts at the parent's peak."""
  try:
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
      if line.startswith("VmHWM:"):
        return int(line.split()[1]) * 1024  # kB
  except OSError:
    pass
  return _maxrss_bytes()


def child(folder: str, case: str, mesh_shape: str, scan_layers: str = "False") -> None:
  """Runs in a fresh process: baseline, one load, the measurements as a ``RESULT {json}`` line."""
  import time  # pylint: disable=import-outside-toplevel
  import jax  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  import specjax  # pylint: disable=import-outside-toplevel
  from specjax import hf_import, precision, sharding  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
  from specjax.data import hf_tokenizer  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
  from specjax.models import bundle, decoder  # pylint: disable=import-outside-toplevel
  mesh = None if case == "one_device" else sharding.make_mesh(mesh_shape)
  jax.block_until_ready([jax.device_put(np.zeros(8, np.float32), d) for d in jax.devices()])  # devices up
  # JAX's first trace costs ~45 MB once per process, whatever the model: the baseline includes it
  bundle.abstract_params(decoder.Decoder(decoder.DecoderConfig(vocab_size=8, d_model=8, num_layers=1, num_heads=1,
                                                               num_kv_heads=1, head_dim=8, mlp_dim=8)))
  baseline, baseline_maxrss = peak_rss_bytes(), _maxrss_bytes()
  start = time.perf_counter()
  model, _ = specjax.load_pretrained(folder, param_dtype="bfloat16", verbose=False,
                                     mesh=mesh if case == "mesh" else None, scan_layers=scan_layers == "True")
  if case == "shard_after":
    model = specjax.shard(model, mesh)
  jax.block_until_ready(model.params)
  seconds = time.perf_counter() - start
  peak, peak_maxrss = peak_rss_bytes(), _maxrss_bytes()
  leaves = jax.tree_util.tree_leaves(model.params)
  out = dict(case=case, devices=jax.device_count(), mesh=mesh_shape if mesh is not None else None,
             scan_layers=model.config.scanned,
             baseline_bytes=baseline, peak_bytes=peak, ru_maxrss_baseline_bytes=baseline_maxrss,
             ru_maxrss_peak_bytes=peak_maxrss, load_seconds=round(seconds, 2),
             num_params=int(sum(x.size for x in leaves)), param_bytes=int(precision.params_nbytes(model.params)),
             device_bytes=int(sum(s.data.nbytes for x in leaves for s in x.addressable_shards)))
  if mesh is not None:
    out["already_on_mesh"] = sharding.ensure_sharded(model, mesh) is model
    report = sharding.layout_report(model, mesh)
    out["layout"] = sharding.format_layout_report(report)
    out["repeats"] = "; ".join(f"{e['field']}={e['size']} split {e['split']} ways, each part on "
                               f"{e['axis_size'] // e['split']} devices" for e in report.values())
  print("RESULT " + json.dumps(out), flush=True)


def measure(folder, case: str, mesh_shape: str = "1x8", timeout: float = 1800, scan_layers: bool = False) -> dict:
  """One case in a fresh process (its own XLA_FLAGS), with the file size and the ratios added."""
  from specjax import sharding  # pylint: disable=import-outside-toplevel
  if case not in CASES:
    raise common.UsageError(f"case {case!r}; expected one of {', '.join(CASES)}")
  devices = 1 if case == "one_device" else _numel(sharding.parse_mesh_shape(mesh_shape).values())
  env = sharding.force_cpu_devices_env(devices)
  env["JAX_PLATFORMS"] = "cpu"  # host memory is what is measured, whatever accelerator is present
  code = "import sys; from specjax.bench.load_memory import child; child(*sys.argv[1:])"
  proc = subprocess.run([sys.executable, "-c", code, str(folder), case, mesh_shape, str(bool(scan_layers))], env=env,
                        cwd=str(common.REPO),
                        capture_output=True, text=True, timeout=timeout, check=False)
  lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
  if proc.returncode or not lines:
    raise RuntimeError(f"load_memory case {case!r} failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
  row = json.loads(lines[-1][len("RESULT "):])
  file_bytes = weights_bytes(folder)
  row["file_bytes"] = file_bytes
  row["peak_minus_baseline_bytes"] = row["peak_bytes"] - row["baseline_bytes"]
  row["ratio"] = round(row["peak_minus_baseline_bytes"] / file_bytes, 3)
  row["raw_ratio"] = round(row["peak_bytes"] / file_bytes, 3)
  row["replicated_bytes"] = row["device_bytes"] - row["param_bytes"]
  return row


# ----------------------------------------------------------------------------- the command
def _gb(b) -> str:
  return f"{b / 1e9:.2f}"


CASE_LABELS = {"one_device": "`load_pretrained(folder)`, one device",
               "mesh": "`load_pretrained(folder, mesh=mesh)`",
               "shard_after": "`shard(load_pretrained(folder), mesh)`, for comparison"}


def table_cells(rows: list, target: float) -> tuple[list, list]:
  """Header and cell texts of the results table (also rendered into docs by ``tools/tables.py``)."""
  head = ["load", "devices", "params / held by the devices (GB)", "repeated on the mesh", "peak RSS (GB)",
          "baseline (GB)", "peak - baseline (GB)", "/ file size", f"<= {target}x", "load (s)"]
  cells = []
  for r in rows:
    ok = "yes" if r["ratio"] <= target else "no"
    label = CASE_LABELS[r["case"]] + (", layers scanned" if r.get("scan_layers") else "")
    cells.append([label, f"{r['devices']}" + (f" ({r['mesh']})" if r["mesh"] else ""),
                  f"{_gb(r['param_bytes'])} / {_gb(r['device_bytes'])}", r.get("repeats") or "–",
                  _gb(r["peak_bytes"]), _gb(r["baseline_bytes"]), _gb(r["peak_minus_baseline_bytes"]),
                  f"{r['ratio']:.2f}x", ok, f"{r['load_seconds']:.1f}"])
  return head, cells


def markdown(rows, target: float) -> str:
  head, cells = table_cells(rows, target)
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  lines += ["| " + " | ".join(c) + " |" for c in cells]
  return "\n".join(lines)


def _flags():
  from absl import flags  # pylint: disable=import-outside-toplevel
  fv = flags.FlagValues()
  flags.DEFINE_integer("layers", 16, "num_hidden_layers", flag_values=fv)
  flags.DEFINE_integer("hidden", 2048, "hidden_size", flag_values=fv)
  flags.DEFINE_integer("heads", 16, "num_attention_heads", flag_values=fv)
  flags.DEFINE_integer("kv_heads", 4, "num_key_value_heads", flag_values=fv)
  flags.DEFINE_integer("intermediate", 5632, "intermediate_size", flag_values=fv)
  flags.DEFINE_integer("vocab", 32000, "vocab_size (untied embedding and LM head)", flag_values=fv)
  flags.DEFINE_integer("shards", 2, "safetensors files", flag_values=fv)
  flags.DEFINE_string("folder", "", "where the HF folder is written once and kept (default: under the specjax "
                      "cache dir, named by the shape)", flag_values=fv)
  flags.DEFINE_list("cases", ",".join(CASES), f"some of {', '.join(CASES)}", flag_values=fv)
  flags.DEFINE_string("mesh", "1x8", "data x model mesh of fake CPU devices for the mesh cases", flag_values=fv)
  flags.DEFINE_boolean("scan_layers", False, "load as a scanned decoder (params stacked [L, ...]; the default "
                       "on accelerators, not on CPU)", flag_values=fv)
  flags.DEFINE_float("target_ratio", 1.3, "the bound on (peak - baseline) / file size", flag_values=fv)
  flags.DEFINE_string("out_dir", str(common.REPO / "benchmarks" / "load_memory"), "where <name>.json/.md go",
                      flag_values=fv)
  flags.DEFINE_string("name", "load_memory", "output file stem", flag_values=fv)
  return fv


def _run(fv) -> int:
  import jax  # pylint: disable=import-outside-toplevel
  cases = common.parse_list(fv.cases, str, "cases", lambda c: c in CASES)
  for name in ("layers", "hidden", "heads", "kv_heads", "intermediate", "vocab", "shards"):
    if fv[name].value < 1:
      raise common.UsageError(f"--{name} must be >= 1, got {fv[name].value}")
  shape = dict(L=fv.layers, E=fv.hidden, H=fv.heads, K=fv.kv_heads, F=fv.intermediate, V=fv.vocab)
  folder = pathlib.Path(fv.folder).expanduser() if fv.folder else default_folder(shape, fv.shards)
  write_llama_folder(folder, layers=fv.layers, hidden=fv.hidden, heads=fv.heads, kv_heads=fv.kv_heads,
                     intermediate=fv.intermediate, vocab=fv.vocab, shards=fv.shards)
  rows = []
  for case in cases:
    print(f"{case}: loading {folder} in a fresh process", flush=True)
    row = measure(folder, case, fv.mesh, scan_layers=fv.scan_layers)
    print(f"  peak {_gb(row['peak_bytes'])} GB, baseline {_gb(row['baseline_bytes'])} GB, "
          f"{row['ratio']:.2f}x the files' {_gb(row['file_bytes'])} GB, {row['load_seconds']:.1f} s", flush=True)
    rows.append(row)
  meta = dict(shape=shape, shards=fv.shards, params=json.loads((folder / DONE).read_text())["params"],
              file_bytes=weights_bytes(folder),
              mesh=fv.mesh, scan_layers=fv.scan_layers, target_ratio=fv.target_ratio, jax=jax.__version__, machine=platform.machine(),
              layout=next((r["layout"] for r in rows if r.get("layout")), ""))
  table = markdown(rows, fv.target_ratio)
  header = (f"Loading a {meta['params']:,}-param bfloat16 Llama HF folder ({_gb(rows[0]['file_bytes'])} GB in "
            f"{fv.shards} safetensors files) as bfloat16 params on CPU, each case in a fresh process; peak RSS "
            f"(VmHWM) minus the process's own baseline. Mesh {fv.mesh}: {meta['layout'] or 'every dim splits'}.")
  print("\n" + header + "\n\n" + table)
  out = common.out_dir(fv.out_dir)
  (out / f"{fv.name}.md").write_text(header + "\n\n" + table + "\n")
  common.write_json(out / f"{fv.name}.json", {"meta": meta, "rows": rows}, indent=1)
  return 0


def main(argv) -> int:
  fv = _flags()
  return common.run_task(fv, argv, __doc__, "load_memory", lambda: _run(fv))
