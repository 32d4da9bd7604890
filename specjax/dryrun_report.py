"""Tables for :mod:`specjax.dryrun` results: the roofline breakdown per step, predicted vs published
latency with sources, what the mesh replicates; text for the terminal, markdown + json on disk."""
from __future__ import annotations

import json
import pathlib


def _gb(x):
  return f"{x / 1e9:.3f} GB"


def _step_rows(r: dict) -> list[list[str]]:
  rows = []
  for name in ("target", "draft", "verify"):
    x = r["steps"][name]
    rows.append([name, f"{x['latency_s'] * 1e3:.3f}", f"{x['compute_s'] * 1e3:.3f}", f"{x['memory_s'] * 1e3:.3f}",
                 f"{x['collective_s'] * 1e3:.3f}", f"{x['overhead_s'] * 1e3:.3f}", str(round(x["n_total"])),
                 f"{x['flops'] / 1e9:.2f}", f"{x['param_bytes'] / 1e9:.3f}", f"{x['cache_bytes'] / 1e9:.4f}",
                 f"{x['collective_bytes'] / 1e3:.1f}", ",".join(map(str, x["compiled_depths"]))])
  return rows


_STEP_HEAD = ["step", "ms", "FLOPs ms", "HBM ms", "coll. ms", "overhead ms", "collectives", "GFLOP/dev",
              "weights GB/dev", "KV GB/dev", "coll. KB/dev", "depths"]


def _published_rows(r: dict) -> tuple[list[str], list[list[str]]]:
  rows = r.get("published_vs_predicted") or []
  variants = list(rows[0]["predicted_ms"]) if rows else []
  head = ["step", "published ms", "role", "bandwidth-only ms"] + variants + ["source"]
  body = []
  for row in rows:
    cells = [row["step"], f"{row['published_ms']:g}", row["role"], f"{row['bandwidth_only_ms']:.2f}"]
    cells += [f"{v['ms']:.2f} ({v['error']:+.0%})" for v in row["predicted_ms"].values()]
    body.append(cells + [row["source"] or ""])
  return head, body


def _summary_lines(r: dict) -> list[str]:
  lat, cal = r["latency_model"], r["calibration"]
  lines = [
      f"per device: params {_gb(r['per_device_param_bytes'])} (target {_gb(r['per_device_target_param_bytes'])}, "
      f"draft {_gb(r['per_device_draft_param_bytes'])}), KV caches {_gb(r['per_device_kv_cache_bytes'])}, "
      f"HBM {_gb(r['hbm_bytes'])} -> {'fits' if r['fits_hbm'] else 'DOES NOT FIT'}",
      f"collectives per step: target {r['collectives_per_target_step']}, draft {r['collectives_per_draft_step']}, "
      f"verify {r['collectives_per_verify_step']}",
      f"c = draft/target = {r['c']:.4f}   v = verify/target = {r['v']:.4f}   gamma = {r['gamma']}",
      f"predicted: {r['predicted_ar_ms_per_token']:.2f} ms/token autoregressive, "
      f"{r['predicted_sd_ms_per_token']:.2f} ms/token speculative, walltime-formula speedup "
      f"{r['predicted_speedup']:.2f}x at alpha {r['alpha']} (bandwidth-only model: target "
      f"{r['bandwidth_only_target_ms']:.2f} ms)",
      f"latency model: {lat['topology']} hops x {lat['hop_latency_s'] * 1e6:g} us + {lat['dispatch_s'] * 1e6:g} us "
      f"dispatch per collective + bytes / {lat['link_bandwidth'] / 1e9:g} GB/s per link; step overhead "
      f"{lat['step_overhead_s'] * 1e6:.0f} us, layer overhead {lat['layer_overhead_s'] * 1e6:.0f} us "
      f"[{lat['source']}]",
  ]
  if cal.get("fitted"):
    lines.append(f"calibrated: {cal['fitted']} = {cal['value_s'] * 1e6:.0f} us on the {cal['on']} "
                 f"({cal['published_ms']} ms, {cal['source']}); the target's published time is not used to fit")
  elif cal.get("note"):
    lines.append(f"calibration: {cal['note']}")
  for model, notes in r.get("layout", {}).items():
    for note in notes.values():
      lines.append(f"replicated ({model}): {note}")
  if r.get("alpha_implied_by_chen_greedy_xsum") is not None and r.get("paper_baseline_ms"):
    chen = r["paper"]["chen2023"]
    lines.append(f"alpha that gives Chen's {chen['speedup_greedy_xsum']}x (greedy XSum, K=4) at this c, v: "
                 f"{r['alpha_implied_by_chen_greedy_xsum']}")
  if r.get("collective_latency_us_to_match_paper_baseline") is not None:
    lines.append(f"the published baseline ({r['paper_baseline_ms']} ms) implies "
                 f"{r['collective_latency_us_to_match_paper_baseline']} us per collective, all in")
  lines.append("model: ms = max(FLOPs/peak, bytes/HBM BW) + sum over collectives (dispatch + hops x hop latency + "
               "wire bytes / link BW) + step overhead + layers x layer overhead")
  return lines


def _text_table(head, body) -> list[str]:
  widths = [max(len(str(c)) for c in col) for col in zip(head, *body)]
  fmt = lambda cells: "  " + "  ".join(str(c).rjust(w) if i else str(c).ljust(w)
                                       for i, (c, w) in enumerate(zip(cells, widths)))
  return [fmt(head)] + [fmt(b) for b in body]


def format_table(result: dict) -> str:
  """A human-readable summary of :func:`specjax.dryrun.dry_run`'s result."""
  r = result
  rows = [f"dry run{' ' + r['name'] if r.get('name') else ''}: mesh {r['mesh']} ({r['num_devices']} devices), "
          f"{r['hardware']} (compiled on {r['compile_backend']}), batch {r['batch_size']}, max_len {r['max_len']}"]
  rows += _text_table(_STEP_HEAD, _step_rows(r))
  head, body = _published_rows(r)
  if body:
    rows.append("  predicted vs published (error):")
    rows += _text_table(head, body)
  rows += ["  " + line for line in _summary_lines(r)]
  return "\n".join(rows)


def _md_table(head, body) -> list[str]:
  return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(b) + " |" for b in body]


def format_markdown(result: dict) -> str:
  r = result
  lines = [f"# Dry run: {r.get('name') or r.get('config', '')}", "",
           f"Mesh {r['mesh']} ({r['num_devices']} x {r['hardware']}), batch {r['batch_size']}, max_len "
           f"{r['max_len']}; abstract shapes compiled on {r['compile_backend']} (no weights).", "",
           "## Roofline per step", ""]
  lines += _md_table(_STEP_HEAD, _step_rows(r))
  head, body = _published_rows(r)
  if body:
    lines += ["", "## Predicted vs published", ""] + _md_table(head, body)
  lines += ["", "## Notes", ""] + [f"- {line}" for line in _summary_lines(r)]
  return "\n".join(lines) + "\n"


def save_report(result: dict, out) -> tuple[str, str]:
  """``out.md`` and ``out.json`` (``out`` without suffix)."""
  out = pathlib.Path(out)
  out.parent.mkdir(parents=True, exist_ok=True)
  md, js = out.with_suffix(".md"), out.with_suffix(".json")
  md.write_text(format_markdown(result))
  js.write_text(json.dumps(result, indent=1, default=str) + "\n")
  return str(md), str(js)
