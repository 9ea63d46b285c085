// exchanges.js - #/exchanges (paged list, Add exchange) and #/exchanges/VHOST/NAME (its
// bindings both ways, Publish, Bind, Delete).
import { get, put, post, del, seg } from '../api.js';
import { h, replace, link, table, fmtValue, act, field, say } from '../dom.js';
import { listView } from '../listview.js';

function one(main, vhost, name, ctx) {
  const xpath = `/exchanges/${seg(vhost)}/${seg(name || 'amq.default')}`;
  const summary = h('div');
  const src = h('div', { id: 'exchange-bindings-source' });
  const dst = h('div', { id: 'exchange-bindings-destination' });
  main.append(h('p', {}, link('Exchanges', 'exchanges'), ` (vhost ${vhost})`), h('h1', {}, `Exchange ${name || '(default)'}`), summary);
  if (ctx.can.write) {
    const rk = h('input', { id: 'xpublish-key' });
    const payload = h('textarea', { id: 'xpublish-payload' });
    const pub = h('button', { id: 'btn-xpublish', type: 'submit' }, 'Publish');
    const delBtn = h('button', { id: 'btn-xdelete', type: 'button', class: 'danger' }, 'Delete');
    delBtn.addEventListener('click', () => {
      if (!window.confirm(`Delete exchange ${name}?`)) return;
      act(delBtn, async () => { await del(xpath); location.hash = '#/exchanges'; say(`Exchange ${name} deleted`); });
    });
    main.append(h('h2', {}, 'Publish'), h('form', {
      class: 'action', onsubmit: (ev) => {
        ev.preventDefault();
        act(pub, () => post(`${xpath}/publish`, { routing_key: rk.value, payload: payload.value, payload_encoding: 'string', properties: {} }),
          (r) => (r.routed ? 'Message published' : 'Message published but not routed'));
      },
    }, field('Routing key', rk), field('Payload', payload), pub));
    // Bind this exchange to a queue or another exchange
    const dtype = h('select', { id: 'bind-type' }, h('option', { value: 'q' }, 'queue'), h('option', { value: 'e' }, 'exchange'));
    const dname = h('input', { id: 'bind-dest', required: true });
    const bkey = h('input', { id: 'bind-key' });
    const bind = h('button', { id: 'btn-bind', type: 'submit' }, 'Bind');
    main.append(h('h2', {}, 'Add a binding'), h('form', {
      class: 'action', onsubmit: (ev) => {
        ev.preventDefault();
        act(bind, async () => {
          await post(`/bindings/${seg(vhost)}/e/${seg(name)}/${dtype.value}/${seg(dname.value)}`, { routing_key: bkey.value, arguments: {} });
          ctx.refresh();
        }, `Bound to ${dname.value}`);
      },
    }, field('To', dtype), field('Name', dname), field('Routing key', bkey), bind), h('h2', {}, 'Delete'), h('div', { class: 'tools' }, delBtn));
  }
  main.append(h('h2', {}, 'Bindings from here'), src, h('h2', {}, 'Bindings to here'), dst);
  const bcols = [
    { title: 'Source', get: (b) => b.source || '(default)' },
    { title: 'Destination', get: (b) => `${b.destination_type} ${b.destination}` },
    { title: 'Routing key', get: (b) => b.routing_key },
    { title: 'Arguments', get: (b) => fmtValue(b.arguments) },
  ];
  return {
    async refresh() {
      const [x, s, d] = await Promise.all([get(xpath), get(`${xpath}/bindings/source`), get(`${xpath}/bindings/destination`)]);
      replace(summary, table([{ title: 'Type', get: (r) => r.type }, { title: 'Durable', get: (r) => fmtValue(r.durable) },
        { title: 'Auto delete', get: (r) => fmtValue(r.auto_delete) }, { title: 'Internal', get: (r) => fmtValue(r.internal) },
        { title: 'Arguments', get: (r) => fmtValue(r.arguments) }], [x]));
      replace(src, table(bcols, s));
      replace(dst, table(bcols, d));
    },
  };
}

export default {
  mount(main, params, ctx) {
    if (params.length >= 2) return one(main, params[0], params[1], ctx);
    const lv = listView({
      id: 'exchanges', path: '/exchanges',
      columns: [
        { title: 'Vhost', key: 'vhost', get: (r) => r.vhost },
        { title: 'Name', key: 'name', get: (r) => link(r.name || '(default)', 'exchanges', r.vhost, r.name || 'amq.default') },
        { title: 'Type', key: 'type', get: (r) => r.type },
        { title: 'Durable', key: 'durable', get: (r) => fmtValue(r.durable) },
        { title: 'Internal', key: 'internal', get: (r) => fmtValue(r.internal) },
      ],
    });
    main.append(h('h1', {}, 'Exchanges'), lv.el);
    if (ctx.can.write) {
      const vhost = h('input', { id: 'add-exchange-vhost', value: '/' });
      const name = h('input', { id: 'add-exchange-name', required: true });
      const type = h('select', { id: 'add-exchange-type' }, ['direct', 'fanout', 'topic', 'headers'].map((t) => h('option', { value: t }, t)));
      const btn = h('button', { id: 'add-exchange', type: 'submit' }, 'Add exchange');
      main.append(h('h2', {}, 'Add an exchange'), h('form', {
        class: 'action', onsubmit: (ev) => {
          ev.preventDefault();
          act(btn, async () => { await put(`/exchanges/${seg(vhost.value)}/${seg(name.value)}`, { type: type.value, durable: true }); ctx.refresh(); }, `Exchange ${name.value} declared`);
        },
      }, field('Vhost', vhost), field('Name', name), field('Type', type), btn));
    }
    return { refresh: lv.refresh };
  },
};
