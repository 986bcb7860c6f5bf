"""The results as one Markdown table: figure, value, yardstick, and the two compared."""

from __future__ import annotations

from benchmarks.common import MiB

Row = tuple[str, str, str, str, str]  # section, figure, value, yardstick, vs yardstick
HEADER = ("section", "figure", "value", "yardstick", "vs yardstick")


def _num(x: object, digits: int = 2) -> str:
    if isinstance(x, str):
        return _short(x)
    x = float(x)
    if abs(x) >= 10_000:
        return f"{x:,.0f}"
    if abs(x) >= 100:
        return f"{x:.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.{digits}f}"


def _pct(x: object) -> str:
    return _short(x) if isinstance(x, str) else f"{float(x):.0%}"


def _size(n: int) -> str:
    return f"{n // MiB} MiB" if n >= MiB else f"{n // 1024} KiB"


def _missing(section: str, figure: str, reason: object) -> Row:
    return (section, figure, _short(reason), "", "")


def _short(reason: object, limit: int = 90) -> str:
    """A reason cut to fit a cell (the JSON keeps it whole)."""
    text = str(reason)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def collectives(c: dict | str) -> list[Row]:
    s = "collectives"
    if isinstance(c, str):
        return [_missing(s, "all-reduce busbw on gloo", c)]
    rows: list[Row] = []
    for n, run in c["world_sizes"].items():
        if isinstance(run, str):
            rows.append(_missing(s, f"all-reduce busbw, {n} ranks", run))
            continue
        tcp = run["tcp_loopback_GBps"]
        low, high = run["tcp_loopback_range_GBps"]
        rows.append((s, f"TCP loopback, one stream between 2 processes (before the {n}-rank sweeps)",
                     f"{_num(tcp)} GB/s", f"range {_num(low)}..{_num(high)} GB/s",
                     "the wire under gloo"))
        for r in run["rows"]:
            rows.append((
                s, f"busbw {n} ranks, {_size(r['size_bytes'])}: ring · pipelined · naive · built-in",
                f"{_num(r['ring_busbw_GBps'])} · {_num(r['ring_pipelined_busbw_GBps'])} · "
                f"{_num(r['naive_busbw_GBps'])} · {_num(r['all_reduce_busbw_GBps'])} GB/s",
                f"dist.all_reduce; TCP {_num(tcp)} GB/s",
                f"ring/built-in {_num(r['ring_vs_all_reduce'])}x, pipelined/built-in "
                f"{_num(r['pipelined_vs_all_reduce'])}x; of TCP {_pct(r['ring_of_tcp'])} · "
                f"{_pct(r['ring_pipelined_of_tcp'])} · {_pct(r['naive_of_tcp'])} · {_pct(r['all_reduce_of_tcp'])}"))
        fits = run["fit"]
        alpha = " · ".join(_num(f["alpha_us"], 0) if isinstance(f, dict) else f
                           for f in fits.values())
        bw = " · ".join(_num(f["bandwidth_GBps"]) if isinstance(f, dict) else f
                        for f in fits.values())
        share = " · ".join(_pct(f["bandwidth_of_tcp"]) if isinstance(f, dict) else "-"
                           for f in fits.values())
        error = " · ".join(_pct(f["rms_rel_err"]) if isinstance(f, dict) else "-"
                           for f in fits.values())
        sizes = run["fit_sizes_bytes"]
        rows.append((s, f"alpha-beta fit {n} ranks ({_size(sizes[0])}..{_size(sizes[-1])}): "
                        "ring · pipelined · naive · built-in",
                     f"alpha {alpha} us; B {bw} GB/s", f"TCP {_num(tcp)} GB/s; rms error {error}",
                     f"B of TCP {share}"))
    return rows


def labs(lab: dict) -> list[Row]:
    s = "labs"
    rows: list[Row] = []
    launch = lab["launch"]
    if isinstance(launch, str):
        rows.append(_missing(s, "launch overhead, 4-rank lab", launch))
    else:
        rows.append((s, f"launch overhead, {launch['world_size']}-rank ring lab "
                        f"({launch['launcher']}), wall - collective",
                     f"{_num(launch['overhead_s'], 3)} s",
                     f"wall {_num(launch['wall_s'], 3)} s; collective "
                     f"{_num(launch['collective_s'] * 1e3)} ms",
                     f"{_pct(launch['overhead_fraction'])} of wall"))
        rows.append((s, "request to first progress event, in-process run_lab",
                     f"{_num(launch['first_progress_in_process_s'] * 1e3)} ms", "", ""))
    first = lab["first_event"]
    if isinstance(first, str):
        rows.append(_missing(s, "request to first progress event", first))
    else:
        rows.append((s, "request to first progress event, `python -m labs ring` (as the app)",
                     f"{_num(first['first_progress_cli_s'])} s",
                     f"`python -c 'import torch'` {_num(first['python_import_torch_s'])} s",
                     f"{_num(first['first_progress_cli_s'] / first['python_import_torch_s'])}x"))
    ddp = lab["ddp"]
    if isinstance(ddp, str):
        rows.append(_missing(s, "DDP scaling and overlap", ddp))
    else:
        sc = ddp["scaling"]
        rows.append((s, "DDP weak-scaling efficiency, " + " · ".join(sc) + " ranks",
                     " · ".join(_pct(v["efficiency"]) for v in sc.values()), "linear: 100%",
                     "samples/s " + " · ".join(_num(v["samples_per_s"], 0) for v in sc.values())))
        rows.append((s, f"DDP step (buckets during backward) vs naive per-tensor sync "
                        f"({ddp['breakdown_world_size']} ranks)",
                     f"{_num(ddp['ddp_step_ms'])} ms", f"naive {_num(ddp['naive_step_ms'])} ms",
                     f"{_num(ddp['ddp_vs_naive_step_ratio'])}x; bucketing saves "
                     f"{_num(ddp.get('bucketing_saved_ms', 0.0))} ms, overlap hides "
                     f"{_num(ddp.get('overlap_hidden_ms', 0.0))} ms"))
    tl = lab.get("timeline")
    if isinstance(tl, str):
        rows.append(_missing(s, "DDP timeline: overlap with backward", tl))
    elif tl:
        naive = tl["variants"]["naive"]
        for name, v in tl["variants"].items():
            if name == "naive":
                continue
            o, e = v["overlap"], v["exposed_comm_ms"]
            rows.append((s, f"DDP timeline, {name} ({v['allreduce_calls']} buckets): comm overlapping backward, "
                            f"median of {tl['runs']} runs (min..max)",
                         f"{_pct(o['median'])}", f"naive {_pct(naive['overlap']['median'])}",
                         f"{_pct(o['min'])}..{_pct(o['max'])}; exposed {_num(e['median'])} ms "
                         f"({_num(e['min'])}..{_num(e['max'])}), naive {_num(naive['exposed_comm_ms']['median'])} ms"))
        if "load_1min" in tl:
            rows.append((s, f"DDP timeline runs with their own step model fit, of {tl['runs']}",
                         str(tl.get("fitted", 0)), "every run",
                         f"load average {_num(tl['load_1min']['min'], 1)}..{_num(tl['load_1min']['max'], 1)}; "
                         f"wall {_num(tl['wall_s']['min'])}..{_num(tl['wall_s']['max'])} s"))
        ex = tl.get("exercise")
        if isinstance(ex, str):
            rows.append(_missing(s, "bucketed-overlap traced case: overlap", ex))
        elif ex:
            for who in ("learner", "ddp"):
                o = ex[who]
                rows.append((s, f"bucketed-overlap {ex['case']} ({ex['hidden']} wide, {ex['batch']} samples per "
                                f"rank): {'the reference Bucketer' if who == 'learner' else 'torch DDP'}'s overlap, "
                                f"median of {ex['runs']} gradings (min..max)",
                             _pct(o["median"]), "", f"{_pct(o['min'])}..{_pct(o['max'])}; load average "
                             f"{_num(ex['load_1min']['min'], 1)}..{_num(ex['load_1min']['max'], 1)}"))
    sh = lab.get("sharding")
    if isinstance(sh, str):
        rows.append(_missing(s, "sharding lab", sh))
    elif sh:
        err = sh["ledger_error"]
        rows.append((s, f"sharding lab, {sh['world_size']} ranks, {sh['parameters']} parameters: wall time",
                     f"{_num(sh['wall_s'])} s", f"timed work {_num(sh['work_s'])} s",
                     f"ZeRO-3 sends {_num(sh['zero3_vs_ddp_wire'])}x DDP's bytes"))
        rows.append((s, "sharding ledger, measured vs formula (largest gap): " + " · ".join(err),
                     " · ".join(f"{v:.2%}" for v in err.values()), "within 10%",
                     f"max |w - w_ddp| {sh['max_abs_diff_vs_ddp']:.1e}"))
    c = lab.get("compression")
    if isinstance(c, str):
        rows.append(_missing(s, "compression lab", c))
    elif c:
        rows.append((s, f"compression lab, {c['world_size']} ranks, every strategy x {c['seeds']} seeds x "
                        f"{c['steps']} steps: wall time", f"{_num(c['wall_s'])} s", f"timed work {_num(c['work_s'])} s",
                     f"bytes within {c['max_formula_error']:.2%} of the formulas"))
        rows.append((s, "compression: bytes saved per step against fp32 (final-loss gap to fp32)",
                     " · ".join(f"{n} {v:.1%}" for n, v in c["saved"].items()),
                     " · ".join(f"{n} {g:+.3f}" for n, g in c["gap"].items()),
                     "median step " + " · ".join(f"{n} {_num(ms)} ms" for n, ms in c["step_ms"].items())))
    tp = lab.get("topology")
    if isinstance(tp, str):
        rows.append(_missing(s, "topology lab", tp))
    elif tp:
        where = (f"2 namespaces x 2 ranks, {_num(tp['rate_mbit'])} Mbit/s link" if tp["fabric"] == "namespaces"
                 else f"loopback only ({tp['unavailable']})")
        for z in tp["sizes"]:
            predicted = "" if z["ratio_predicted"] is None else f"; predicted here {_num(z['ratio_predicted'])}x"
            rows.append((s, f"topology lab, {where}, {_size(z['size'])}: flat ring · hierarchical, median of "
                            f"{tp['repeats']} (min..max)",
                         f"{_num(z['flat_ms'])} · {_num(z['hierarchical_ms'])} ms",
                         f"bytes ratio {_num(z['ratio_bytes'] or 0)}x{predicted}",
                         f"measured {_num(z['ratio_measured'])}x ({_num(z['flat_ms_range'][0])}..{_num(z['flat_ms_range'][1])}"
                         f" · {_num(z['hierarchical_ms_range'][0])}..{_num(z['hierarchical_ms_range'][1])} ms); "
                         f"H100 x IB {_num(z['ratio_h100_ib'])}x"))
        if tp["bytes_error"] is not None:
            link = tp["link_mb_per_step"]
            rows.append((s, "topology lab: link payload vs the ranks' messages (largest gap); FSDP · HSDP MB per step "
                            "over the link", f"{tp['bytes_error']:.2%}", "within 2%",
                         f"{_num(link.get('fsdp') or 0)} · {_num(link.get('hsdp') or 0)} MB"))
    rows += _straggler_rows(s, lab.get("straggler"))
    q = lab.get("queue")
    if isinstance(q, str):
        rows.append(_missing(s, "lab through the job queue", q))
    elif q:
        what = f"ring lab ({q['world_size']} ranks, {_size(q['size'])}) through the queue"
        for n, r in q["workers"].items():
            rows.append((s, f"{what}, {n} worker(s): one alone, end to end",
                         f"{_num(r['single_end_to_end_s'])} s",
                         f"bare `python -m labs` {_num(q['bare_cli_s'])} s",
                         f"{r['single_end_to_end_s'] - q['bare_cli_s']:+.2f} s"))
            rows.append((s, f"{what}, {n} worker(s): {q['burst']} at once, wait · end to end (medians)",
                         f"{_num(r['burst_queue_wait_s'])} s · {_num(r['burst_end_to_end_s'])} s",
                         f"all {q['burst']} done in {_num(r['burst_total_s'])} s", ""))
    warm = lab.get("warm")
    if isinstance(warm, str):
        rows.append(_missing(s, "Run to result, warm worker", warm))
    elif warm:
        rows.append((s, f"Run to result, warm worker: default ring lab ({warm['world_size']} ranks) through "
                        f"the queue, median of {warm['runs']}",
                     f"{_num(warm['run_to_result_s'])} s",
                     f"`python -c 'import torch'` {_num(warm['python_import_torch_s'])} s",
                     f"{_num(warm['run_to_result_s'] / warm['python_import_torch_s'])}x; "
                     f"first progress event p95 {_num(warm['first_progress_p95_s'])} s"))
    sb = lab.get("sandbox")
    if isinstance(sb, str):
        rows.append(_missing(s, "exercise sandbox (bwrap) overhead", sb))
    elif sb:
        rows.append((s, f"exercise sandbox: {sb['program']}, bwrap, p50 · p95 of {sb['runs']}",
                     f"{_num(sb['bwrap_p50_s'])} s · {_num(sb['bwrap_p95_s'])} s",
                     f"no sandbox {_num(sb['none_p50_s'])} s · {_num(sb['none_p95_s'])} s",
                     f"{sb['overhead_p50_s']:+.2f} s (p50)"))
    return rows


def _straggler_rows(s: str, st: dict | str | None) -> list[Row]:
    """The straggler lab's slowed step against its model, per mechanism (benchmarks.resilience_costs)."""
    if isinstance(st, str):
        return [_missing(s, "straggler lab: slowed step vs model", st)]
    rows: list[Row] = []
    for method, m in (st or {}).get("methods", {}).items():
        e, a = m["model_error"], m["achieved"]
        rows.append((s, f"straggler lab ({method}, {st['world_size']} ranks, rank 1 at 1/{st['factor']} core): "
                        f"slowed step vs model, median of {st['runs']} runs (min..max)",
                     f"{e['median']:+.1%}", f"within {st['target']:.0%}: {'yes' if m['within_target'] else 'no'}",
                     f"{e['min']:+.1%}..{e['max']:+.1%}; step {_num(m['step_ms']['median'])} ms, model "
                     f"{_num(m['model_ms']['median'])} ms; slowdown {_num(a['median'])}x"))
        rows.append((s, f"straggler lab ({method}): throughput kept slowed · local SGD won back · loss paid",
                     f"{_pct(m['kept']['median'])} · {m['recovered']['median']:+.0%} · {m['loss_paid']['median']:+.4f}",
                     "", f"won back {m['recovered']['min']:+.0%}..{m['recovered']['max']:+.0%}; same weights "
                         f"slowed or not: {'yes' if m['same_weights'] else 'NO'}"))
    return rows


def exercises(e: dict | str) -> list[Row]:
    """Per exercise: Run to report through the queue, and the grading alone in bwrap beside none."""
    s = "exercises"
    if isinstance(e, str):
        return [_missing(s, "coding exercises, Run to report", e)]
    rows: list[Row] = []
    target = e["target"]
    for ex, parts in e["exercises"].items():
        q, d = parts["queue"], parts["direct"]
        direct = isinstance(d, dict)
        if isinstance(q, str):
            rows.append(_missing(s, f"{ex}: Run to report through the queue", q))
        else:
            what = f"{ex} ({q['cases']} cases): Run to report, queue + 1 worker, warm grader, p50 · p95 of {q['runs']}"
            value = f"{_num(q['queue_p50_s'])} s · {_num(q['queue_p95_s'])} s"
            if ex in target.get("exercises", ()):
                rows.append((s, what, value, f"target: p95 under {target['p95_s']:g} s",
                             f"p95 {_pct(q['queue_p95_s'] / target['p95_s'])} of the target"))
            else:
                rows.append((s, what, value,
                             f"graded alone (bwrap) p50 {_num(d['bwrap_p50_s'])} s" if direct else
                             f"grading in the worker p50 {_num(q['grading_p50_s'])} s",
                             f"{q['queue_p50_s'] - d['bwrap_p50_s']:+.2f} s (p50)" if direct else ""))
        if direct:
            rows.append((s, f"{ex}: graded alone (grader.grade), bwrap, p50 · p95 of {d['runs']}",
                         f"{_num(d['bwrap_p50_s'])} s · {_num(d['bwrap_p95_s'])} s",
                         f"no sandbox {_num(d['none_p50_s'])} s · {_num(d['none_p95_s'])} s",
                         f"{d['overhead_p50_s']:+.2f} s (p50)"))
        elif d.startswith("not available"):
            rows.append(_missing(s, f"{ex}: graded alone, bwrap and none", d))
    return rows


def platform(p: dict) -> list[Row]:
    s = "platform"
    rows: list[Row] = []
    q = p["quiz"]
    if isinstance(q, str):
        rows.append(_missing(s, "quiz grading per attempt", q))
    else:
        rows.append((s, f"quiz attempt: draw + grade {q['questions']} answers, engine",
                     f"{_num(q['engine_ms'])} ms", "", ""))
        rows.append((s, "quiz attempt through the SQLite store (start, answers, finish)",
                     f"{_num(q['store_sqlite_ms'])} ms", f"engine {_num(q['engine_ms'])} ms",
                     f"{_num(q['store_vs_engine'])}x"))
    c = p["certificate"]
    if isinstance(c, str):
        rows.append(_missing(s, "certificate issuance per PDF", c))
    else:
        rows.append((s, "certificate per PDF: issue (sign + store) + render",
                     f"{_num(c['total_ms'])} ms",
                     f"sign {_num(c['sign_ms'])} ms; QR {_num(c['qr_ms'])} ms; "
                     f"render {_num(c['render_ms'])} ms",
                     f"render {_pct(c['render_ms'] / c['total_ms'])} of it"))
        rows.append((s, "certificate PDF size en · zh · nl",
                     " · ".join(_num(v, 1) for v in c["pdf_kib"].values()) + " KiB", "", ""))
        for script, sc in c.get("per_script", {}).items():
            rows.append((s, f"certificate, name in {script}: issue + render · PDF size",
                         f"{_num(sc['total_ms'])} ms · {_num(sc['pdf_kib'], 1)} KiB",
                         "target 50 ms · 150 KiB",
                         f"{_pct(sc['total_ms'] / 50)} · {_pct(sc['pdf_kib'] / 150)}"))
    v = p["verification"]
    if isinstance(v, str):
        rows.append(_missing(s, "verification lookups per second", v))
    else:
        rows.append((s, f"verification lookups/s, {v['certificates']:,} certificates in SQLite, first look-ups",
                     f"{_num(v['lookups_per_s'], 0)}/s ({_pct(v['valid_fraction'])} valid)",
                     f"raw SELECT {_num(v['raw_select_per_s'], 0)}/s; "
                     f"Ed25519 verify {_num(v['ed25519_verify_per_s'], 0)}/s",
                     f"{_pct(v['lookups_per_s'] / v['raw_select_per_s'])} of SELECT; target 5,000/s"))
        if "repeat_lookups_per_s" in v:
            rows.append((s, "verification lookups/s, the same IDs again",
                         f"{_num(v['repeat_lookups_per_s'], 0)}/s",
                         f"raw SELECT {_num(v['raw_select_per_s'], 0)}/s",
                         f"{_pct(v['repeat_lookups_per_s'] / v['raw_select_per_s'])} of SELECT; "
                         "target 5,000/s"))
        if "old_row_lookups_per_s" in v:
            rows.append((s, "verification lookups/s, first look-ups of rows without the check (old rows)",
                         f"{_num(v['old_row_lookups_per_s'], 0)}/s",
                         f"Ed25519 verify {_num(v['ed25519_verify_per_s'], 0)}/s",
                         f"{_pct(v['old_row_lookups_per_s'] / v['ed25519_verify_per_s'])} of Ed25519"))
    rows.extend(_arrival_rows(p.get("arrival", "not measured")))
    pg = p["pages"]
    if isinstance(pg, str):
        rows.append(_missing(s, "page render", pg))
    else:
        empty = pg["empty_script_ms"]
        rows.append((s, "new session: first run of the app (home)",
                     f"{_num(pg['new_session_ms'])} ms", "", ""))
        for page, langs in pg["render_ms"].items():
            times = [t for t in langs.values() if not isinstance(t, str)]
            if not times:
                rows.append(_missing(s, f"render {page}", next(iter(langs.values()))))
                continue
            ratio = f"{_num(max(times) / empty)}x (slowest)" if times else ""
            rows.append((s, f"render {page}, en · zh · nl",
                         " · ".join(_num(t) for t in langs.values()) + " ms",
                         f"empty script {_num(empty)} ms", ratio))
    ld = p["load"]
    if isinstance(ld, str):
        rows.append(_missing(s, "concurrent learners", ld))
    else:
        rows.extend(_load_rows(ld))
    cl = p.get("classroom", "not measured")
    if isinstance(cl, str):
        rows.append(_missing(s, "classroom: concurrent websocket sessions", cl))
    else:
        rows.extend(_classroom_rows(cl))
    return rows


def _arrival_rows(a: dict | str) -> list[Row]:
    """A class arriving at once: sign-ups, then sign-ins, beside one sign-in alone (target p95 3 s)."""
    s = "platform"
    if isinstance(a, str):
        return [_missing(s, "a class arrives: sign-ups and sign-ins at once", a)]
    rows: list[Row] = []
    for op in ("sign_up", "sign_in"):
        b = a[op]
        rows.append((s, f"a class arrives: {a['arrivals']} {op.replace('_', '-')}s at once, p50 / p95 / max",
                     f"{_num(b['p50_s'])} / {_num(b['p95_s'])} / {_num(b['max_s'])} s",
                     f"one sign-in alone {_num(a['sign_in_alone_s'])} s; target p95 3 s",
                     f"{b['errors']} errors, {b['busy_notices']} told \"busy, retrying\""))
    rows.append((s, f"Argon2id hash, {a['argon2']}, {a['gate_slots']} at once",
                  f"{_num(a['hash_s'] * 1000)} ms",
                  f"earlier parameters (64 MiB, t=3, p=4) {_num(a['earlier_hash_s'] * 1000)} ms",
                  f"{_num(a['earlier_hash_s'] / a['hash_s'])}x faster"))
    return rows


def _classroom_rows(cl: dict) -> list[Row]:
    """Per level: p50/p95 page time and server CPU per page run, app beside an empty page."""
    s, out = "platform", []
    for level, app in cl["app"].items():
        empty = cl["empty"].get(level, {})
        out.append((s, f"classroom: {level} concurrent sessions, page time p50 / p95",
                    f"{_num(app['p50_s'])} / {_num(app['p95_s'])} s",
                    f"empty page {_num(empty.get('p50_s', float('nan')))} / "
                    f"{_num(empty.get('p95_s', float('nan')))} s",
                    f"{_num(app['throughput_per_s'])} pages/s, {app['errors']} errors"))
        out.append((s, f"classroom: {level} sessions, server CPU per page run",
                    f"{_num(app['server_cpu_ms_per_page'])} ms",
                    f"empty page {_num(empty.get('server_cpu_ms_per_page', float('nan')))} ms",
                    " · ".join(f"{page} {_num(v['kib'], 1)} KiB"
                               for page, v in app["per_page"].items()) if level == "1" else ""))
    return out


# The operations a learner waits for, in the order of a journey, and their short names.
LOAD_OPS = {"sign_in": "sign-in", "record_answer": "answer", "finish_attempt": "finish",
            "pass_exercises": "exercises",
            "issue_certificate": "certificate", "lookup": "lookup"}


def _load_rows(ld: dict) -> list[Row]:
    s = "platform"
    ops = ld["ops"]
    setup = f"{ld['learners']} threads, {ld['browsers']} browsers, {_num(ld['seconds'])} s"
    rows: list[Row] = [
        (s, f"concurrent learners ({setup}): throughput",
         f"{_num(ld['ops_per_s'])} ops/s ({ld['total_ops']:,} calls)",
         f"{len(ld['errors'])} errors, {len(ld['problems'])} lost or doubled writes", "")]
    groups = [("threads", {k: v for k, v in LOAD_OPS.items() if k in ops}),
              ("browsers", {k: k.removeprefix("browser_") for k in ops if k.startswith("browser_")})]
    for who, names in groups:
        if names:
            rows.append((s, f"concurrent learners: p95 latency, {who}",
                         " · ".join(f"{short} {_num(ops[k]['p95_ms'])}" for k, short in names.items())
                         + " ms",
                         "p50 " + " · ".join(_num(ops[k]["p50_ms"]) for k in names) + " ms", ""))
    return rows


def gpu(g: dict | str) -> list[Row]:
    if isinstance(g, str):
        return [_missing("gpu", "GPU section", g)]
    if g["mode"] == "nccl":
        return [("gpu", f"NCCL busbw {g['world_size']} GPUs, {_size(r['size_bytes'])}: "
                        "ring · naive · built-in",
                 f"{_num(r['ring_busbw_GBps'])} · {_num(r['naive_busbw_GBps'])} · "
                 f"{_num(r['all_reduce_busbw_GBps'])} GB/s", "dist.all_reduce",
                 f"ring/built-in {_num(r['ring_vs_all_reduce'])}x") for r in g["rows"]]
    return [("gpu", f"single-GPU DDP step ({g['gpus'][0]})", f"{_num(g['ddp_step_ms'])} ms",
             f"naive sync {_num(g['naive_step_ms'])} ms", f"{_num(g['ddp_vs_naive_step_ratio'])}x")]


def rows(result: dict) -> list[Row]:
    meta = result["meta"]
    shrunk = "; ".join(meta["shrunk"])
    out: list[Row] = [("run", "mode", meta["mode"], "full run" if shrunk else "",
                       f"shrank (full run in brackets): {shrunk}" if shrunk else "")]
    out += collectives(result["collectives"])
    out += labs(result["labs"])
    out += exercises(result.get("exercises", "not measured"))
    out += platform(result["platform"])
    out += gpu(result["gpu"])
    return out


LEFT_OUT = "skipped: not asked for"  # what benchmarks.__main__ puts in a part --only left out


def markdown(result: dict) -> str:
    """A heading line, then the table (columns padded, but the last one); the parts that
    ``--only`` left out are named in the heading's command, not given a row each."""
    meta = result["meta"]
    kept = [r for r in rows(result) if not r[2].startswith(LEFT_OUT)]
    table = [HEADER, ("---",) * len(HEADER), *kept]
    widths = [max(len(r[i]) for r in table) for i in range(len(HEADER) - 1)] + [0]
    lines = ["| " + " | ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)) + " |"
             for r in table]
    lines[1] = "| " + " | ".join("-" * max(3, w) for w in widths) + " |"
    before, after = meta["load_average_1min"]
    heading = (f"Benchmarks, {meta['mode']} mode, {meta['date']}, `{meta['command']}`, "
               f"{meta['duration_s']:.0f} s: {meta['machine']}; load average {before:.1f} "
               f"before, {after:.1f} after")
    return heading + "\n\n" + "\n".join(lines)
