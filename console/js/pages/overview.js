// overview.js - #/overview: the node, its totals, and live charts (charts.js, uPlot) of message
// rates and queued messages, computed here from successive /api/overview counters, so the
// node does nothing more than answer that one GET. The samples are kept for the last 10
// minutes while the console stays open (also across pages). A node in a cluster of more than
// one (GET /api/cluster, for monitoring and administrator users: the API's rule) also shows its
// members, their roles, which are in sync and their lag (cluster.js's table). The node's uptime,
// memory and disk come from GET /api/nodes, which is for the same users (RabbitMQ's rule:
// management and policymaker users see no nodes): the others are not asked for it, and the
// overview says why those figures are missing instead of failing on the API's refusal.
import { get } from '../api.js';
import { h, replace, fmtNum, fmtBytes, fmtDuration, table, link } from '../dom.js';
import { sampler, lineChart } from '../charts.js';
import { nodesTable } from './cluster.js';

// RabbitMQ's message_stats names; deliver and get include their _no_ack kinds here
const RATES = [['publish', 'publish', '#2f6f9f'], ['confirm', 'confirm', '#6a3d9a'],
  ['deliver', 'deliver', '#1f7a3d'], ['ack', 'ack', '#a86200'],
  ['redeliver', 'redeliver', '#b3261e'], ['get', 'get', '#4d4d4d']];
const sumStats = (s) => ({ ...s, deliver: (s.deliver || 0) + (s.deliver_no_ack || 0),
  get: (s.get || 0) + (s.get_no_ack || 0) });
// kept across visits to the page while the console stays open
const hist = sampler(RATES.map((r) => r[0]), ['messages_ready', 'messages_unacknowledged']);

// What a user who may not GET /api/nodes is told where the node's figures would be.
export const NO_NODES = 'The node\'s memory, disk and uptime are shown to monitoring and ' +
  'administrator users only (GET /api/nodes refuses the others).';

export default {
  mount(main, params, ctx) {
    const head = h('div');
    const cards = h('div', { class: 'cards', id: 'overview-totals' });
    const charts = h('div', { class: 'charts' });
    const nodeBox = h('div', { id: 'overview-node' });
    const listeners = h('div', { id: 'overview-listeners' });
    const clusterBox = h('div', { id: 'overview-cluster', hidden: true });
    main.append(head, clusterBox, h('h2', {}, 'Totals'), cards, h('h2', {}, 'Charts'), charts,
      h('h2', {}, 'Memory and alarms'), nodeBox, h('h2', {}, 'Listeners'), listeners);
    const rateChart = lineChart(charts, 'Message rates (per second)', 'chart-rates', RATES.map(([, l, c]) => [l, c]));
    const qChart = lineChart(charts, 'Queued messages', 'chart-queued', [['ready', '#2f6f9f'], ['unacked', '#a86200']]);
    return {
      async refresh() {
        // the cluster panel is an extra: its refusal or failure never breaks the overview
        // (a node that does not answer at all fails the other two requests too)
        const mon = ctx.can.monitoring;
        const [o, nodes, c] = await Promise.all([get('/overview'), mon ? get('/nodes') : null,
          mon ? get('/cluster').catch(() => null) : null]);
        const members = (c && c.nodes) || [];
        clusterBox.hidden = members.length < 2;
        if (members.length >= 2) {
          const insync = members.filter((m) => m.insync).length;
          replace(clusterBox, h('h2', {}, 'Cluster'),
            h('p', { id: 'overview-cluster-summary' }, `Cluster ${c.name}: leader ${c.leader === null ? '(none elected)' : c.leader}, ` +
              `epoch ${c.epoch}, ${members.length} nodes, ${insync} in sync. `, link('Cluster page', 'cluster')),
            nodesTable(c, { id: 'overview-cluster-nodes' }));
        }
        hist.add(sumStats(o.message_stats || {}), o.queue_totals || {});
        const n = (nodes || [])[0] || {};
        replace(head, h('h1', {}, `Node ${o.node}`),
          h('p', { class: 'muted' }, `${o.product_name} ${o.product_version}; cluster ${o.cluster_name}; ` +
            `${mon ? `up ${fmtDuration(n.uptime || 0)}; ` : ''}MSMQ state `,
            h('span', { class: `state-${o.msmq_connected}` }, o.msmq_connected || '')));
        const ot = o.object_totals || {};
        const qt = o.queue_totals || {};
        const card = (k, v) => h('div', { class: 'card' }, h('div', { class: 'muted' }, k), h('div', { class: 'v' }, fmtNum(v)));
        replace(cards, card('Connections', ot.connections), card('Channels', ot.channels), card('Queues', ot.queues),
          card('Exchanges', ot.exchanges), card('Consumers', ot.consumers), card('Messages', qt.messages),
          card('Ready', qt.messages_ready), card('Unacked', qt.messages_unacknowledged));
        rateChart.setData([hist.t, ...hist.rates]);
        qChart.setData([hist.t, ...hist.levels]);
        // Bars are <meter>s (no inline style under the CSP): memory fills toward its limit;
        // disk fills as free space shrinks toward disk_free_limit (full = the alarm).
        const memMax = Math.max(n.mem_limit || 0, 1);
        const diskFree = Math.max(n.disk_free || 0, 1);
        const rows = [
          ['Memory used', `${fmtBytes(n.mem_used)} of ${fmtBytes(n.mem_limit)} (alarm at the limit)`, n.mem_alarm,
            h('meter', { id: 'meter-memory', min: '0', max: String(memMax), high: String(0.8 * memMax), value: String(Math.min(n.mem_used || 0, memMax)) })],
          ['Disk free', `${fmtBytes(n.disk_free)} (alarm below ${fmtBytes(n.disk_free_limit)})`, n.disk_free_alarm,
            h('meter', { id: 'meter-disk', min: '0', max: String(diskFree), high: String(0.8 * diskFree), value: String(Math.min(n.disk_free_limit || 0, diskFree)) })],
        ];
        if (mon) {
          replace(nodeBox, h('table', { class: 'kv' }, rows.map(([k, v, alarm, bar]) =>
            h('tr', {}, h('th', {}, k), h('td', {}, bar, ' ', v, alarm ? h('span', { class: 'alarm' }, '  ALARM') : '')))));
        } else {
          replace(nodeBox, h('p', { class: 'muted' }, NO_NODES));
        }
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
