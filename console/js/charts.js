// charts.js - live charts (uPlot) fed by the counters a page already fetches: rates are the
// differences between two successive samples over the time between them, levels are plotted
// as they come. A series keeps the last KEEP_S seconds; the browser does all of it, the node
// only answers the GET it answers anyway.
import uPlot from '../vendor/uplot/uPlot.esm.js';
import { h } from './dom.js';

const KEEP_S = 600;

// A sampler of counters and levels: add(obj) takes one reading; rates[k] and levels[k] are
// arrays aligned with t.
export function sampler(rateKeys, levelKeys) {
  const s = { t: [], rates: rateKeys.map(() => []), levels: levelKeys.map(() => []), last: null };
  s.add = (counters, levels) => {
    const now = Date.now() / 1000;
    const prev = s.last;
    s.last = { t: now, c: { ...counters } };
    if (!prev || now <= prev.t) return;
    const dt = now - prev.t;
    s.t.push(now);
    rateKeys.forEach((k, i) => s.rates[i].push(Math.max(0, ((counters[k] || 0) - (prev.c[k] || 0)) / dt)));
    levelKeys.forEach((k, i) => s.levels[i].push(levels[k] || 0));
    while (s.t.length && s.t[0] < now - KEEP_S) {
      s.t.shift();
      s.rates.forEach((a) => a.shift());
      s.levels.forEach((a) => a.shift());
    }
  };
  return s;
}

// A chart under el: series = [[label, colour]]; returns the uPlot (setData, destroy).
export function lineChart(el, title, id, series) {
  const wrap = h('div', { class: 'chart', id }, h('h3', {}, title));
  el.appendChild(wrap);
  return new uPlot({
    width: 520,
    height: 220,
    series: [{}, ...series.map(([label, stroke]) => ({ label, stroke, width: 2 }))],
    axes: [{}, { size: 60 }],
    scales: { x: { time: true } },
  }, [[], ...series.map(() => [])], wrap);
}
