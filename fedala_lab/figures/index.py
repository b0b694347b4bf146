"""The figures' index as text: what ``fedala-lab figures`` writes into README.md next to the figures.

Rendering only: the driver (fedala_lab/reproduce/) keeps ``index.json`` (one entry per figure: files,
command, configs, runs, seconds, findings) and asks for its README here.
"""

from __future__ import annotations

import json

from ..config import RunConfig, setting_names
from ..data.config import dataset_label


def describe_configs(cfgs: list[RunConfig], base: RunConfig, base_name: str) -> str:
    """``preset("teach") with partition=pathological; algo ∈ {fedavg, fedala}; seed ∈ {0, 1}`` — the
    fields in which ``cfgs`` differ from ``base``, with the values they take."""
    def flat(cfg):
        d = cfg.to_dict()
        data = d.pop("data")
        out = {k: v for k, v in d.items() if k not in ("device", "checkpoint_every", "keep_states")}
        # every hyper-parameter by its value (a default one included), so methods differ by their algo alone
        out.update({k: getattr(cfg, k) for k in setting_names() if k not in out and k not in data
                    and k != "data_seed"})
        # data fields by their replace() names (the partition seed is data_seed, apart from the run seed); a
        # dataset by its name without a folder (a machine's path says nothing to a reader elsewhere)
        out.update({("data_seed" if k == "seed" else k): v for k, v in data.items()
                    if k not in ("root", "download", "content", "dataset")})
        out["dataset"] = cfg.data.short_name
        return out

    b = flat(base)
    flats = [flat(c) for c in cfgs]
    parts = []
    for k in b:
        vals = list(dict.fromkeys(json.dumps(f.get(k), default=str) for f in flats))
        if vals == [json.dumps(b[k], default=str)]:
            continue
        shown = [json.loads(v) for v in vals]
        fmt = [dataset_label(v) if k == "dataset" else str(v) for v in shown]
        parts.append(f"{k}={fmt[0]}" if len(fmt) == 1 else f"{k} ∈ {{{', '.join(fmt)}}}")
    return f'preset("{base_name}")' + (" with " + "; ".join(parts) if parts else "")


def render_readme(index: dict, order: list[str] | None = None) -> str:
    """figures/README.md from the index: one section per figure (in ``order``, then the others), its files,
    command, configs, time and findings."""
    figs = index["figures"]
    env = index.get("environment", {})
    order = [k for k in (order or []) if k in figs] + [k for k in figs if k not in (order or [])]
    total = sum(f["seconds"] for f in figs.values())
    lines = [
        "# Figures and tables",
        "",
        "Regenerated from recorded runs by `fedala-lab figures` (`fedala_lab/reproduce/paper.py` maps each",
        "paper figure or table to its runs and its Display). Every number below is read off the runs. Runs",
        "come from the run store (`$FEDALA_LAB_RUNS` or `./runs`): a second call only redraws. A run that",
        "equals a stored one through some round starts from that run's kept state (docs/design.md#run-store).",
        "",
        f"Preset: `{index.get('preset')}`. Machine: {env.get('platform', '?')}, {env.get('cpus', '?')} CPUs"
        + (f", GPU {env['cuda']}" if env.get("cuda") else ", no GPU")
        + f", torch {env.get('torch', '?')}, {env.get('date', '')}; 1-minute load average at the end "
        f"{env.get('load_1min_at_end')} (other work on the machine inflates the times).",
        (f"Total time of the figures listed: {total:.0f} s (each figure's time includes the runs it "
         "computed; runs shared between figures are computed by the first that needs them)."),
        "",
    ]
    if index.get("plan"):
        lines += ["What the preset runs:", "", *[f"- {x}" for x in index["plan"]], ""]
    for note in index.get("notes", []):
        lines += [f"> Note: {note}", ""]
    lines += ["PNG and PDF files are both kept: the PDFs are vector versions for papers and slides, a few tens of",
              "KB each, written without a creation date so they change only when their content does. Tables",
              "also come as Markdown, LaTeX (booktabs) and CSV.", ""]
    lines += ["| file(s) | reproduces | seconds | runs computed / used |", "|---|---|---:|---:|"]
    for k in order:
        f = figs[k]
        shown = ", ".join(f"[`{p}`]({p})" for p in f["files"] if p.endswith((".png", ".md")))
        lines.append(f"| {shown} | {f['paper']} | {f['seconds']:.1f} | {f['runs_computed']} / {f['runs_total']} |")
    lines.append("")
    for k in order:
        f = figs[k]
        png = [p for p in f["files"] if p.endswith(".png")]
        lines += [f"## {f['paper']}: {f['title']}", ""]
        if png:
            lines += [f"![{f['paper']}]({png[0]})", ""]
        lines += [f"- files: {', '.join(f'`{p}`' for p in f['files'])}",
                  f"- command: `{f['only_command']}` (made by `{f['command']}`, preset `{f['preset']}`)",
                  f"- configs: `{f['configs']}`",
                  f"- time: {f['seconds']:.1f} s, {f['runs_computed']} of {f['runs_total']} runs computed"
                  + (f", made on {f['made']}" if f.get("made") else "")]
        if f.get("runs_branched"):
            lines.append("- started from a stored run's kept state instead of round 1: "
                         + "; ".join(f"`{b}`" for b in f["runs_branched"]))
        for x in [*f["findings"], *f.get("changes", [])]:
            lines.append(x if x.startswith("  - ") else f"- {x}")
        lines.append("")
    return "\n".join(lines)
