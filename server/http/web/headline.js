// fca dashboard: a job's headline, shown above its settings: the slowdown
// verdicts against the dense twin and every intervention's whole-model
// penalty with its CI, per model and across models. These are the rows of
// `fca report`'s EXECUTION (VERDICT, SLOWDOWN) and FUNCTIONAL DEPENDENCE
// (PENALTY) sections (client/report_format.cc), interventions in the same
// group order; the full tables stay in the report below.
'use strict';

(() => {
  const {resultF, el, table, num, verdictWord, metricFormat, resultCell, acrossCell, reportIndex} = window.fca;

  // The interventions with a penalty row, `correct` (the reference) left
  // out, grouped as `fca report` groups them (input-dependent,
  // input-independent, token-keyed: the vocabulary's order of groups).
  function penaltyInterventions(ix, rep, vocab) {
    const groups = [...new Set(vocab.interventions.map((i) => vocab.groups[i]))];
    const rank = (i) => {
      const g = groups.indexOf(vocab.groups[i]);
      return g < 0 ? groups.length : g;
    };
    return (rep.interventions || []).filter((i) => i !== 'correct' && ix.metric(i, 'penalty'))
      .map((i, k) => [rank(i), k, i]).sort((a, b) => a[0] - b[0] || a[1] - b[1]).map(([, , i]) => i);
  }

  // "Against the dense twin D: m1 slower (slowdown +31.7% [+31.1%, +32.4%]), ..."
  function verdicts(ix, twin) {
    const said = ix.models.map((m) => [m, ix.find(m, 'execution', 'slowdown_verdict'), ix.find(m, 'execution', 'slowdown')])
      .filter(([, v]) => v && resultF.defined(v));
    if (!said.length) return null;
    const f = metricFormat('slowdown').f;
    const slowdown = (r) => {
      if (!r || !resultF.defined(r)) return '';
      const ci = resultF.ciLow(r) !== undefined ? ` [${f(num(resultF.ciLow(r)))}, ${f(num(resultF.ciHigh(r)))}]` : '';
      return ` (slowdown ${f(num(resultF.value(r)))}${ci})`;
    };
    return el('p', {id: 'headline-verdicts'}, `Against the dense twin ${twin || ''}: `, said.map(([m, v, s], k) =>
      [k ? ', ' : '', `${m} `, el('strong', {'data-model': m, 'data-value': resultF.value(v)}, verdictWord(num(resultF.value(v)))),
        slowdown(s)]), '.');
  }

  // "value [lo, hi]" with the interval on a line of its own under the
  // value: narrow columns, so that three seeds and their mean fit a laptop.
  function ciBelow(td) {
    const text = td.textContent;
    const at = text.indexOf(' [');
    if (at > 0) td.replaceChildren(text.slice(0, at), ' ', el('span', {class: 'ci'}, text.slice(at + 1)));
    return td;
  }

  // One row per intervention, each group of them under a row naming the
  // group (a column of group names would push three seeds past a laptop's
  // width).
  function penalties(ix, interventions, vocab) {
    const many = ix.models.length > 1;
    const head = ['intervention', ...ix.models.map((m) => ({text: m, num: true}))];
    if (many) head.push({text: 'mean ± sd [min, max]', num: true});
    const rows = [];
    interventions.forEach((i, k) => {
      const group = vocab.groups[i] || '';
      if (group && (k === 0 || vocab.groups[interventions[k - 1]] !== group)) {
        rows.push({th: group, key: `group:${group}`, cls: 'group', cells: [el('td', {colspan: head.length - 1})]});
      }
      const cells = ix.models.map((m) => ciBelow(resultCell(ix.find(m, i, 'penalty'), 'penalty')));
      if (many) cells.push(ciBelow(acrossCell(ix.metric(i, 'penalty'))));
      rows.push({th: i, key: i, cells});
    });
    return table({caption: 'Penalty per intervention: NLL(I) − NLL(correct), nats/token, 95% CI', id: 'headline-penalties',
      head, rows});
  }

  // The headline of a job's report: [] until a model's rows are stored.
  function renderHeadline(rep, vocab) {
    const ix = reportIndex(rep);
    const interventions = penaltyInterventions(ix, rep, vocab);
    const verdictLine = verdicts(ix, rep.dense_twin);
    if (!ix.models.length || (!interventions.length && !verdictLine)) return [];
    return [el('section', {id: 'headline', 'aria-labelledby': 'headline-title'},
      el('h2', {id: 'headline-title'}, 'Headline'), verdictLine,
      interventions.length ? penalties(ix, interventions, vocab) : null,
      el('p', {class: 'note'}, 'Every table of the report, these rows included, is in the report below.'))];
  }

  Object.assign(window.fca, {renderHeadline});
})();
