// listview.js - a list the node pages (RabbitMQ's pagination: page, page_size, name,
// use_regex, sort, sort_reverse, columns): the browser holds one page only, so 10,000 queues
// cost it what 10 do. Column headers sort, the filter box filters (a substring, or a regular
// expression), Prev / Next and the page number move through the pages.
import { get } from './api.js';
import { h, replace, fmtNum } from './dom.js';

// opts: {id, path, columns: [{key, title, sort (column name or false), num, get(row)}],
//        sort, pageSize, apiColumns}
export function listView(opts) {
  const st = { page: 1, size: opts.pageSize || 100, sort: opts.sort || '', rev: false, name: '', regex: false, reply: null };
  const body = h('tbody', { id: `${opts.id}-rows` });
  const info = h('span', { id: `${opts.id}-info`, class: 'muted' });
  const pageInput = h('input', { id: `${opts.id}-page`, type: 'number', min: '1', value: '1', size: '5' });
  const heads = opts.columns.map((c) => {
    const th = h('th', { class: (c.num ? 'num ' : '') + (c.sort !== false ? 'sortable' : ''), dataset: { key: c.sort || c.key } }, c.title);
    if (c.sort !== false) th.addEventListener('click', () => {
      const key = c.sort || c.key;
      if (st.sort === key) st.rev = !st.rev; else { st.sort = key; st.rev = false; }
      st.page = 1;
      reload();
    });
    return th;
  });
  const filter = h('input', { id: `${opts.id}-filter`, type: 'search', placeholder: 'Filter by name', size: '28' });
  const regex = h('input', { id: `${opts.id}-regex`, type: 'checkbox' });
  const sizeSel = h('select', { id: `${opts.id}-size` }, [20, 50, 100, 500].map((n) => h('option', { value: String(n), selected: n === st.size }, String(n))));
  let filterTimer = null;
  filter.addEventListener('input', () => {
    clearTimeout(filterTimer);
    filterTimer = setTimeout(() => { st.name = filter.value; st.page = 1; reload(); }, 300);
  });
  regex.addEventListener('change', () => { st.regex = regex.checked; st.page = 1; reload(); });
  sizeSel.addEventListener('change', () => { st.size = Number(sizeSel.value); st.page = 1; reload(); });
  pageInput.addEventListener('change', () => { st.page = Math.max(1, Number(pageInput.value) || 1); reload(); });
  const prev = h('button', { id: `${opts.id}-prev`, type: 'button', onclick: () => { if (st.page > 1) { st.page--; reload(); } } }, 'Prev');
  const next = h('button', { id: `${opts.id}-next`, type: 'button', onclick: () => { if (st.reply && st.page < st.reply.page_count) { st.page++; reload(); } } }, 'Next');
  const err = h('p', { class: 'error', id: `${opts.id}-error` });
  const el = h('div', { class: 'listview', id: opts.id },
    h('div', { class: 'tools' }, filter, h('label', {}, regex, ' Regex'), h('label', {}, 'Page size ', sizeSel)),
    h('div', { class: 'pager' }, prev, 'Page', pageInput, next, info),
    err,
    h('table', {}, h('thead', {}, h('tr', {}, heads)), body));

  // Replies may cross (the timer's refresh and a click on Next): only the latest request's
  // reply is shown, and the page number shown is the reply's own.
  let seq = 0;

  async function reload() {
    const mine = ++seq;
    const q = new URLSearchParams({ page: String(st.page), page_size: String(st.size) });
    if (st.name) q.set('name', st.name);
    if (st.regex) q.set('use_regex', 'true');
    if (st.sort) q.set('sort', st.sort);
    if (st.rev) q.set('sort_reverse', 'true');
    if (opts.apiColumns) q.set('columns', opts.apiColumns);
    let reply;
    try {
      reply = await get(`${opts.path}?${q}`);
    } catch (e) {
      if (mine !== seq) return;
      // past the end (the list shrank): back to its first page
      if (e.body && e.body.error === 'page_out_of_range' && st.page > 1) { st.page = 1; return reload(); }
      err.textContent = e.message;
      return;
    }
    if (mine !== seq) return;
    err.textContent = '';
    st.reply = reply;
    pageInput.value = String(reply.page);
    pageInput.max = String(Math.max(1, reply.page_count));
    info.textContent = `of ${fmtNum(Math.max(1, reply.page_count))}; ${fmtNum(reply.filtered_count)} shown of ${fmtNum(reply.total_count)}`;
    for (const th of heads) {
      th.classList.toggle('sorted-asc', th.dataset.key === st.sort && !st.rev);
      th.classList.toggle('sorted-desc', th.dataset.key === st.sort && st.rev);
    }
    replace(body, reply.items.map((row) => h('tr', {}, opts.columns.map((c) =>
      h('td', { class: c.num ? 'num' : '' }, c.get ? c.get(row) : fmtNum(row[c.key]))))));
  }

  return { el, refresh: reload };
}
