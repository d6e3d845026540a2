"""The drill's timeline as a PNG (matplotlib, Agg): connected clients per region, the
primary's alarm, the DNS answer and acknowledged bids per second, one column per pass."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["plot_acks", "plot_surge", "plot_timeline"]


def plot_timeline(report: dict[str, Any], path: Path) -> None:
    """Draw every pass of ``report`` into ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    passes = report.get("passes", [])
    columns = max(1, len(passes))
    fig, axes = plt.subplots(
        3, columns, figsize=(7 * columns, 8), sharex="col", squeeze=False,
        gridspec_kw={"height_ratios": [3, 1, 2]},
    )  # fmt: skip
    dep = report.get("deployment", {})
    primary, secondary = dep.get("primary"), dep.get("secondary")
    for col, p in enumerate(passes):
        series = p.get("series", {})
        start = series.get("start", 0.0)
        top, mid, low = axes[0][col], axes[1][col], axes[2][col]
        for region, counts in series.get("connected", {}).items():
            top.plot(series["t"], counts, label=f"connected to {region}")
        top.set_title(f"{p['name']}: {p['clients']} clients")
        top.set_ylabel("clients")
        for phase, colour in (("failover", "red"), ("failback", "green")):
            d = p.get(phase)
            if d:
                for ax in (top, mid, low):
                    ax.axvline(d["at"] - start, color=colour, linestyle="--", linewidth=1)
        top.legend(loc="best", fontsize="small")
        timeline = p.get("timeline", [])
        ts = [row["t"] - start for row in timeline]
        alarm = [1 if row["alarms"].get(primary) == "ALARM" else 0 for row in timeline]
        dns = [1 if row["dns"] == secondary else 0 for row in timeline]
        mid.step(ts, alarm, where="post", label=f"{primary} alarm (1 = ALARM)")
        mid.step(ts, [d * 0.9 for d in dns], where="post", label=f"DNS → {secondary} (0.9)")
        mid.set_ylim(-0.1, 1.2)
        mid.legend(loc="best", fontsize="small")
        low.plot(series.get("t", []), series.get("acks_per_second", []), color="purple")
        for phase, colour in (("failover", "red"), ("failback", "green")):
            d = p.get(phase)
            p99 = ((d or {}).get("write") or {}).get("time_to_write", {}).get("p99")
            if d and p99 is not None:  # write RTO p99: when 99% of clients wrote again
                low.axvline(d["at"] - start + p99, color=colour, linestyle=":", linewidth=1.5,
                            label=f"{phase} write RTO p99 {p99:.1f} s")  # fmt: skip
        if low.get_legend_handles_labels()[0]:
            low.legend(loc="best", fontsize="small")
        low.set_ylabel("acked bids / s")
        low.set_xlabel("seconds")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def plot_surge(report: dict[str, Any], path: Path) -> None:
    """A surge: arrivals and tokens per second, auction sessions open against the
    capacity, and the room's counters (queue, served, waiting, expired, abandoned)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = report.get("surge") or {}
    series = s.get("series", {})
    start = series.get("start", 0.0)
    fig, (top, mid, low) = plt.subplots(3, 1, figsize=(8, 9), sharex=True)
    ts = series.get("t", [])
    top.plot(ts, series.get("arrivals_per_second", []), label="arrivals / s")
    top.plot(ts, series.get("served_per_second", []), label="tokens taken / s")
    top.set_title(f"surge: {s.get('visitors')} visitors, {s.get('inlet', {}).get('kind')} inlet")
    top.legend(loc="best", fontsize="small")
    mid.step(ts, series.get("sessions", []), where="post", label="auction sessions open")
    capacity = s.get("inlet", {}).get("capacity")
    if capacity:
        mid.axhline(capacity, color="red", linestyle=":", label=f"capacity {capacity}")
    mid.legend(loc="best", fontsize="small")
    samples = series.get("samples", [])
    st = [x["t"] for x in samples]
    for name, label in (("queue", "queue"), ("tokens", "served"), ("waiting", "waiting"),
                        ("expired", "expired"), ("abandoned", "abandoned")):  # fmt: skip
        low.plot(st, [x.get(name, 0) for x in samples], label=label)
    low.plot(st, [x.get("holding", 0) for x in samples], label="capacity held", linestyle="--")
    low.set_xlabel("seconds")
    low.legend(loc="best", fontsize="small")
    fault = s.get("fault")
    if fault:
        for ax in (top, mid, low):
            ax.axvline(fault["at"] - start, color="red", linestyle="--", linewidth=1)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def plot_acks(ax: Any, acks: list[float], start: float, label: str = "acked bids") -> None:
    """Acknowledged bids per half second on ``ax`` (times since ``start``), in seconds."""
    times = sorted(t - start for t in acks)
    if times:
        width = 0.5
        bins = max(1, int((times[-1] - min(0.0, times[0])) / width) + 1)
        ax.hist(times, bins=bins, color="purple")
    ax.set_ylabel(f"{label} / 0.5 s")
    ax.set_xlabel("seconds")
