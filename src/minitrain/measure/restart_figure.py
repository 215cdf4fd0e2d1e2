"""The restart measurement's figure: steps done against seconds since the launch, with the restart's events."""

from pathlib import Path

from minitrain.artifacts import save_figure

PLOT_NAME = "restart.png"


def plot(results: dict, out: Path) -> None:
    """Steps done against seconds since the launch, both runs, with the restart's events marked."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4.6))
    for name, style in (("uninterrupted", dict(color="0.55", marker=".", label="uninterrupted")),
                        ("restarted", dict(color="#c44e52", marker=".", label="rank 1 killed, restarted"))):
        points = results["progress"][name]
        ax.plot([t for t, _ in points], [s + 1 for _, s in points], linestyle="", **style)
    events = {e["event"]: e["t_s"] for e in results["timeline"]}
    for name, color in (("fault", "#c44e52"), ("detected", "#dd8452"), ("restarted", "#4c72b0"), ("resumed", "#55a868")):
        if name in events:
            # named in the legend, not beside the line: events a few ms apart would print over each other
            ax.axvline(events[name], color=color, linestyle="--", linewidth=1, label=name)
    r = results["restart"]
    if r["resumed_from_step"] is not None:
        ax.axhspan(r["resumed_from_step"], r["previous_steps_done"], color="#c44e52", alpha=0.12,
                   label=f"steps done twice ({r['steps_redone']})")
    ax.set_xlabel("seconds since the launch (as each step's log line arrived)")
    ax.set_ylabel("steps done")
    cmp = results["comparison"]
    ax.set_title(f"A rank dies, training resumes from the snapshot at step {r['resumed_from_step']}: final weights "
                 f"{'bitwise equal' if cmp['bitwise_equal'] else 'NOT equal'} to the uninterrupted run's", fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    fig.tight_layout()
    save_figure(fig, out / PLOT_NAME)
