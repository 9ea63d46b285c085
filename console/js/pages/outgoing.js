// outgoing.js - #/outgoing: store and forward. Each outgoing queue's state at a glance, its
// messages, in flight, last error, EOD sequence info and connection history; Pause, Resume
// and EOD resend (MSMQ management actions, administrators only).
import { get, post } from '../api.js';
import { h, replace, table, fmtNum, fmtValue, act } from '../dom.js';

// Seconds since the epoch as a short UTC time.
const when = (t) => (typeof t === 'number' && t > 0 ? new Date(t * 1000).toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z') : '');

// The OutgoingTransferInfo members, one line each; a SEQUENCE_INFO as SeqID:SeqNo.
function eodLines(eod) {
  return Object.entries(eod || {}).map(([k, v]) => h('div', {},
    `${k.replace(/^Eod/, '')} `,
    v && typeof v === 'object' && 'SeqID' in v ? `${v.SeqID}:${v.SeqNo}` : fmtValue(v)));
}

export default {
  mount(main, params, ctx) {
    const list = h('div', { id: 'outgoing-list' });
    main.append(h('h1', {}, 'Outgoing queues'),
      h('p', { class: 'muted' }, 'Messages for queues of other nodes wait here until the link delivers them (store and forward).'),
      list);
    const action = (row, what, label) => {
      const b = h('button', { type: 'button', class: `btn-${what.toLowerCase()}`, dataset: { fmt: row.format_name } }, label);
      b.addEventListener('click', () => act(b, async () => {
        await post('/msmq/action', { object: `QUEUE=${row.format_name}`, action: what, vhost: row.vhost });
        ctx.refresh();
      }, `${label}: ${row.format_name}`));
      return b;
    };
    return {
      async refresh() {
        const rows = await get('/msmq/outgoing');
        if (!rows.length) {
          replace(list, h('p', { class: 'muted', id: 'outgoing-none' }, 'No outgoing queues: nothing was sent to another node yet.'));
          return;
        }
        replace(list, table([
          { title: 'Destination', get: (r) => r.format_name },
          { title: 'Vhost', get: (r) => r.vhost },
          { title: 'State', get: (r) => h('span', { class: `state-${r.state} outgoing-state` }, r.state) },
          { title: 'Messages', get: (r) => fmtNum(r.messages), num: true },
          { title: 'In flight', get: (r) => fmtNum(r.in_flight), num: true },
          { title: 'Sent / acked', get: (r) => `${fmtNum(r.sent)} / ${fmtNum(r.acked)}`, num: true },
          { title: 'Last error', get: (r) => (r.last_error ? `${r.last_error} (${when(r.last_error_time)})` : '') },
          { title: 'EOD', get: (r) => h('div', { class: 'small' }, eodLines(r.eod)) },
          { title: 'Connection history', get: (r) => (r.connection_history || []).slice(0, 5).map((c) => h('div', { class: 'small' }, `${when(c.time)} ${c.status_name || c.status} ${c.error || ''}`)) },
          { title: '', get: (r) => (ctx.can.admin ? [action(r, 'PAUSE', 'Pause'), action(r, 'RESUME', 'Resume'), action(r, 'EOD_RESEND', 'EOD resend')] : '') },
        ], rows, { id: 'outgoing-table' }));
      },
    };
  },
};
