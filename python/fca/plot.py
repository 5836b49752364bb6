"""Report.plot(): the dashboard's penalty chart and per-layer charts
(server/http/web/report.js, penaltyChartOf and perGroupSection) as one
matplotlib Figure.

matplotlib is imported when a plot is drawn (`pip install "fca[plot]"` or
python3-matplotlib). The figure is made by pyplot, so that Jupyter shows it
inline, and closed at once, so that pyplot keeps no reference and does not
draw it a second time; any backend works, Agg (no display) included.
"""

from fca import _optional

Y_LABEL = "penalty (nats/token)"


def _pyplot():
    return _optional.require("matplotlib.pyplot", "plot()", "python3-matplotlib", "matplotlib")


def _bars(ax, groups, models, label_of, value="penalty"):
    """Grouped bars: one group per entry of `groups` (that group's rows, a
    DataFrame), one bar per model with its CI as an error bar; a model with
    no defined value there has no bar."""
    width = 0.8 / max(1, len(models))
    for k, model in enumerate(models):
        xs, ys, lows, highs = [], [], [], []
        for x, rows in enumerate(groups):
            row = rows[rows.model == model]
            if row.empty or row[value].isna().all():
                continue
            r = row.iloc[0]
            xs.append(x - 0.4 + width * (k + 0.5))
            ys.append(r[value])
            # No CI: a zero-length error bar, not an invented one.
            lows.append(r[value] - r.ci_low if r.ci_low == r.ci_low else 0.0)
            highs.append(r.ci_high - r[value] if r.ci_high == r.ci_high else 0.0)
        ax.bar(xs, ys, width=width, yerr=[lows, highs], capsize=3, label=model)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([label_of(rows) for rows in groups], rotation=30, ha="right")
    ax.axhline(0.0, color="black", linewidth=0.8)
    ax.set_ylabel(Y_LABEL)
    if len(models) > 1:
        ax.legend()


def plot(penalties, layers, models, ci_level):
    """The figure: the penalty per intervention (bars per model, the iid CI
    as error bars) and, per intervention of per_layer_interventions, its
    penalty at one group at a time with its CI. Returns the Figure."""
    plt = _pyplot()
    level = f"{100 * ci_level:g}% CI"
    per_group = list(layers.groupby(["intervention", "scope"], sort=False)) \
        if layers is not None and len(layers) else []
    fig, axes = plt.subplots(1 + len(per_group), 1, figsize=(8, 3.5 * (1 + len(per_group))),
                             squeeze=False)
    interventions = list(dict.fromkeys(penalties.intervention))
    ax = axes[0][0]
    _bars(ax, [penalties[penalties.intervention == i] for i in interventions], models,
          lambda rows: rows.intervention.iloc[0])
    ax.set_title(f"Penalty per intervention (nats/token, {level})")
    ax.set_xlabel("intervention")
    for n, ((intervention, scope), rows) in enumerate(per_group):
        ax = axes[1 + n][0]
        groups = [rows[rows.group == g] for g in dict.fromkeys(rows.group)]
        _bars(ax, groups, models, lambda r, s=scope: f"{s} {r.group.iloc[0]}")
        ax.set_title(f"Penalty of {intervention} at one {scope} (nats/token, {level})")
        ax.set_xlabel(scope)
    fig.tight_layout()
    plt.close(fig)
    return fig
