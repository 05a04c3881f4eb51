"""The sentences below ``peer_speed.py``'s table: why ours is slower where it is, and where Gavel's simulator
crosses the issue's 10 minutes. They read only the table's rows (kept apart so that both modules stay small)."""

from __future__ import annotations

#: What our CLI loads before it simulates anything (the HTML report needs Jinja2).
LIBRARIES = "import numpy, pydantic, typer, rich.console, jinja2"


#: What was done about our start-up (issue 29), measured on 60_job `fifo` against the code before it.
STARTUP_CUT = (
    "What Tesserae itself added to the start-up was cut in issue 29: each command's module is imported only when "
    "that command runs, so `tesserae simulate` loads none of the runtime's, the profiler's or the web server's "
    "modules and Typer builds the options of that one command, not of all 23 (556 modules loaded instead of 615); "
    "the cyclic garbage collector is off while the command starts (what start-up allocated is then frozen); "
    "PyYAML is loaded only to read a queue file. On 60_job `fifo` that took `tesserae simulate` to 0.83x the CPU "
    "time of the code before (median of 20 paired runs, 0.89 s against 1.09 s under load 10-12). The libraries "
    "stay: they are the project's interface (typed options, the CLI, the HTML report), and a run of a fraction "
    "of a second is not what a simulator is for; Typer itself builds a pydantic TypeAdapter for each option of "
    "the command it runs.")


def slower_text(rows: list[dict], imports: float | None, where: str = "this machine") -> str:
    """Why ours is slower where it is: start-up (our simulation alone took less wall time than the peer's
    whole process), the wall clock alone (the CPU ratio at or below 1), or the max-min LP. ``imports``: the
    CPU seconds of importing our CLI's libraries, measured on ``where`` when the table is written."""
    slow = [r for r in rows if r["peer_finished"] and r.get("ours_finished", True)
            and (r["ours_cpu"] > r["peer_cpu"] or r["ours_wall"] > r["peer_wall"])]
    if not slow:
        return "Every ratio is at or below 1."
    startup = [r for r in slow if r["ours_simulating"] is not None and r["ours_simulating"] < r["peer_wall"]]
    text = f"Ours is slower on {len(slow)} case(s): " + ", ".join(f"{r['trace']} `{r['policy']}`" for r in slow) + "."
    if startup:
        peer_cpu = sorted(r["peer_cpu"] for r in startup)
        text += (" On " + ", ".join(f"{r['trace']} `{r['policy']}`" for r in startup) + " our simulation itself took "
                 + ", ".join(f"{r['ours_simulating']:.2f} s" for r in startup) + " against the peer's whole process's "
                 + ", ".join(f"{r['peer_wall']:.2f} s" for r in startup) + " (wall): the difference is start-up. Our "
                 "`tesserae` command loads NumPy, pydantic, Typer, Rich and Jinja2 (for its HTML report)"
                 + (f", which alone took {imports:.2f} s of CPU (`python -c '{LIBRARIES}'`, median of 3, "
                    f"measured when this table was written, on {where}), about the peer's whole process "
                    f"({peer_cpu[0]:.2f}-{peer_cpu[-1]:.2f} s of CPU)" if imports is not None else "")
                 + ", and its own modules; the peer loads its few modules and NumPy. " + STARTUP_CUT)
    wall_only = [r for r in slow if r not in startup and r["ours_cpu"] <= r["peer_cpu"]]
    if wall_only:
        text += (" On " + ", ".join(f"{r['trace']} `{r['policy']}`" for r in wall_only) + " only the wall ratio is "
                 "above 1 (CPU " + ", ".join(f"{r['ours_cpu'] / r['peer_cpu']:.2f}" for r in wall_only) + "): the "
                 "two processes ran one after the other on a machine shared with other sessions' work, so their "
                 "wall times saw different loads; their CPU times do not depend on it.")
    for r in slow:
        if r not in startup and r not in wall_only and r.get("ours_lp"):
            lp_s, solves = r["ours_lp"]
            text += (f" On {r['trace']} `{r['policy']}` the simulation itself is slower: {lp_s:.1f} s of its "
                     f"{r['ours_simulating']:.1f} s went to {solves} solves of the max-min LP (wall seconds under the "
                     "load shown). Gavel solves it with ECOS, in C, through cvxpy; ours is the analytic centre of the "
                     "optimal face by a barrier method written with NumPy (the point that is the same on every "
                     "machine): each of its Newton steps is some hundred NumPy calls on arrays of a few jobs, so its "
                     "time is per-call overhead, not arithmetic. The reduction to job classes that makes the packed "
                     "LP fast (BENCHMARKS, *Gavel's packed LP at 256 GPUs*) does not help here: on multi_g24 an LP "
                     "has 8.3 jobs in 7.6 classes on average (19 jobs, 15 classes at most; counted over the run's "
                     "229 solves), so it would not shrink the LP, and the number of Newton steps, which sets the "
                     "time, stays. The 2 x 2 and 3 x 3 block factorisations are written out instead (the same "
                     "values, bit for bit; 0.82-0.89x of the LP's CPU time on this run's 228 LPs, measured at "
                     "load 10-12).")
    return text


#: The issue's bound on the peer: "the largest size Gavel's own simulator finishes in 10 minutes".
TEN_MINUTES = 600.0


def _bracket(rows: list[dict], key: str) -> tuple[dict | None, dict | None]:
    """The largest size whose ``key`` (peer seconds) is within 10 minutes and the smallest past them."""
    within = [r for r in rows if r[key] <= TEN_MINUTES]
    past = [r for r in rows if r[key] > TEN_MINUTES]
    return (max(within, key=lambda r: r["gpus"]) if within else None,
            min(past, key=lambda r: r["gpus"]) if past else None)


def _ten_minutes(rows: list[dict], key: str) -> str:
    """Where, among the measured sizes, Gavel's simulator crosses 10 minutes of ``key``, in words."""
    within, past = _bracket(rows, key)

    def size(r: dict) -> str:
        return f"{r['gpus']} GPUs ({r[key]:.0f} s)"

    if past is None:
        assert within is not None  # rows is not empty
        return f"above the largest size measured, {size(within)}: not measured"
    if within is None:
        return f"at or below the smallest size measured, {size(past)}"
    return (f"between {size(within)} and {size(past)}"
            + ("" if within["gpus"] < past["gpus"] else " (the rows disagree: measured under different loads)"))


def gavel_scale_text(rows: list[dict]) -> str:
    """The largest Gavel sizes measured, against the issue's "the largest size Gavel's simulator finishes in
    10 minutes": where, among the measured sizes, the peer's plain max-min crosses 10 minutes of wall time
    (under the load the rows were measured at) and of CPU time (its wall time on an idle core), and from which
    size on ours is below it in both."""
    done = sorted((r for r in rows if r["peer"] == "gavel" and r["policy"] == "max_min_fairness_perf"
                   and r["peer_finished"] and r.get("ours_finished", True)), key=lambda r: r["gpus"])
    if not done:
        return ""
    big = done[-1]
    text = (f"\n\nThe largest Gavel size here: {big['trace']} ({big['gpus']} GPUs, "
            f"{big.get('jobs', '?')} jobs that both finished), "
            f"where Gavel's simulator took {big['peer_cpu']:.0f} s of CPU and {big['peer_wall']:.0f} s of wall time "
            f"on plain max-min (load {min(big['load']):.1f}-{max(big['load']):.1f}), ours "
            f"{big['ours_cpu'] / big['peer_cpu']:.2f}x its CPU and {big['ours_wall'] / big['peer_wall']:.2f}x its "
            "wall time. Where Gavel's simulator needs 10 minutes (the issue's largest size): by wall time, under "
            f"the loads shown, {_ten_minutes(done, 'peer_wall')}; by CPU time, its wall time on an idle core, "
            f"{_ten_minutes(done, 'peer_cpu')}.")
    slower = [r for r in done if r["ours_cpu"] > r["peer_cpu"] or r["ours_wall"] > r["peer_wall"]]
    faster_from = [r for r in done if not slower or r["gpus"] > slower[-1]["gpus"]]
    if faster_from:
        text += (" Ours takes at most the CPU and the wall time of Gavel's simulator at every size from "
                 f"{faster_from[0]['gpus']} GPUs on (CPU / wall: " + ", ".join(
                     f"{r['ours_cpu'] / r['peer_cpu']:.2f}x / {r['ours_wall'] / r['peer_wall']:.2f}x at {r['gpus']}"
                     for r in faster_from) + ").")
    return text
