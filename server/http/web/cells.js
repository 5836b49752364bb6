// fca dashboard: how a stored result is shown in a table cell (the digits
// of `fca report`), one model's row or the summary across models.
'use strict';

(() => {
  const {resultF, el, num, general, fixed, signed, verdictWord, metricOf} = window.fca;

  // How a metric is shown (the same digits as `fca report`). `scale`: what
  // the shown number is of the stored value (slowdown is shown in %).
  function metricFormat(metric) {
    if (metric === 'nll' || metric === 'live_nll') return {f: fixed(4), sd: fixed(4)};
    if (metric === 'penalty') return {f: signed(4), sd: fixed(4)};
    if (metric === undefined) return {f: general, sd: general};
    if (metric === 'retention_pct') return {f: fixed(1), sd: fixed(1)};
    if (metric === 'eta2' || metric === 'eta2_layer' || metric === 'blocks_executed_fraction') {
      return {f: fixed(4), sd: fixed(4)};
    }
    if (metric.endsWith('_us_per_token')) return {f: fixed(2), sd: fixed(2)};
    if (metric === 'slowdown_verdict') return {f: verdictWord, sd: general, words: true};
    if (metric === 'slowdown' || metric === 'flops_overhead') {
      return {f: (v) => `${signed(1)(100 * v)}%`, sd: (v) => `${fixed(1)(100 * v)}%`, scale: 100};
    }
    return {f: general, sd: general};
  }

  // A table cell for one stored row: "value [ci_low, ci_high]" or
  // "undefined", with the exact numbers in data- attributes.
  function resultCell(r, metric, extra) {
    const attrs = Object.assign({class: 'num'}, extra);
    if (!r) return el('td', attrs, '–');
    const {f, scale, words} = metricFormat(metricOf(metric));
    const defined = resultF.defined(r);
    const [lo, hi] = [resultF.ciLow(r), resultF.ciHigh(r)];
    Object.assign(attrs, {
      'data-model': resultF.model(r), 'data-intervention': resultF.intervention(r), 'data-metric': resultF.metric(r),
      'data-value': defined ? resultF.value(r) : null, 'data-defined': defined ? 'true' : 'false',
      'data-ci-low': lo, 'data-ci-high': hi, 'data-scale': scale, 'data-words': words ? 'true' : null,
    });
    if (!defined) return el('td', attrs, 'undefined');
    let text = f(num(resultF.value(r)));
    if (!words && lo !== undefined && hi !== undefined) text += ` [${f(num(lo))}, ${f(num(hi))}]`;
    return el('td', attrs, text);
  }

  // "mean ± sd [min, max]" across the audited models (defined values only;
  // one model's value alone: no spread to show);
  // for a metric shown as words, how many models say each word ("2 slower,
  // 1 no detectable difference", as `fca report` does).
  function acrossCell(m, extra) {
    const a = m && resultF.across(m);
    const attrs = Object.assign({class: 'num'}, extra);
    if (!a || (num(a.n) === 0 && num(a.undefined) === 0)) return el('td', attrs, '–');
    const {f, sd, scale, words} = metricFormat(resultF.key(m).metric);
    if (words) {
      const counts = new Map();
      for (const r of resultF.perModel(m).filter(resultF.defined)) {
        const w = f(num(resultF.value(r)));
        counts.set(w, (counts.get(w) || 0) + 1);
      }
      return el('td', Object.assign(attrs, {'data-across': 'true', 'data-words': 'true', 'data-intervention': resultF.intervention(m),
        'data-metric': resultF.metric(m)}), [...counts].map(([w, n]) => `${n} ${w}`).join(', ') || 'undefined');
    }
    const n = num(a.n);
    const undef = num(a.undefined) || 0;
    Object.assign(attrs, {
      'data-across': 'true', 'data-intervention': resultF.intervention(m), 'data-metric': resultF.metric(m),
      'data-n': n, 'data-scale': scale,
    });
    if (n === 0) return el('td', attrs, 'undefined');
    Object.assign(attrs, {'data-mean': a.mean, 'data-sd': a.sd, 'data-min': a.min, 'data-max': a.max});
    let text = n > 1 ? `${f(num(a.mean))} ± ${sd(num(a.sd))} [${f(num(a.min))}, ${f(num(a.max))}]` : f(num(a.mean));
    if (undef > 0) text += ` (${undef} undefined)`;
    return el('td', attrs, text);
  }

  Object.assign(window.fca, {metricFormat, resultCell, acrossCell});
})();
