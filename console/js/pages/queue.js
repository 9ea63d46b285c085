// queue.js - #/queues/VHOST/NAME: one queue (or subqueue q;sub): counts, arguments, consumers
// (a stream's each with its offset), a stream's log (segments, size, first and last offset, as
// RabbitMQ's console shows a stream), bindings, subqueues and journal, its MSMQ properties, and the actions: Get messages (browse
// without removing, or take), Publish, Purge (asks first, then shows the count), Delete
// (if-empty / if-unused; the refusal's reason when one applies), Move (by lookup id or count,
// in a transaction if one is chosen). Monitoring users see the queue without the actions.
import { get, post, del, seg } from '../api.js';
import { h, replace, link, kvTable, table, fmtNum, fmtBytes, fmtValue, act, field, say } from '../dom.js';
import { sampler, lineChart } from '../charts.js';

const MSMQ_PROPS = ['PATHNAME', 'FORMATNAME', 'TYPE', 'LOCATION', 'XACT', 'FOREIGN', 'STATE',
  'MESSAGE_COUNT', 'BYTES_IN_QUEUE', 'JOURNAL_MESSAGE_COUNT', 'BYTES_IN_JOURNAL',
  'SUBQUEUE_COUNT', 'SUBQUEUE_NAMES', 'EOD_SOURCE_INFO'];

function messagesTable(msgs) {
  return table([
    { title: 'Lookup id', get: (m) => fmtValue(m.lookup_id), num: true },
    { title: 'Exchange', get: (m) => m.exchange },
    { title: 'Routing key', get: (m) => m.routing_key },
    { title: 'Redelivered', get: (m) => fmtValue(m.redelivered) },
    { title: 'Moves', get: (m) => fmtValue(m.move_count), num: true },
    { title: 'Properties', get: (m) => h('pre', { class: 'payload' }, JSON.stringify(m.properties || {}, null, 1)) },
    { title: 'Payload', get: (m) => h('pre', { class: 'payload' }, `${m.payload_encoding === 'base64' ? '[base64] ' : ''}${m.payload}`) },
  ], msgs, { id: 'messages-table' });
}

export default {
  mount(main, params, ctx) {
    const [vhost, name] = params;
    const qpath = `/queues/${seg(vhost)}/${seg(name)}`;
    const title = h('h1', { id: 'queue-title' }, `Queue ${name}`);
    const summary = h('div', { id: 'queue-summary' });
    const args = h('div', { id: 'queue-arguments' });
    const subs = h('div', { id: 'queue-subqueues' });
    const consumers = h('div', { id: 'queue-consumers' });
    const streamHead = h('h2', { hidden: true }, 'Stream');
    const stream = h('div', { id: 'queue-stream' });
    const bindings = h('div', { id: 'queue-bindings' });
    const props = h('div', { id: 'queue-msmq' });
    const output = h('div', { id: 'messages-out' });
    main.append(h('p', {}, link('Queues', 'queues'), ` (vhost ${vhost})`), title, summary);
    const charts = h('div', { class: 'charts' });
    main.append(charts);
    const hist = sampler(['publish', 'deliver_get', 'ack'], ['messages_ready', 'messages_unacknowledged']);
    const rateChart = lineChart(charts, 'Rates (per second)', 'chart-queue-rates', [['publish', '#2f6f9f'], ['deliver / get', '#1f7a3d'], ['ack', '#a86200']]);
    const qChart = lineChart(charts, 'Messages', 'chart-queue-messages', [['ready', '#2f6f9f'], ['unacked', '#a86200']]);

    if (ctx.can.write) {
      // Get messages
      const count = h('input', { id: 'get-count', type: 'number', min: '1', value: '5', size: '4' });
      const mode = h('select', { id: 'get-mode' },
        h('option', { value: 'peek' }, 'Browse (nothing removed)'),
        h('option', { value: 'ack_requeue_true' }, 'Get and requeue'),
        h('option', { value: 'ack_requeue_false' }, 'Take and ack (removes)'));
      const getBtn = h('button', { id: 'btn-get', type: 'submit' }, 'Get messages');
      const getForm = h('form', {
        class: 'action', onsubmit: (ev) => {
          ev.preventDefault();
          act(getBtn, async () => {
            const n = Math.max(1, Number(count.value) || 1);
            const msgs = mode.value === 'peek'
              ? await get(`${qpath}/messages?count=${n}&offset=0`)
              : await post(`${qpath}/get`, { count: n, ackmode: mode.value, encoding: 'auto', truncate: 50000 });
            replace(output, h('p', { id: 'messages-count' }, `${msgs.length} message(s)`), messagesTable(msgs));
            ctx.refresh();
          });
        },
      }, field('Count', count), field('Mode', mode), getBtn);

      // Publish (through the default exchange, to this queue)
      const payload = h('textarea', { id: 'publish-payload' });
      const persistent = h('input', { id: 'publish-persistent', type: 'checkbox', checked: true });
      const headers = h('input', { id: 'publish-props', placeholder: '{"content_type": "text/plain"}', size: '30' });
      const pubBtn = h('button', { id: 'btn-publish', type: 'submit' }, 'Publish');
      const pubForm = h('form', {
        class: 'action', onsubmit: (ev) => {
          ev.preventDefault();
          act(pubBtn, async () => {
            const p = headers.value.trim() ? JSON.parse(headers.value) : {};
            if (persistent.checked) p.delivery_mode = 2;
            const r = await post(`/exchanges/${seg(vhost)}/amq.default/publish`, { routing_key: name, payload: payload.value, payload_encoding: 'string', properties: p });
            ctx.refresh();
            return r;
          }, (r) => (r && r.routed ? 'Message published' : 'Message published but not routed'));
        },
      }, field('Payload', payload), field('Properties (JSON)', headers), h('label', {}, persistent, ' Persistent'), pubBtn);

      // Purge: asks first, then says how many went
      const purgeBtn = h('button', { id: 'btn-purge', type: 'button', class: 'danger' }, 'Purge');
      purgeBtn.addEventListener('click', () => {
        if (!window.confirm(`Purge every message of queue ${name}?`)) return;
        act(purgeBtn, async () => {
          const r = await del(`${qpath}/contents`);
          ctx.refresh();
          return r;
        }, (r) => `Purged ${r.message_count} message(s)` + (r.purge_pending ? `; ${r.purge_pending} more once their consumers settle` : ''));
      });

      // Delete, with its conditions
      const ifEmpty = h('input', { id: 'delete-if-empty', type: 'checkbox' });
      const ifUnused = h('input', { id: 'delete-if-unused', type: 'checkbox' });
      const delBtn = h('button', { id: 'btn-delete', type: 'submit', class: 'danger' }, 'Delete');
      const delForm = h('form', {
        class: 'action', onsubmit: (ev) => {
          ev.preventDefault();
          if (!window.confirm(`Delete queue ${name}?`)) return;
          act(delBtn, async () => {
            const q = new URLSearchParams();
            if (ifEmpty.checked) q.set('if-empty', 'true');
            if (ifUnused.checked) q.set('if-unused', 'true');
            await del(`${qpath}${q.toString() ? `?${q}` : ''}`);
            location.hash = '#/queues';
            say(`Queue ${name} deleted`, false);
          });
        },
      }, h('label', {}, ifEmpty, ' if empty'), h('label', {}, ifUnused, ' if unused'), delBtn);

      // Move
      const dest = h('input', { id: 'move-dest', placeholder: `${name};poison`, required: true });
      const by = h('select', { id: 'move-by' }, h('option', { value: 'count' }, 'first N (count)'), h('option', { value: 'lookup_id' }, 'lookup id'));
      const n = h('input', { id: 'move-n', type: 'number', min: '0', value: '1', size: '8' });
      const tx = h('select', { id: 'move-tx' }, h('option', { value: '' }, 'none (at once)'));
      const moveBtn = h('button', { id: 'btn-move', type: 'submit' }, 'Move');
      const moveForm = h('form', {
        class: 'action', onsubmit: (ev) => {
          ev.preventDefault();
          act(moveBtn, async () => {
            const body = { destination: dest.value };
            body[by.value] = Number(n.value);
            if (tx.value) body.transaction = Number(tx.value);
            const r = await post(`${qpath}/move`, body);
            ctx.refresh();
            return r;
          }, (r) => `Moved ${r.moved !== undefined ? r.moved : 1} message(s) to ${dest.value}${tx.value ? ` in transaction ${tx.value} (commit it on the Transactions page)` : ''}`);
        },
      }, field('Destination (queue, q;subqueue, format name)', dest), field('By', by), field('N / lookup id', n), field('Transaction', tx), moveBtn);
      const loadTxs = async () => {
        const txs = await get('/transactions');
        const cur = tx.value;
        replace(tx, h('option', { value: '' }, 'none (at once)'), (txs || []).map((t) => h('option', { value: String(t.id) }, `#${t.id}`)));
        tx.value = cur;
      };
      tx.addEventListener('focus', () => { loadTxs().catch(() => {}); });
      loadTxs().catch(() => {});

      main.append(h('h2', {}, 'Actions'), h('div', { class: 'tools' }, purgeBtn), delForm,
        h('h3', {}, 'Get messages'), getForm, output, h('h3', {}, 'Publish'), pubForm,
        h('h3', {}, 'Move'), moveForm);
    }
    main.append(streamHead, stream, h('h2', {}, 'Arguments'), args, h('h2', {}, 'Subqueues and journal'), subs,
      h('h2', {}, 'Consumers'), consumers, h('h2', {}, 'Bindings'), bindings,
      h('h2', {}, 'MSMQ properties'), props);

    return {
      async refresh() {
        const q = await get(qpath);
        hist.add(q.message_stats || {}, q);
        rateChart.setData([hist.t, ...hist.rates]);
        qChart.setData([hist.t, ...hist.levels]);
        replace(summary, kvTable({
          State: q.state, Kind: q.outgoing ? 'outgoing' : q.kind, Type: q.type, Durable: q.durable, 'Auto delete': q.auto_delete,
          Exclusive: q.exclusive, Ready: fmtNum(q.messages_ready), Unacked: fmtNum(q.messages_unacknowledged),
          Total: fmtNum(q.messages), 'Purge pending': fmtNum(q.messages_purge_pending), Bytes: fmtBytes(q.message_bytes),
          Consumers: fmtNum(q.consumers), Published: fmtNum((q.message_stats || {}).publish),
          'Delivered / got': fmtNum((q.message_stats || {}).deliver_get), Acked: fmtNum((q.message_stats || {}).ack),
          'Format name': q.FormatName, 'Path name': q.PathName,
        }));
        const isStream = q.type === 'stream';
        streamHead.hidden = !isStream;
        replace(stream, isStream ? kvTable({
          Segments: fmtNum(q.segments), Size: fmtBytes(q.stream_bytes), 'First offset': fmtNum(q.first_offset),
          'Last offset': q.committed_offset === undefined ? 'none' : fmtNum(q.committed_offset),
          Leader: q.leader, Members: (q.members || []).join(', '), Online: (q.online || []).join(', '),
        }) : null);
        replace(args, Object.keys(q.arguments || {}).length ? kvTable(q.arguments) : h('p', { class: 'muted' }, 'none'));
        const sq = q.subqueues || [];
        replace(subs, sq.length ? table([
          { title: 'Name', get: (s) => link(s.name || String(s), 'queues', vhost, s.name || String(s)) },
          { title: 'Messages', get: (s) => fmtNum(s.messages), num: true },
        ], sq) : h('p', { class: 'muted' }, 'none'));
        const [binds, info] = await Promise.all([
          get(`${qpath}/bindings`).catch(() => []),
          q.FormatName ? get(`/msmq/info?object=${encodeURIComponent(`QUEUE=${q.FormatName}`)}&vhost=${encodeURIComponent(vhost)}&props=${MSMQ_PROPS.join(',')}`).catch((e) => ({ error: e.message })) : null,
        ]);
        const mine = q.consumer_details || [];
        replace(consumers, mine.length ? table([
          { title: 'Tag', get: (c) => c.consumer_tag },
          { title: 'Channel', get: (c) => (c.channel_details || {}).name || '' },
          { title: 'Ack required', get: (c) => fmtValue(c.ack_required) },
          { title: 'Prefetch', get: (c) => fmtValue(c.prefetch_count), num: true },
        ].concat(isStream ? [{ title: 'Offset', get: (c) => fmtNum(c.stream_offset), num: true }] : []),
        mine, { id: 'consumers-table' }) : h('p', { class: 'muted' }, 'none'));
        replace(bindings, table([
          { title: 'From', get: (b) => b.source || '(default exchange)' },
          { title: 'Routing key', get: (b) => b.routing_key },
          { title: 'Arguments', get: (b) => fmtValue(b.arguments) },
        ], binds || []));
        if (info && info.properties) {
          replace(props, table([
            { title: 'Property', get: (p) => p.name },
            { title: 'Type', get: (p) => p.vt },
            { title: 'Value', get: (p) => fmtValue(p.value) },
          ], info.properties, { id: 'msmq-props' }));
        } else {
          replace(props, h('p', { class: 'muted' }, info && info.error ? info.error : 'none'));
        }
      },
      unmount() { rateChart.destroy(); qChart.destroy(); },
    };
  },
};
