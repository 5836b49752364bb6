"""A report's penalties and per-group penalties as analysis-ready tables
(Report.penalties(), Report.layers(); docs/python.md "Tables and plots").

Both read the report's per-model rows (Report.metrics) and join what the
dashboard shows side by side: a penalty with its iid CI (`penalty`), its
circular block CI (`penalty_block`, the CI every decision reads) and its
Holm-adjusted p (`penalty_p_holm`); a group's penalty with its share of the
whole-model penalty, computed as the dashboard's report does
(server/http/web/report.js, shareOf).
"""

from fca import frames

_JOIN = ["model", "intervention"]

PENALTY_COLUMNS = ["model", "intervention", "penalty", "ci_low", "ci_high", "block_ci_low",
                   "block_ci_high", "block_ci_excludes_0", "p_holm", "significant", "n"]

LAYER_COLUMNS = ["model", "intervention", "scope", "group", "layer", "site", "family", "penalty",
                 "ci_low", "ci_high", "share", "metric"]


def _whole_model(metrics, name, columns):
    """The whole-model rows of metric `name` (scope "model"), (model,
    intervention) and `columns` renamed as given."""
    rows = metrics[(metrics.key_metric == name) & (metrics.scope == "model")]
    return rows[_JOIN + list(columns)].rename(columns=columns)


def penalties(metrics, ci_level):
    """One row per (model, intervention) with a whole-model penalty:
    penalty and its iid CI (ci_low, ci_high), the block CI (block_ci_low,
    block_ci_high), block_ci_excludes_0, p_holm and significant
    (p_holm < 1 - ci_level: distinguishable from 0 with family-wise error at
    most 1 - ci_level, docs/fca.md "penalty_p_holm"), n (windows). NaN where
    a row is undefined or absent; the verdicts are False there."""
    pd = frames._pandas()
    df = _whole_model(metrics, "penalty", {"value": "penalty", "ci_low": "ci_low",
                                           "ci_high": "ci_high", "n": "n"})
    df = df.merge(_whole_model(metrics, "penalty_block", {"ci_low": "block_ci_low",
                                                          "ci_high": "block_ci_high"}),
                  on=_JOIN, how="left")
    df = df.merge(_whole_model(metrics, "penalty_p_holm", {"value": "p_holm"}), on=_JOIN,
                  how="left")
    for c in ("penalty", "ci_low", "ci_high", "block_ci_low", "block_ci_high", "p_holm"):
        df[c] = pd.to_numeric(df[c], errors="coerce")
    df["block_ci_excludes_0"] = (df.block_ci_low > 0) | (df.block_ci_high < 0)
    df["significant"] = df.p_holm < 1 - ci_level
    return df[PENALTY_COLUMNS].reset_index(drop=True)


def layers(metrics, group_scopes):
    """One row per (model, intervention, group) of the per-group replays
    (per_layer_interventions): scope ("layer", "site", "family"), group (the
    layer number, site or family name) and the key's fields, penalty with
    its CI, and share = penalty(I at g) / penalty(I), the whole-model
    penalty being penalty_block's value, NaN unless that row's block CI lies
    above 0 (docs/fca.md "Per-group dependence"; as the dashboard). Layers in
    numeric order. group_scopes: GetServerInfo's GroupScopeInfo messages,
    which name each scope's penalty metric."""
    pd = frames._pandas()
    penalty_metrics = {g.penalty_metric: g.name for g in group_scopes}
    rows = metrics[metrics.key_metric.isin(list(penalty_metrics))].copy()
    if rows.empty:
        return frames.frame([], LAYER_COLUMNS)
    rows["scope"] = rows.key_metric.map(penalty_metrics)
    rows["group"] = [str(int(r.layer)) if r.scope == "layer" else (r.site or r.family)
                     for r in rows.itertuples()]
    rows = rows.rename(columns={"value": "penalty"})
    whole = _whole_model(metrics, "penalty_block", {"value": "whole", "ci_low": "whole_ci_low"})
    rows = rows.merge(whole, on=_JOIN, how="left")
    for c in ("penalty", "ci_low", "ci_high", "whole", "whole_ci_low"):
        rows[c] = pd.to_numeric(rows[c], errors="coerce")
    # The ratio means something only where the whole-model penalty is
    # distinguishable from 0 (as group_additivity's definedness).
    rows["share"] = (rows.penalty / rows.whole).where(rows.whole_ci_low > 0)
    # The report's order of models and interventions, layers by number.
    rows["_block"] = rows.groupby(["model", "intervention", "scope"], sort=False).ngroup()
    rows["_order"] = [int(r.layer) if r.scope == "layer" else 0 for r in rows.itertuples()]
    rows = rows.sort_values(["_block", "_order"], kind="stable")
    return rows[LAYER_COLUMNS].reset_index(drop=True)
