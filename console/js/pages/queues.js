// queues.js - #/queues: every queue the user may see, paged by the node (10,000 queues load
// as fast as 10), sortable by any column, filtered by name or a regular expression. A name
// leads to the queue's own page; Add queue declares one.
import { put, seg } from '../api.js';
import { h, link, fmtNum, act, field } from '../dom.js';
import { listView } from '../listview.js';

const rate = (r, k) => {
  const d = r.message_stats && r.message_stats[`${k}_details`];
  return d ? fmtNum(d.rate) : '';
};

export default {
  mount(main, params, ctx) {
    const lv = listView({
      id: 'queues',
      path: '/queues',
      sort: '',
      // only what the table shows: a page of 500 stays small for the node and the browser
      apiColumns: 'name,vhost,kind,type,outgoing,state,messages_ready,messages_unacknowledged,messages,consumers,message_stats',
      columns: [
        { title: 'Vhost', key: 'vhost', get: (r) => r.vhost },
        { title: 'Name', key: 'name', get: (r) => link(r.name, 'queues', r.vhost, r.name) },
        { title: 'Kind', key: 'kind', get: (r) => (r.outgoing ? 'outgoing' : r.kind || '') },
        { title: 'Type', key: 'type', get: (r) => r.type || '' },
        { title: 'State', key: 'state', get: (r) => h('span', { class: `state-${r.state}` }, r.state || '') },
        { title: 'Ready', key: 'messages_ready', num: true },
        { title: 'Unacked', key: 'messages_unacknowledged', num: true },
        { title: 'Total', key: 'messages', num: true },
        { title: 'Consumers', key: 'consumers', num: true },
        { title: 'Published', key: 'message_stats.publish', num: true, get: (r) => fmtNum((r.message_stats || {}).publish) },
        { title: 'Delivered', key: 'message_stats.deliver_get', num: true, get: (r) => fmtNum((r.message_stats || {}).deliver_get) },
        { title: 'Publish rate', key: 'rate', sort: false, num: true, get: (r) => rate(r, 'publish') },
      ],
    });
    main.append(h('h1', {}, 'Queues'), lv.el);
    if (ctx.can.write) {
      const vhost = h('input', { id: 'add-queue-vhost', value: '/' });
      const name = h('input', { id: 'add-queue-name', required: true });
      const durable = h('input', { id: 'add-queue-durable', type: 'checkbox', checked: true });
      const args = h('input', { id: 'add-queue-args', placeholder: '{"x-max-length": 1000}', size: '30' });
      const btn = h('button', { id: 'add-queue', type: 'submit' }, 'Add queue');
      main.append(h('h2', {}, 'Add a queue'), h('form', {
        class: 'action', onsubmit: (ev) => {
          ev.preventDefault();
          act(btn, async () => {
            const a = args.value.trim() ? JSON.parse(args.value) : {};
            await put(`/queues/${seg(vhost.value)}/${seg(name.value)}`, { durable: durable.checked, auto_delete: false, arguments: a });
            ctx.refresh();
          }, `Queue ${name.value} declared`);
        },
      }, field('Vhost', vhost), field('Name', name), h('label', {}, durable, ' Durable'), field('Arguments (JSON)', args), btn));
    }
    return { refresh: lv.refresh };
  },
};
