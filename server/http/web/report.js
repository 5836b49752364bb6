// fca dashboard: a job's report (GetReport) as the tables of `fca report`,
// with penalty bars, per-layer plots and the per-group dependence.
'use strict';

(() => {
  const {resultF, el, table, link, modelHref, num, shaPrefix, general, fixed, signed, verdictWord,
    metricsUnder, labelOf, keyId, metricOf, metricFormat, resultCell, acrossCell, barChart,
    layerChart} = window.fca;

  // Lookups over a GetReportResponse by typed key (keyId).
  function reportIndex(rep) {
    const metrics = new Map();
    for (const m of rep.metrics || []) metrics.set(keyId(resultF.intervention(m), resultF.key(m)), m);
    const twin = new Map();
    for (const r of rep.dense_twin_rows || []) twin.set(keyId(resultF.intervention(r), resultF.key(r)), r);
    return {
      models: rep.models || [],
      metric: (i, k) => metrics.get(keyId(i, k)),
      find: (model, i, k) => resultF.perModel(metrics.get(keyId(i, k)) || {}).find((r) => resultF.model(r) === model),
      twin: (i, k) => twin.get(keyId(i, k)),
      // Every metric of the report as {i, key}, in the server's order.
      entries: () => (rep.metrics || []).map((m) => ({i: resultF.intervention(m), key: resultF.key(m), name: resultF.metric(m)})),
    };
  }

  // A table with a row per (intervention, metric) and a column per model,
  // then mean ± sd [min, max] across models, then the dense twin.
  // opts.cell(model, row): a cell of its own for a model, or null;
  // opts.twinOmits(metric): the twin has no such number of its own.
  function metricTable(ix, caption, rows, opts = {}) {
    const many = ix.models.length > 1;
    const twin = opts.twin || '';
    const head = [opts.rowHead || 'metric', ...ix.models.map((m) => ({text: m, num: true}))];
    if (many) head.push({text: 'mean ± sd [min, max]', num: true});
    if (twin) head.push({text: `${twin} (dense twin)`, num: true});
    return table({caption, head, id: opts.id, rows: rows.map((row) => {
      opts.shown && opts.shown.add(keyId(row.i, row.m));
      const cells = ix.models.map((m) => (opts.cell && opts.cell(m, row)) || resultCell(ix.find(m, row.i, row.m), row.m));
      if (many) cells.push(acrossCell(ix.metric(row.i, row.m)));
      const omitted = opts.twinOmits && opts.twinOmits(metricOf(row.m));
      if (twin) cells.push(omitted ? el('td', {class: 'num'}, '–') : resultCell(ix.twin(row.i, row.m), row.m));
      return {th: row.label, key: `${row.i}/${(ix.metric(row.i, row.m) || {}).metric || metricOf(row.m)}`, cells};
    })});
  }

  // A mixture of experts' blocks are its experts: "2 of 8" routed experts
  // per token at each router layer ("1..2 of 8" when layers differ), as
  // `fca report` shows them, not the sum over layers beside a dense
  // model's count of layers; null for a model without routers.
  function expertsOfE(ix, model) {
    const ks = [];
    const experts = new Map();  // layer -> E
    for (const e of ix.entries()) {
      if (e.i !== 'execution') continue;
      const r = ix.find(model, e.i, e.key);
      if (!r || !resultF.defined(r)) continue;
      if (e.key.metric === 'experts_per_token') ks.push(num(resultF.value(r)));
      if (e.key.metric === 'expert_share') experts.set(e.key.layer, (experts.get(e.key.layer) || 0) + 1);
    }
    if (!ks.length) return null;
    const [lo, hi] = [Math.min(...ks), Math.max(...ks)];
    const k = lo === hi ? general(lo) : `${general(lo)}..${general(hi)}`;
    return el('td', {class: 'num', 'data-model': model, 'data-experts-per-token': k}, `${k} of ${Math.max(0, ...experts.values())}`);
  }

  // LIVE's co-activation of expert pairs and the experts of the most
  // frequent token ids (fca.md "Routing statistics"), for a chosen model
  // and router layer: a heatmap table of the pairs (expert_coactivation,
  // symmetric, shaded by value) and a table of the token ids. Null when the
  // report has no such rows. Every row it reads is added to `shown`.
  function routingStatistics(ix, entries, shown) {
    const pairs = entries.filter((e) => e.i === 'execution' && e.key.metric === 'expert_coactivation');
    const tokens = entries.filter((e) => e.i === 'execution' && e.key.metric === 'token_expert_share');
    if (!pairs.length && !tokens.length) return null;
    [...pairs, ...tokens].forEach((e) => shown.add(keyId(e.i, e.key)));
    const layers = [...new Set([...pairs, ...tokens].map((e) => Number(e.key.layer)))].sort((a, b) => a - b);
    const pick = {model: ix.models[0], layer: layers[0]};
    const holder = el('div', {id: 'routing-statistics'});
    const value = (e) => ix.find(pick.model, e.i, e.key);
    function heatmap() {
      const here = pairs.filter((e) => Number(e.key.layer) === pick.layer);
      // E from the layer's expert shares: a layer of many experts stores only
      // its largest pairs (fca.md "Routing statistics").
      const shareCount = entries.filter((e) => e.i === 'execution' && e.key.metric === 'expert_share' && Number(e.key.layer) === pick.layer).length;
      const experts = Math.max(shareCount, ...here.map((e) => Number(e.key.partner) + 1));
      const partial = here.length < experts * (experts - 1) / 2 ? ` (the ${here.length} largest pairs stored; – not stored)` : '';
      const cell = new Map();
      let top = 0;
      for (const e of here) {
        const r = value(e);
        if (!r) continue;
        const [a, b] = [Number(e.key.expert), Number(e.key.partner)];
        cell.set(`${a},${b}`, r).set(`${b},${a}`, r);
        top = Math.max(top, num(r.value));
      }
      const rows = [...Array(experts).keys()].map((a) => ({th: `expert ${a}`, cells: [...Array(experts).keys()].map((b) => {
        const r = cell.get(`${a},${b}`);
        if (a === b || !r) return el('td', {class: 'num'}, '–');
        const v = num(r.value);
        return el('td', {class: 'num', 'data-expert': a, 'data-partner': b, 'data-value': v,
          style: `background-color: rgba(37, 99, 235, ${top > 0 ? (0.35 * v / top).toFixed(3) : 0})`}, fixed(4)(v));
      })}));
      return table({caption: `Co-activation, layer ${pick.layer}: fraction of tokens whose top-k holds both experts${partial}`,
        head: ['expert', ...[...Array(experts).keys()].map((b) => ({text: String(b), num: true}))], rows, id: 'table-coactivation'});
    }
    function tokenTable() {
      const byToken = new Map();
      for (const e of tokens.filter((x) => Number(x.key.layer) === pick.layer)) {
        const r = value(e);
        if (!r) continue;
        const t = String(e.key.token);
        if (!byToken.has(t)) byToken.set(t, {n: num(r.n), experts: []});
        byToken.get(t).experts.push([Number(e.key.expert), num(r.value)]);
      }
      const rows = [...byToken.entries()].sort((a, b) => b[1].n - a[1].n).map(([t, x]) => ({th: t, key: `token/${t}`, cells: [
        el('td', {class: 'num'}, String(x.n)),
        el('td', {}, x.experts.sort((a, b) => b[1] - a[1]).map(([e, v]) => `${e} (${fixed(4)(v)})`).join(', '))]}));
      return table({caption: `Most frequent token ids, layer ${pick.layer}: their most chosen experts (share of the id's assignments)`,
        head: ['token id', {text: 'positions', num: true}, 'experts (share)'], rows, id: 'table-token-experts'});
    }
    const draw = () => holder.replaceChildren(pairs.length ? heatmap() : '', tokens.length ? tokenTable() : '');
    const choose = (what, options, label) => el('label', {}, `${label} `, el('select', {id: `routing-${what}`, onchange: (ev) => {
      pick[what] = what === 'layer' ? Number(ev.target.value) : ev.target.value;
      draw();
    }}, options.map((o) => el('option', {value: o}, String(o)))));
    draw();
    return el('div', {},
      el('p', {}, ix.models.length > 1 ? choose('model', ix.models, 'model') : null, choose('layer', layers, 'layer')),
      holder);
  }

  const unitOf = (ix, i, m) => ((ix.metric(i, m) || {}).unit || '');
  const withUnit = (label, unit) => (unit && unit !== '1' ? `${label} (${unit})` : label);

  function penaltyChartOf(ix, interventions, id) {
    const groups = interventions.filter((i) => i !== 'correct' && ix.metric(i, 'penalty')).map((i) => {
      const bars = [];
      ix.models.forEach((m, k) => {
        const r = ix.find(m, i, 'penalty');
        if (!r || !r.defined) return;
        const f = metricFormat('penalty').f;
        const ci = r.ci_low !== undefined ? ` [${f(num(r.ci_low))}, ${f(num(r.ci_high))}]` : '';
        bars.push({k, value: num(r.value), lo: num(r.ci_low), hi: num(r.ci_high), tip: `${m} ${i}: ${f(num(r.value))}${ci}`});
      });
      const a = (ix.metric(i, 'penalty') || {}).across_models;
      const summary = ix.models.length > 1 && a && num(a.n) > 0
        ? {mean: num(a.mean), sd: num(a.sd), tip: `${i}: mean ${signed(4)(num(a.mean))} ± ${fixed(4)(num(a.sd))}`}
        : null;
      return {label: i, bars, summary};
    });
    if (!groups.length) return null;
    return barChart({title: 'Penalty per intervention (nats/token, 95% CI)', yLabel: 'penalty (nats/token)',
      groups, series: ix.models, id});
  }

  // "Against the dense twin D: a slower, b no detectable difference."
  function verdictLine(ix, twin) {
    const said = ix.models.map((m) => [m, ix.find(m, 'execution', 'slowdown_verdict')]).filter(([, r]) => r && resultF.defined(r));
    if (!said.length) return null;
    return el('p', {id: 'verdicts'}, `Against the dense twin ${twin || ''}: `, said.map(([m, r], k) =>
      [k ? ', ' : '', `${m} `, el('strong', {'data-model': m, 'data-value': resultF.value(r)}, verdictWord(num(resultF.value(r))))]), '.');
  }

  // The per-group dependence rows of `per_layer_interventions` (docs/fca.md
  // "Per-group dependence"): under I, a group scope's penalty and NLL
  // metrics at each group (the vocabulary's group_scopes: layer, site or
  // family), then group_penalty_sum and group_additivity. Each group as
  // {scope, group, m: its penalty's key, nll: its NLL's key, name: the
  // penalty's stored name}; layers in numeric order, other groups as stored.
  function groupsOf(ix, vocab, i) {
    const found = [];
    for (const {i: at, key, name} of ix.entries()) {
      const scope = vocab.groupScopes.find((g) => g.penalty_metric === key.metric);
      if (at !== i || !scope) continue;
      const group = String(key.scope).replace(/^METRIC_SCOPE_/, '') === 'LAYER' ? String(key.layer) : (key.site || key.family);
      found.push({scope: scope.name, group, m: key, nll: Object.assign({}, key, {metric: scope.nll_metric}), name});
    }
    return found.sort((a, b) => (a.scope === 'layer' && b.scope === 'layer' ? Number(a.group) - Number(b.group) : 0));
  }

  // A group's share of I's whole-model penalty: penalty(I at g) / penalty(I),
  // only where the whole-model penalty's block CI (penalty_block, the CI
  // every decision reads) lies above 0, as for group_additivity; else the
  // ratio has no meaning.
  function shareOf(ix, model, i, metric) {
    const whole = ix.find(model, i, 'penalty_block');
    const part = ix.find(model, i, metric);
    if (!whole || !part || !resultF.defined(whole) || !resultF.defined(part) || !(num(resultF.ciLow(whole)) > 0)) return NaN;
    return num(resultF.value(part)) / num(resultF.value(whole));
  }

  function shareCell(ix, model, i, g) {
    const v = shareOf(ix, model, i, g.m);
    return el('td', {class: 'num', 'data-share': isFinite(v) ? v : null, 'data-model': model, 'data-group-metric': g.name},
      isFinite(v) ? `${(100 * v).toFixed(1)}%` : '–');
  }

  // Per intervention: a headline (the group carrying most of the penalty),
  // bars per group with their CIs, and a table with each group's penalty
  // and share, the sum over groups and the additivity.
  function perGroupSection(ix, vocab, interventions, shown) {
    const parts = [];
    const f = metricFormat('penalty').f;
    for (const i of interventions) {
      const groups = groupsOf(ix, vocab, i);
      if (!groups.length) continue;
      const scope = groups[0].scope;
      const name = (g) => `${g.scope} ${g.group}`;
      const headline = ix.models.map((m) => {
        const best = groups.map((g) => [g, shareOf(ix, m, i, g.m)]).filter(([, v]) => isFinite(v))
          .sort((a, b) => b[1] - a[1])[0];
        return best ? el('li', {'data-model': m, 'data-group': best[0].group},
          `${m}: ${name(best[0])} carries ${(100 * best[1]).toFixed(0)}% of ${i}'s whole-model penalty`) : null;
      }).filter(Boolean);
      const bars = groups.map((g) => {
        const list = [];
        ix.models.forEach((m, k) => {
          const r = ix.find(m, i, g.m);
          if (!r || !resultF.defined(r)) return;
          list.push({k, value: num(resultF.value(r)), lo: num(resultF.ciLow(r)), hi: num(resultF.ciHigh(r)),
            tip: `${m} ${i} at ${name(g)}: ${f(num(resultF.value(r)))}`});
        });
        const a = resultF.across(ix.metric(i, g.m) || {});
        const summary = ix.models.length > 1 && a && num(a.n) > 0
          ? {mean: num(a.mean), sd: num(a.sd), tip: `${name(g)}: mean ${f(num(a.mean))} ± ${fixed(4)(num(a.sd))}`} : null;
        return {label: name(g), bars: list, summary};
      });
      const id = `per-${scope}-${i}`;
      const many = ix.models.length > 1;
      const head = [scope, ...ix.models.flatMap((m) => [{text: `penalty ${m}`, num: true}, {text: `share of ${m}'s whole-model penalty`, num: true}])];
      if (many) head.push({text: 'penalty mean ± sd [min, max]', num: true});
      const rows = groups.map((g) => {
        shown.add(keyId(i, g.m));
        const cells = ix.models.flatMap((m) => [resultCell(ix.find(m, i, g.m), 'penalty'), shareCell(ix, m, i, g)]);
        if (many) cells.push(acrossCell(ix.metric(i, g.m)));
        return {th: name(g), key: g.name, cells};
      });
      const summaryRow = (metric, label, fmt) => {
        if (!ix.metric(i, metric)) return null;
        shown.add(keyId(i, metric));
        const cells = ix.models.flatMap((m) => [resultCell(ix.find(m, i, metric), fmt), el('td', {class: 'num'}, '')]);
        if (many) cells.push(acrossCell(ix.metric(i, metric)));
        return {th: label, key: metric, cls: 'across', cells};
      };
      rows.push(...[summaryRow('penalty', `whole model (all ${scope}s at once)`, 'penalty'),
        summaryRow('group_penalty_sum', `sum over ${scope}s`, 'penalty'),
        summaryRow('group_additivity', `sum / whole model`, 'group_additivity')].filter(Boolean));
      const nllRows = groups.filter((g) => ix.metric(i, g.nll)).map((g) => ({i, m: g.nll, label: name(g)}));
      parts.push(el('h3', {}, `${i} at one ${scope} at a time`),
        headline.length ? el('ul', {class: 'headline', id: `${id}-headline`}, headline) : null,
        barChart({title: `Penalty of ${i} at one ${scope} (nats/token, 95% CI)`, yLabel: 'penalty (nats/token)',
          groups: bars, series: ix.models, id: `${id}-chart`}),
        table({caption: `${i} at one ${scope} at a time: penalty (nats/token, 95% CI) and share of the whole-model penalty`,
          id: `${id}-table`, head, rows}),
        nllRows.length ? el('details', {}, el('summary', {}, `NLL per ${scope}: ${i}`),
          metricTable(ix, `NLL with ${i} at one ${scope} (nats/token)`, nllRows, {shown, rowHead: scope, id: `${id}-nll`})) : null);
    }
    if (!parts.length) return null;
    return section('Dependence per layer', 'Each intervention of per_layer_interventions replayed at one group of sites (per_layer_scope; layer by default), the correct coefficients elsewhere: penalty(I at g) = NLL(I at g) − NLL(correct), with its 95% CI. Share = penalty(I at g) / penalty(I), shown when I\'s whole-model penalty CI lies above 0; the shares need not add to 100% (layers interact: sum / whole model).',
      parts);
  }

  function section(title, note, ...kids) {
    return el('section', {}, el('h2', {}, title), note ? el('p', {class: 'note'}, note) : null, kids);
  }

  // The report of one job: the tables of `fca report` (per model, and
  // mean ± sd [min, max] across models), penalty bars and per-layer plots.
  function renderReport(rep, vocab) {
    const ix = reportIndex(rep);
    if (!ix.models.length) return [el('p', {class: 'note'}, 'No result rows stored yet.')];
    const shown = new Set();
    const interventions = (rep.interventions || []).slice();
    const families = rep.families || [];
    const out = [];

    const weights = table({caption: 'Audited models', head: ['model', 'weights sha256', {text: 'eval windows', num: true}],
      rows: ix.models.map((m) => {
        const any = ix.find(m, 'replay', 'live_nll') || ix.find(m, 'correct', 'nll') || {};
        return {th: link(modelHref(m), m), cells: [el('td', {}, el('code', {}, shaPrefix(any.weights_sha256))), el('td', {class: 'num'}, any.n || '')]};
      })});
    out.push(section('Models', 'NLL in nats/token over the evaluation windows; replay fidelity is the largest |logit| difference of REPLAY(A(x)) against LIVE.',
      weights, metricTable(ix, 'Replay', [
        {i: 'replay', m: 'live_nll', label: withUnit(labelOf(vocab, 'live_nll'), unitOf(ix, 'replay', 'live_nll'))},
        {i: 'replay', m: 'max_abs_logit_diff', label: labelOf(vocab, 'max_abs_logit_diff')},
      ].filter((r) => ix.metric(r.i, r.m)), {shown, id: 'table-replay'})));

    // docs/fca.md "Lookup tables": per site, the in-sample shares beside the
    // out-of-sample ones (C's tables on E); an exact table on E is what the
    // architecture implies, not a finding. Unset fields: undefined or not stored.
    const lookupFields = [['eta2_token', 'site_eta2_token'], ['eta2_token_oos', 'site_eta2_token_oos'],
      ['eta2_token_position', 'site_eta2_token_position'], ['eta2_token_position_oos', 'site_eta2_token_position_oos']];
    const shareCell = (v) => el('td', {class: 'num'}, v === undefined || v === null ? '' : fixed(4)(num(v)));
    const lookupTable = (f, sites) => table({caption: `Lookup tables per site: ${f} (in-sample on E; out of sample = C's table on E)`,
      head: ['model', 'site', ...lookupFields.map(([, m]) => ({text: labelOf(vocab, m), num: true})), 'exact table on E'],
      rows: sites.map((s) => ({th: s.model, cells: [el('td', {}, s.site), ...lookupFields.map(([field]) => shareCell(s[field])),
        el('td', {}, s.lookup_table ? 'yes: expected from the architecture' : '')]}))});
    const variation = [];
    for (const f of families) {
      variation.push(el('h3', {}, f), metricTable(ix, `Coefficient variation: ${f}`,
        metricsUnder(vocab, 'variation', 'FAMILY').map(([metric, label]) => ({i: 'variation', m: {metric, family: f}, label})).filter((r) => ix.metric(r.i, r.m)),
      {shown, id: `table-variation-${f}`}));
      const sites = (rep.sites || []).filter((s) => s.family === f);
      if (sites.length) {
        const charts = ['mean', 'variance'].map((what) => layerChart({
          title: `${f}: coefficient ${what} per layer`, yLabel: what,
          series: ix.models.map((m) => ({name: m, points: sites.filter((s) => s.model === m).map((s) => ({
            x: num(s.layer), y: num(s[what]), tip: `${m} ${s.site}: ${general(num(s[what]))}`}))})),
        }));
        variation.push(el('div', {class: 'charts'}, charts), el('details', {}, el('summary', {}, `Per-layer table: ${f}`),
          table({caption: `Coefficient mean and variance per site: ${f}`,
            head: ['model', 'site', {text: 'layer', num: true}, {text: 'mean', num: true}, {text: 'variance', num: true}],
            rows: sites.map((s) => ({th: s.model, cells: [el('td', {}, s.site), el('td', {class: 'num'}, s.layer),
              el('td', {class: 'num', 'data-site': s.site, 'data-model': s.model, 'data-mean': s.mean}, general(num(s.mean))),
              el('td', {class: 'num', 'data-variance': s.variance}, general(num(s.variance)))]}))})));
        if (sites.some((s) => s.eta2_token !== undefined)) {
          variation.push(el('details', {}, el('summary', {}, `Lookup tables per site: ${f}`), lookupTable(f, sites)));
        }
      }
    }
    out.push(section('Coefficient variation', 'eta2 layer = share of the variance explained by one mean per site (layer identity); eta2 = by one mean per site and channel; the within-site variance splits into between-input and within-input parts. Lookup tables: eta2 token (and token, position) are in-sample on E, high by chance with few repeats per key; the out-of-sample ones (C\'s static_token / static_token_position table on E) are the ones to read, below 0 when the table predicts E worse than E\'s mean. A site that is an exact table of (token, position) on E (FeatureGate\'s layer 0, whose controller sees only the current token\'s embedding and its position) is expected from the architecture, not a finding.', variation));

    const chart = penaltyChartOf(ix, interventions, 'penalty-chart');
    out.push(section('Functional dependence', 'penalty = NLL(I) − NLL(correct) in nats/token, with its paired 95% bootstrap CI.',
      chart,
      metricTable(ix, 'NLL per intervention (nats/token)', interventions.filter((i) => ix.metric(i, 'nll'))
        .map((i) => ({i, m: 'nll', label: i})), {shown, rowHead: 'intervention', id: 'table-nll'}),
      metricTable(ix, 'Penalty per intervention (nats/token, 95% CI)', interventions.filter((i) => ix.metric(i, 'penalty'))
        .map((i) => ({i, m: 'penalty', label: i})), {shown, rowHead: 'intervention', id: 'table-penalty'})));

    const perGroup = perGroupSection(ix, vocab, interventions, shown);
    if (perGroup) out.push(perGroup);

    const retention = vocab.profiles.filter((i) => ix.metric(i, 'retention_pct'));
    // A token-keyed profile's retention is input dependence explained by
    // the token, not a static profile's (docs/fca.md "Reading the
    // interventions in groups"): the server's vocabulary says which.
    const retentionLabel = (i) => `${i}${vocab.readings[i] || ''}`;
    out.push(section('Gap retention', '100 × (NLL(B) − NLL(P)) / (NLL(B) − NLL(correct)) against the job\'s retention_baseline B (default global_mean); undefined unless the gap\'s CI lies above 0.',
      retention.length ? metricTable(ix, 'Gap retention of the static profiles (%)', retention.map((i) => ({i, m: 'retention_pct', label: retentionLabel(i)})),
        {shown, rowHead: 'profile', id: 'table-retention'}) : el('p', {}, 'No retention rows.')));

    const execution = metricsUnder(vocab, 'execution').filter(([m]) => ix.metric('execution', m) || ix.twin('execution', m));
    // The twin is timed in every model's pairs: each model's column shows
    // the twin's median of its own pairs (dense latency), and the twin's
    // column no latency of its own (an older job stored one, from one
    // model's pairs).
    const mismatch = ((rep.job || {}).spec || {}).dense_twin_mismatch;
    out.push(section('Execution', 'Counted blocks and matmul FLOPs per token (a mixture of experts: routed experts per token at each router layer, k of E); latency and dense latency: medians of the model\'s and of the dense twin\'s forwards in the model\'s own pairs; slowdown = geometric mean over interleaved pairs of t_model / t_dense, minus 1, with the Student t-interval of both timing blocks\' pairs pooled; the verdict says slower (faster) only when each of the two timing blocks\' own CIs lies above (below) 0, else no detectable difference, whatever the pooled CI.',
      mismatch ? el('p', {class: 'note', id: 'twin-mismatch'}, `The spec lets the dense twin differ from the models (dense_twin_mismatch: ${mismatch}).`) : null,
      verdictLine(ix, rep.dense_twin),
      metricTable(ix, 'Execution', execution.map(([m, label]) => ({i: 'execution', m, label: m === 'slowdown_verdict' ? 'verdict vs dense twin' : label})),
        {shown, twin: rep.dense_twin, id: 'table-execution', twinOmits: (m) => m === 'latency_us_per_token',
          cell: (model, row) => (metricOf(row.m) === 'blocks_per_token' ? expertsOfE(ix, model) : null)})));

    // Mixture-of-experts routing, per layer (docs/moe.md): the execution
    // metrics per router layer (experts run per token, the load's entropy),
    // each expert's share, and each intervention's top-k agreement with
    // LIVE, overall and per layer; which they are, the vocabulary says.
    const entries = ix.entries();
    const under = (i, scope) => metricsUnder(vocab, i, scope).map(([metric]) => metric);
    const layerMetrics = under('execution', 'LAYER');
    const routingLayers = [...new Set(entries.filter((e) => e.i === 'execution' && layerMetrics.includes(e.key.metric))
      .map((e) => Number(e.key.layer)))].sort((a, b) => a - b);
    if (routingLayers.length) {
      const perLayer = (metric, label) => routingLayers.map((l) => ({i: 'execution', m: {metric, layer: l}, label: `${label}, layer ${l}`}));
      const layerVocab = metricsUnder(vocab, 'execution', 'LAYER');
      const charts = layerVocab.map(([metric, label, unit]) => layerChart({
        title: `${withUnit(label, unit)} per layer`, yLabel: unit,
        series: ix.models.map((m) => ({name: m, points: routingLayers.map((l) => {
          const r = ix.find(m, 'execution', {metric, layer: l});
          return {x: l, y: r ? num(r.value) : NaN, tip: `${m} layer ${l}: ${r ? general(num(r.value)) : '–'}`};
        })})),
      }));
      const expertMetrics = under('execution', 'EXPERT');
      const shares = entries.filter((e) => e.i === 'execution' && expertMetrics.includes(e.key.metric))
        .sort((a, b) => a.key.layer - b.key.layer || a.key.expert - b.key.expert)
        .map((e) => ({i: 'execution', m: e.key, label: `layer ${e.key.layer}, expert ${e.key.expert}`}));
      // Per intervention, how often it routes a (token, layer) to LIVE's
      // expert set: overall, then per router layer (the metrics of every
      // intervention per layer that are no group scope's).
      const groupMetrics = vocab.groupScopes.flatMap((g) => [g.nll_metric, g.penalty_metric]);
      const layerAgreementMetrics = under('', 'LAYER').filter((metric) => !groupMetrics.includes(metric));
      const agreement = entries.filter((e) => e.key.metric === 'topk_agreement')
        .map((e) => ({i: e.i, m: e.key, label: e.i}));
      // One table per such metric (agreement, overlap), by intervention and layer.
      const layerTables = layerAgreementMetrics.map((metric) => [metric, entries.filter((e) => e.key.metric === metric)
        .map((e) => ({i: e.i, m: e.key, label: `${e.i}, layer ${e.key.layer}`}))
        .sort((a, b) => a.i.localeCompare(b.i) || Number(a.m.layer) - Number(b.m.layer))]).filter(([, rows]) => rows.length);
      const overlap = entries.filter((e) => e.key.metric === 'topk_overlap')
        .map((e) => ({i: e.i, m: e.key, label: e.i}));
      out.push(section('Routing', 'Mixture of experts: each intervention\'s top-k agreement with LIVE (the fraction of (token, router layer) routed to LIVE\'s expert set) and top-k overlap (the mean share of LIVE\'s k experts it keeps), then, over every evaluation token (LIVE\'s recorded router coefficients through the model\'s own top-k), routed experts run per token, the entropy of the experts\' shares of the load (ln E when balanced) and each expert\'s share, per layer; last, for a chosen layer, how often each pair of experts is chosen together and the experts the most frequent token ids go to.',
        agreement.length ? metricTable(ix, 'Top-k agreement with LIVE', agreement, {shown, rowHead: 'intervention', id: 'table-topk'}) : null,
        overlap.length ? metricTable(ix, 'Top-k overlap with LIVE: mean |S ∩ S_live| / k', overlap, {shown, rowHead: 'intervention', id: 'table-topk-overlap'}) : null,
        layerTables.map(([metric, rows]) => el('details', {}, el('summary', {}, `${labelOf(vocab, metric)}, per layer`),
          metricTable(ix, `${labelOf(vocab, metric)}, per router layer`, rows,
            {shown, rowHead: 'intervention', id: metric === 'layer_topk_agreement' ? 'table-layer-topk' : `table-${metric.replace(/_/g, '-')}`}))),
        el('div', {class: 'charts'}, charts),
        metricTable(ix, 'Routing per layer', layerVocab.flatMap(([metric, label, unit]) => perLayer(metric, withUnit(label, unit))),
          {shown, id: 'table-routing'}),
        el('details', {}, el('summary', {}, 'Expert shares'), metricTable(ix, 'Share of each layer\'s load per expert', shares, {shown, id: 'table-expert-share'})),
        routingStatistics(ix, entries, shown)));
    }

    // Whatever else is stored (the per-site rows are shown above).
    const rest = ix.entries().filter((e) => !shown.has(keyId(e.i, e.key)));
    if (rest.length) {
      out.push(section('Other rows', null, metricTable(ix, 'Other stored rows',
        rest.map((e) => ({i: e.i, m: e.key, label: withUnit(`${e.i} / ${e.name}`, unitOf(ix, e.i, e.key))})), {id: 'table-other'})));
    }
    if (ix.models.length > 1) {
      out.push(el('p', {class: 'note'}, `mean ± sd [min, max]: across the ${ix.models.length} audited models (sample standard deviation).`));
    }
    return out;
  }

  Object.assign(window.fca, {reportIndex, section, renderReport});
})();
