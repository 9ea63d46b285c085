// definitions.js - #/definitions: export (download, as RabbitMQ's file) and import of the
// node's definitions (administrators). Nothing refreshes here but the counts.
import { get, post } from '../api.js';
import { h, replace, kvTable, act, field } from '../dom.js';

export default {
  mount(main, params, ctx) {
    const counts = h('div', { id: 'definitions-counts' });
    const exp = h('button', { id: 'btn-export', type: 'button' }, 'Export');
    const file = h('input', { id: 'import-file', type: 'file', accept: '.json,application/json' });
    const text = h('textarea', { id: 'import-text', placeholder: '{"queues": [...]}' });
    const imp = h('button', { id: 'btn-import', type: 'submit' }, 'Import');
    exp.addEventListener('click', () => act(exp, async () => {
      const d = await get('/definitions');
      const url = URL.createObjectURL(new Blob([JSON.stringify(d, null, 2)], { type: 'application/json' }));
      const a = h('a', { href: url, download: 'sluice-definitions.json' });
      document.body.appendChild(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 10000);
    }, 'Definitions exported'));
    main.append(h('h1', {}, 'Definitions'), counts, h('h2', {}, 'Export'), h('div', { class: 'tools' }, exp),
      h('h2', {}, 'Import'), h('form', {
        class: 'action', onsubmit: (ev) => {
          ev.preventDefault();
          act(imp, async () => {
            const body = file.files && file.files[0] ? await file.files[0].text() : text.value;
            await post('/definitions', JSON.parse(body));
            ctx.refresh();
          }, 'Definitions imported');
        },
      }, field('File', file), field('or JSON', text), imp));
    return {
      async refresh() {
        const d = await get('/definitions');
        const n = {};
        for (const k of ['users', 'vhosts', 'permissions', 'topic_permissions', 'queues', 'exchanges', 'bindings']) n[k] = (d[k] || []).length;
        replace(counts, kvTable(n));
      },
    };
  },
};
