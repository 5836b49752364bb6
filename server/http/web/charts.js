// fca dashboard: the charts, drawn as SVG: grouped bars with CI whiskers
// and lines over layers. Nothing rests on colour alone: every series also
// has its number, fill pattern, marker shape and line style.
'use strict';

(() => {
  const {COLOURS, DASHES, el, sv, nextId, general} = window.fca;

  // Round ticks covering [lo, hi]: steps of 1, 2 or 5 times a power of ten.
  function ticks(lo, hi) {
    if (!isFinite(lo) || !isFinite(hi) || !(hi > lo)) return [];
    const raw = (hi - lo) / 5;
    const power = Math.pow(10, Math.floor(Math.log10(raw)));
    let step = power;
    for (const m of [2, 5, 10]) if (raw > step) step = m * power;
    const out = [];
    for (let k = Math.ceil(lo / step); k <= Math.floor(hi / step) && out.length < 12; k++) {
      out.push(k * step);
    }
    return out;
  }

  // A y axis over the values (padded; a flat series still gets a range).
  function yScale(values, top, bottom) {
    const finite = values.filter((v) => isFinite(v));
    let lo = Math.min(...finite);
    let hi = Math.max(...finite);
    if (!finite.length) { lo = 0; hi = 1; }
    const mag = Math.max(Math.abs(lo), Math.abs(hi));
    if (!(hi - lo > 1e-9 * mag)) {
      const pad = mag === 0 ? 1 : mag * 0.1;
      lo -= pad;
      hi += pad;
    }
    const pad = (hi - lo) * 0.06;
    lo -= pad;
    hi += pad;
    const y = (v) => top + ((hi - v) / (hi - lo)) * (bottom - top);
    return {lo, hi, y};
  }

  function axis(svg, scale, left, right) {
    for (const t of ticks(scale.lo, scale.hi)) {
      const y = scale.y(t);
      svg.append(sv('line', {x1: left, y1: y, x2: right, y2: y, stroke: t === 0 ? '#444' : '#ddd'}),
        sv('text', {x: left - 6, y: y + 4, 'text-anchor': 'end', class: 'tick'}, general(t)));
    }
  }

  // Fill pattern k (solid, hatched, dotted ...) in colour k, defined in `defs`.
  function pattern(defs, k) {
    const id = nextId('pat');
    const c = COLOURS[k % COLOURS.length];
    const p = sv('pattern', {id, patternUnits: 'userSpaceOnUse', width: 6, height: 6});
    p.append(sv('rect', {width: 6, height: 6, fill: k % 7 === 0 ? c : '#fff'}));
    const stroke = {stroke: c, 'stroke-width': 1.6};
    switch (k % 7) {
      case 1: p.append(sv('path', Object.assign({d: 'M-1,7 L7,-1'}, stroke))); break;
      case 2: p.append(sv('circle', {cx: 3, cy: 3, r: 1.6, fill: c})); break;
      case 3: p.append(sv('path', Object.assign({d: 'M-1,7 L7,-1 M-1,-1 L7,7'}, stroke))); break;
      case 4: p.append(sv('path', Object.assign({d: 'M0,3 H6'}, stroke))); break;
      case 5: p.append(sv('path', Object.assign({d: 'M3,0 V6'}, stroke))); break;
      case 6: p.append(sv('path', Object.assign({d: 'M-1,-1 L7,7'}, stroke))); break;
      default: break;
    }
    defs.append(p);
    return `url(#${id})`;
  }

  // Marker k at (x, y): circle, square, triangle, diamond, inverted
  // triangle, plus, cross.
  function marker(k, x, y, r = 4) {
    const c = COLOURS[k % COLOURS.length];
    const a = {fill: c, stroke: c, 'stroke-width': 1.5};
    const pts = (list) => list.map(([dx, dy]) => `${x + dx},${y + dy}`).join(' ');
    switch (k % 7) {
      case 0: return sv('circle', Object.assign({cx: x, cy: y, r}, a));
      case 1: return sv('rect', Object.assign({x: x - r, y: y - r, width: 2 * r, height: 2 * r}, a));
      case 2: return sv('polygon', Object.assign({points: pts([[0, -r - 1], [r + 1, r], [-r - 1, r]])}, a));
      case 3: return sv('polygon', Object.assign({points: pts([[0, -r - 1], [r + 1, 0], [0, r + 1], [-r - 1, 0]])}, a));
      case 4: return sv('polygon', Object.assign({points: pts([[0, r + 1], [r + 1, -r], [-r - 1, -r]])}, a));
      case 5: return sv('path', Object.assign({d: `M${x - r},${y} H${x + r} M${x},${y - r} V${y + r}`}, a, {'stroke-width': 2.5}));
      default: return sv('path', Object.assign({d: `M${x - r},${y - r} L${x + r},${y + r} M${x - r},${y + r} L${x + r},${y - r}`}, a, {'stroke-width': 2.5}));
    }
  }

  // The legend: each series' number, swatch (pattern or marker and line)
  // and name, so nothing rests on colour alone.
  function legend(series, kind) {
    return el('ul', {class: 'legend'}, series.map((name, k) => {
      const s = sv('svg', {width: kind === 'bar' ? 16 : 30, height: 16, 'aria-hidden': 'true'});
      if (kind === 'bar') {
        const defs = sv('defs');
        s.append(defs, sv('rect', {x: 1, y: 1, width: 14, height: 14, fill: pattern(defs, k),
          stroke: COLOURS[k % COLOURS.length]}));
      } else {
        s.append(sv('line', {x1: 1, y1: 8, x2: 29, y2: 8, stroke: COLOURS[k % COLOURS.length],
          'stroke-width': 1.5, 'stroke-dasharray': DASHES[k % DASHES.length]}), marker(k, 15, 8, 3.5));
      }
      return el('li', {}, s, el('span', {}, `${k + 1}. ${name}`));
    }));
  }

  // A chart keeps its drawn size (its text stays at the CSS px sizes of
  // style.css) and scrolls sideways in its box where the page is narrower.
  function chartWrap(svg, title) {
    return el('div', {class: 'chart-wrap', role: 'region', 'aria-label': title, tabindex: 0}, svg);
  }

  // Room for a chart's title (bold 12 px from x = 64; 7.5 px a character
  // covers the system fonts' widest digits and capitals).
  const titleWidth = (title) => 64 + 7.5 * title.length + 8;

  function chartSvg(width, height, title) {
    const titleId = nextId('chart-title');
    const svg = sv('svg', {class: 'chart', width, height, viewBox: `0 0 ${width} ${height}`,
      role: 'img', 'aria-labelledby': titleId});
    svg.append(sv('title', {id: titleId}, title),
      sv('text', {x: 64, y: 16, class: 'title'}, title));
    return svg;
  }

  // Grouped bars with CI whiskers: groups [{label, bars: [{k, value, lo, hi,
  // tip}], summary: {mean, sd, tip}}], series names. Every bar carries its
  // series number above it.
  function barChart({title, yLabel, groups, series, id, note}) {
    const n = series.length + (groups.some((g) => g.summary) ? 1 : 0);
    const barW = Math.max(14, Math.min(40, 240 / Math.max(n, 1)));
    // Wide enough for its label too (12 px text, about 7.5 px a character):
    // one model's bars alone are narrower than an intervention's name.
    const labelW = 7.5 * Math.max(0, ...groups.map((g) => g.label.length)) + 30;
    const groupW = Math.max(n * barW + 30, labelW);
    const left = 64, right = 16, top = 30, bottom = 250;
    const width = Math.max(titleWidth(title), left + right + Math.max(1, groups.length) * groupW);
    const svg = chartSvg(width, bottom + 44, title);
    const defs = sv('defs');
    svg.append(defs);
    const fills = series.map((_, k) => pattern(defs, k));
    const values = [0];
    for (const g of groups) {
      for (const b of g.bars) values.push(b.value, b.lo, b.hi);
      if (g.summary) values.push(g.summary.mean - g.summary.sd, g.summary.mean + g.summary.sd);
    }
    const scale = yScale(values.filter((v) => v !== undefined), top, bottom);
    axis(svg, scale, left, width - right);
    svg.append(sv('text', {x: 14, y: (top + bottom) / 2, transform: `rotate(-90 14 ${(top + bottom) / 2})`,
      'text-anchor': 'middle', class: 'tick'}, yLabel));
    groups.forEach((g, gi) => {
      const g0 = left + gi * groupW + 15;
      const x0 = g0 + (groupW - 30 - n * barW) / 2;  // the bars centred under the label
      for (const b of g.bars) {
        if (!isFinite(b.value)) continue;
        const x = x0 + b.k * barW;
        const y = scale.y(b.value);
        const y0 = scale.y(0);
        const c = COLOURS[b.k % COLOURS.length];
        svg.append(sv('rect', {x: x + 1, y: Math.min(y, y0), width: barW - 2, height: Math.max(1, Math.abs(y0 - y)),
          fill: fills[b.k], stroke: c, 'data-series': b.k, 'data-group': g.label, 'data-value': b.value},
        sv('title', {}, b.tip)));
        const xm = x + barW / 2;
        let labelY = Math.min(y, y0) - 4;
        if (isFinite(b.lo) && isFinite(b.hi)) {
          const yl = scale.y(b.lo);
          const yh = scale.y(b.hi);
          svg.append(sv('path', {d: `M${xm},${yl} V${yh} M${xm - 4},${yl} H${xm + 4} M${xm - 4},${yh} H${xm + 4}`,
            stroke: '#222', 'stroke-width': 1.5, fill: 'none'}));
          labelY = Math.min(labelY, yh - 4);
        }
        svg.append(sv('text', {x: xm, y: labelY, 'text-anchor': 'middle', class: 'tick'}, String(b.k + 1)));
      }
      if (g.summary && isFinite(g.summary.mean)) {
        const xm = x0 + series.length * barW + barW / 2;
        const s = g.summary;
        svg.append(sv('path', {d: `M${xm},${scale.y(s.mean - s.sd)} V${scale.y(s.mean + s.sd)}`,
          stroke: '#000', 'stroke-width': 1.5}),
        sv('polygon', {points: `${xm},${scale.y(s.mean) - 6} ${xm + 6},${scale.y(s.mean)} ${xm},${scale.y(s.mean) + 6} ${xm - 6},${scale.y(s.mean)}`,
          fill: '#000'}, sv('title', {}, s.tip)));
      }
      svg.append(sv('text', {x: g0 + (groupW - 30) / 2, y: bottom + 18, 'text-anchor': 'middle'}, g.label));
    });
    const kids = [chartWrap(svg, title), legend(series, 'bar')];
    if (groups.some((g) => g.summary)) kids.push(el('p', {class: 'note'}, '◆ with a bar: mean ± sd across the models of the job.'));
    return el('figure', {id}, note ? el('figcaption', {}, note) : null, kids);
  }

  // Lines over layers: series [{name, points: [{x, y, tip}]}]; each with its
  // marker shape, line style and number at its last point.
  function layerChart({title, yLabel, series}) {
    const maxLayer = Math.max(0, ...series.flatMap((s) => s.points.map((p) => p.x)));
    const left = 64, right = 30, top = 30, bottom = 200;
    const width = Math.max(360, titleWidth(title), left + right + 60 * (maxLayer + 1));
    const svg = chartSvg(width, bottom + 46, title);
    const scale = yScale(series.flatMap((s) => s.points.map((p) => p.y)), top, bottom);
    axis(svg, scale, left, width - right);
    const step = (width - right - left) / (maxLayer + 1);
    const x = (layer) => left + step * (layer + 0.5);
    for (let l = 0; l <= maxLayer; l++) {
      svg.append(sv('text', {x: x(l), y: bottom + 18, 'text-anchor': 'middle', class: 'tick'}, String(l)));
    }
    svg.append(sv('text', {x: (left + width - right) / 2, y: bottom + 36, 'text-anchor': 'middle', class: 'tick'}, 'layer'),
      sv('text', {x: 14, y: (top + bottom) / 2, transform: `rotate(-90 14 ${(top + bottom) / 2})`,
        'text-anchor': 'middle', class: 'tick'}, yLabel));
    series.forEach((s, k) => {
      const pts = s.points.filter((p) => isFinite(p.y));
      if (!pts.length) return;
      svg.append(sv('polyline', {points: pts.map((p) => `${x(p.x)},${scale.y(p.y)}`).join(' '), fill: 'none',
        stroke: COLOURS[k % COLOURS.length], 'stroke-width': 1.5, 'stroke-dasharray': DASHES[k % DASHES.length]}));
      for (const p of pts) {
        const m = marker(k, x(p.x), scale.y(p.y));
        m.append(sv('title', {}, p.tip));
        m.setAttribute('data-series', k);
        svg.append(m);
      }
      const last = pts[pts.length - 1];
      svg.append(sv('text', {x: x(last.x) + 8, y: scale.y(last.y) - 6, class: 'tick'}, String(k + 1)));
    });
    return el('figure', {}, chartWrap(svg, title), legend(series.map((s) => s.name), 'line'));
  }

  Object.assign(window.fca, {barChart, layerChart});
})();
