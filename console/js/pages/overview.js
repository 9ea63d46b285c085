// overview.js - #/overview: the node, its totals, and live charts (uPlot) of message rates and
// queued messages. Rates are computed here from the differences between successive
// /api/overview counters, so the node does nothing more than answer that one GET. The samples
// are kept for the last 10 minutes while the console stays open (also across pages).
import uPlot from '../../vendor/uplot/uPlot.esm.js';
import { get } from '../api.js';
import { h, replace, fmtNum, fmtBytes, fmtDuration, table } from '../dom.js';

const KEEP_S = 600;
const RATES = [['publish', 'publish', '#2f6f9f'], ['deliver_get', 'deliver / get', '#1f7a3d'],
  ['ack', 'ack', '#a86200'], ['redeliver', 'redeliver', '#b3261e']];
const hist = { t: [], rates: RATES.map(() => []), ready: [], unacked: [], last: null };

function sample(o) {
  const now = Date.now() / 1000;
  const ms = o.message_stats || {};
  const prev = hist.last;
  hist.last = { t: now, ms };
  if (prev && now > prev.t) {
    const dt = now - prev.t;
    hist.t.push(now);
    RATES.forEach(([k], i) => hist.rates[i].push(Math.max(0, ((ms[k] || 0) - (prev.ms[k] || 0)) / dt)));
    const qt = o.queue_totals || {};
    hist.ready.push(qt.messages_ready || 0);
    hist.unacked.push(qt.messages_unacknowledged || 0);
    while (hist.t.length && hist.t[0] < now - KEEP_S) {
      hist.t.shift();
      hist.rates.forEach((a) => a.shift());
      hist.ready.shift();
      hist.unacked.shift();
    }
  }
}

function chart(title, id, series, el) {
  const wrap = h('div', { class: 'chart', id }, h('h3', {}, title));
  el.appendChild(wrap);
  const opts = {
    width: 520, height: 220,
    series: [{}, ...series.map(([label, color]) => ({ label, stroke: color, width: 2 }))],
    axes: [{}, { size: 60 }],
    scales: { x: { time: true } },
  };
  const data = [[], ...series.map(() => [])];
  return new uPlot(opts, data, wrap);
}

export default {
  mount(main, params, ctx) {
    const head = h('div');
    const cards = h('div', { class: 'cards', id: 'overview-totals' });
    const charts = h('div', { class: 'charts' });
    const nodeBox = h('div', { id: 'overview-node' });
    const listeners = h('div', { id: 'overview-listeners' });
    main.append(head, h('h2', {}, 'Totals'), cards, h('h2', {}, 'Charts'), charts,
      h('h2', {}, 'Memory and alarms'), nodeBox, h('h2', {}, 'Listeners'), listeners);
    const rateChart = chart('Message rates (per second)', 'chart-rates', RATES.map(([, l, c]) => [l, c]), charts);
    const qChart = chart('Queued messages', 'chart-queued', [['ready', '#2f6f9f'], ['unacked', '#a86200']], charts);
    return {
      async refresh() {
        const [o, nodes] = await Promise.all([get('/overview'), get('/nodes')]);
        sample(o);
        const n = (nodes || [])[0] || {};
        replace(head, h('h1', {}, `Node ${o.node}`),
          h('p', { class: 'muted' }, `${o.product_name} ${o.product_version}; cluster ${o.cluster_name}; up ${fmtDuration(n.uptime || 0)}; MSMQ state `,
            h('span', { class: `state-${o.msmq_connected}` }, o.msmq_connected || '')));
        const ot = o.object_totals || {};
        const qt = o.queue_totals || {};
        const card = (k, v) => h('div', { class: 'card' }, h('div', { class: 'muted' }, k), h('div', { class: 'v' }, fmtNum(v)));
        replace(cards, card('Connections', ot.connections), card('Channels', ot.channels), card('Queues', ot.queues),
          card('Exchanges', ot.exchanges), card('Consumers', ot.consumers), card('Messages', qt.messages),
          card('Ready', qt.messages_ready), card('Unacked', qt.messages_unacknowledged));
        rateChart.setData([hist.t, ...hist.rates]);
        qChart.setData([hist.t, hist.ready, hist.unacked]);
        const rows = [
          ['Memory used', `${fmtBytes(n.mem_used)} of ${fmtBytes(n.mem_limit)} (alarm at the limit)`, n.mem_alarm],
        ];
        if (n.disk_free !== undefined) rows.push(['Disk free', `${fmtBytes(n.disk_free)} (alarm below ${fmtBytes(n.disk_free_limit)})`, n.disk_free_alarm]);
        replace(nodeBox, h('table', { class: 'kv' }, rows.map(([k, v, alarm]) =>
          h('tr', {}, h('th', {}, k), h('td', {}, v, alarm ? h('span', { class: 'alarm' }, '  ALARM') : '')))));
        replace(listeners, table([
          { title: 'Protocol', get: (l) => l.protocol },
          { title: 'Address', get: (l) => l.ip_address },
          { title: 'Port', get: (l) => String(l.port), num: true },
        ], o.listeners || []));
      },
      unmount() { rateChart.destroy(); qChart.destroy(); },
    };
  },
};
