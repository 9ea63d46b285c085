// connections.js - #/connections: AMQP connections and channels (paged by the node), a
// connection's details and channels (#/connections/NAME), and closing it with a reason (its
// own user or an administrator).
import { get, api, seg } from '../api.js';
import { h, replace, link, kvTable, fmtNum, fmtValue, act, field } from '../dom.js';
import { listView } from '../listview.js';

function one(main, name, ctx) {
  const cpath = `/connections/${seg(name)}`;
  const summary = h('div', { id: 'connection-summary' });
  const chans = listView({
    id: 'connection-channels', path: `${cpath}/channels`,
    columns: [
      { title: 'Channel', key: 'name', get: (r) => r.name },
      { title: 'Prefetch', key: 'prefetch_count', num: true },
      { title: 'Unacked', key: 'messages_unacknowledged', num: true },
      { title: 'Consumers', key: 'consumer_count', num: true },
      { title: 'Confirm', key: 'confirm', get: (r) => fmtValue(r.confirm) },
      { title: 'Transactional', key: 'transactional', get: (r) => fmtValue(r.transactional) },
    ],
  });
  main.append(h('p', {}, link('Connections', 'connections')), h('h1', {}, `Connection ${name}`), summary);
  const reason = h('input', { id: 'close-reason', value: 'Closed from the web console', size: '40' });
  const btn = h('button', { id: 'btn-close-connection', type: 'submit', class: 'danger' }, 'Close connection');
  main.append(h('form', {
    class: 'action', onsubmit: (ev) => {
      ev.preventDefault();
      act(btn, async () => { await api('DELETE', cpath, undefined, { 'X-Reason': reason.value }); location.hash = '#/connections'; }, 'Connection closed');
    },
  }, field('Reason', reason), btn), h('h2', {}, 'Channels'), chans.el);
  return {
    async refresh() {
      const c = await get(cpath);
      replace(summary, kvTable({ User: c.user, Vhost: c.vhost, Peer: `${c.peer_host}:${c.peer_port}`, Protocol: c.protocol, State: c.state, Channels: c.channels, 'Client': c.client_properties, 'TLS': c.ssl }));
      await chans.refresh();
    },
  };
}

export default {
  mount(main, params, ctx) {
    if (params.length >= 1) return one(main, params[0], ctx);
    const conns = listView({
      id: 'connections', path: '/connections',
      columns: [
        { title: 'Name', key: 'name', get: (r) => link(r.name, 'connections', r.name) },
        { title: 'Vhost', key: 'vhost', get: (r) => r.vhost },
        { title: 'User', key: 'user', get: (r) => r.user },
        { title: 'State', key: 'state', get: (r) => r.state },
        { title: 'Channels', key: 'channels', num: true },
        { title: 'Received', key: 'recv_oct', num: true },
        { title: 'Sent', key: 'send_oct', num: true },
      ],
    });
    const chans = listView({
      id: 'channels', path: '/channels',
      columns: [
        { title: 'Channel', key: 'name', get: (r) => r.name },
        { title: 'Vhost', key: 'vhost', get: (r) => r.vhost },
        { title: 'User', key: 'user', get: (r) => r.user },
        { title: 'Prefetch', key: 'prefetch_count', num: true },
        { title: 'Unacked', key: 'messages_unacknowledged', num: true },
        { title: 'Consumers', key: 'consumer_count', num: true },
      ],
    });
    main.append(h('h1', {}, 'Connections'), conns.el, h('h1', {}, 'Channels'), chans.el);
    return { async refresh() { await Promise.all([conns.refresh(), chans.refresh()]); } };
  },
};
