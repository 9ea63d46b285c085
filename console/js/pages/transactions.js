// transactions.js - #/transactions: the transactions opened over HTTP (for moves): Begin,
// and each open one's Commit or Abort.
import { get, post } from '../api.js';
import { h, replace, table, fmtNum, act } from '../dom.js';

export default {
  mount(main, params, ctx) {
    const list = h('div', { id: 'transactions-list' });
    const begin = h('button', { id: 'btn-begin', type: 'button' }, 'Begin transaction');
    begin.addEventListener('click', () => act(begin, async () => { const r = await post('/transactions', {}); ctx.refresh(); return r; }, (r) => `Transaction ${r.id} begun`));
    const btn = (label, id, path) => {
      const b = h('button', { type: 'button', class: `btn-${label.toLowerCase()}` }, label);
      b.addEventListener('click', () => act(b, async () => { const r = await post(path, {}); ctx.refresh(); return r; },
        (r) => `Transaction ${id} ${r.outcome}${r.moves_voided ? ` (${r.moves_voided} move(s) voided)` : ''}`));
      return b;
    };
    main.append(h('h1', {}, 'Transactions'), h('p', { class: 'muted' }, 'Open a transaction here, choose it on a queue page for Move, then commit or abort it.'),
      h('div', { class: 'tools' }, begin), list);
    return {
      async refresh() {
        const txs = await get('/transactions');
        replace(list, table([
          { title: 'Id', get: (t) => String(t.id), num: true },
          { title: 'Operations', get: (t) => fmtNum(t.operations), num: true },
          { title: '', get: (t) => [btn('Commit', t.id, `/transactions/${t.id}/commit`), btn('Abort', t.id, `/transactions/${t.id}/abort`)] },
        ], txs, { id: 'transactions-table' }));
      },
    };
  },
};
