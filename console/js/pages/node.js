// node.js - #/node: the node's MSMQ management properties and its actions: Connect and
// Disconnect (online state: links to other nodes run or stop), Tidy (reclaims store segments
// and says what it freed). Actions are the administrator's. The node's own figures (name,
// memory, pid) come from GET /api/nodes, for monitoring and administrator users only (as the
// API and RabbitMQ have it): the others see the MSMQ machine's properties and a note instead.
import { get, post } from '../api.js';
import { h, replace, table, fmtValue, fmtBytes, act, kvTable } from '../dom.js';
import { NO_NODES } from './overview.js';

const PROPS = ['CONNECTED', 'TYPE', 'ACTIVEQUEUES', 'PRIVATEQ', 'DSSERVER', 'BYTES_IN_ALL_QUEUES'];

export default {
  mount(main, params, ctx) {
    const info = h('div', { id: 'node-props' });
    const nodeBox = h('div', { id: 'node-info' });
    const tidyOut = h('div', { id: 'tidy-result' });
    main.append(h('h1', {}, 'Node'), nodeBox);
    if (ctx.can.admin) {
      const mk = (id, label, actionName, after) => {
        const b = h('button', { id, type: 'button' }, label);
        b.addEventListener('click', () => act(b, async () => {
          const r = await post('/msmq/action', { object: 'MACHINE', action: actionName });
          if (after) after(r);
          ctx.refresh();
          return r;
        }, `${label}: done`));
        return b;
      };
      main.append(h('h2', {}, 'Actions'), h('div', { class: 'tools' },
        mk('btn-connect', 'Connect', 'CONNECT'), mk('btn-disconnect', 'Disconnect', 'DISCONNECT'),
        mk('btn-tidy', 'Tidy', 'TIDY', (r) => replace(tidyOut, h('p', { id: 'tidy-summary' },
          `Tidy freed ${r.segments_freed} segment(s), ${fmtBytes(r.bytes_freed)}; compacted ${fmtValue(r.segments_compacted)}; store ${fmtBytes(r.store_bytes_before)} -> ${fmtBytes(r.store_bytes_after)} in ${fmtValue(r.tidy_ms)} ms`),
        kvTable(r)))), tidyOut);
    }
    main.append(h('h2', {}, 'Management properties'), info);
    return {
      async refresh() {
        const mon = ctx.can.monitoring;
        const [nodes, mi] = await Promise.all([mon ? get('/nodes') : null,
          get(`/msmq/info?object=MACHINE&props=${PROPS.join(',')}`)]);
        const n = (nodes || [])[0] || {};
        if (!mon) replace(nodeBox, h('p', { class: 'muted' }, NO_NODES));
        else replace(nodeBox, kvTable({ Name: n.name, Running: n.running, Connected: n.connected, 'Memory used': fmtBytes(n.mem_used), 'Memory limit': fmtBytes(n.mem_limit), 'Memory alarm': n.mem_alarm, 'OS pid': n.os_pid }));
        replace(info, table([
          { title: 'Property', get: (p) => p.name },
          { title: 'Type', get: (p) => p.vt },
          { title: 'Value', get: (p) => h('span', { class: p.name.endsWith('CONNECTED') ? `state-${p.value}` : '' }, fmtValue(p.value)) },
        ], mi.properties || [], { id: 'machine-props' }));
      },
    };
  },
};
