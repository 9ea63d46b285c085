// handles.js - #/handles: the MSMQ queue handles and management objects open over HTTP (the
// user's own; an administrator sees everyone's), with Close.
import { get, del } from '../api.js';
import { h, replace, table, fmtValue, act } from '../dom.js';

export default {
  mount(main, params, ctx) {
    const hs = h('div', { id: 'handles-list' });
    const mo = h('div', { id: 'mgmtobj-list' });
    main.append(h('h1', {}, 'Queue handles'), hs, h('h1', {}, 'Management objects'), mo);
    const close = (path) => {
      const b = h('button', { type: 'button' }, 'Close');
      b.addEventListener('click', () => act(b, async () => { await del(path); ctx.refresh(); }, 'Closed'));
      return b;
    };
    return {
      async refresh() {
        const [hl, ml] = await Promise.all([get(`/msmq/handles${ctx.can.admin ? '?all=true' : ''}`), get('/msmq/management')]);
        const rows = Array.isArray(hl) ? hl : hl.handles || [];
        replace(hs, table([
          { title: 'Handle', get: (x) => x.handle },
          { title: 'Owner', get: (x) => x.owner || '' },
          { title: 'Kind', get: (x) => x.kind },
          { title: 'Queue', get: (x) => `${x.vhost || ''} ${x.queue || ''}` },
          { title: 'Access', get: (x) => fmtValue(x.access) },
          { title: 'Format name', get: (x) => x.format_name || '' },
          { title: '', get: (x) => (x.owner && x.owner !== ctx.user.name ? '' : close(`/msmq/handles/${encodeURIComponent(x.handle)}`)) },
        ], rows, { id: 'handles-table' }));
        const mrows = Array.isArray(ml) ? ml : ml.objects || [];
        replace(mo, table([
          { title: 'Id', get: (x) => x.id },
          { title: 'Object', get: (x) => fmtValue(x.format_name || x.machine || x.state || '') },
          { title: 'Details', get: (x) => fmtValue(x) },
          { title: '', get: (x) => close(`/msmq/management/${encodeURIComponent(x.id)}`) },
        ], mrows, { id: 'mgmtobj-table' }));
      },
    };
  },
};
