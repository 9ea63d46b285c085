// app.js - the console's frame: login and logout, the menu the user's tags allow, hash routes
// (#/queues/%2F/orders: every page has its own URL), and the refresh timer that every page
// follows (5 s by default, selectable, pausable).
//
// A page module (js/pages/*.js) exports mount(main, params, ctx) returning {refresh(), unmount?()}:
// mount builds what stays (forms, buttons), refresh() reloads what changes. ctx.can says what the
// user's tags allow; the API checks again whatever the page shows.
import { get, login, logout, setUnauthorizedHandler } from './api.js';
import { h, replace, say } from './dom.js';
import overview from './pages/overview.js';
import queues from './pages/queues.js';
import queue from './pages/queue.js';
import outgoing from './pages/outgoing.js';
import node from './pages/node.js';
import exchanges from './pages/exchanges.js';
import connections from './pages/connections.js';
import admin from './pages/admin.js';
import definitions from './pages/definitions.js';
import transactions from './pages/transactions.js';
import handles from './pages/handles.js';

// [hash word, menu title, module, who sees it]. A cluster page goes here when the cluster
// exists (its module beside the others, its word 'cluster').
const ROUTES = [
  ['overview', 'Overview', overview, 'any'],
  ['queues', 'Queues', queues, 'any'],
  ['queue', null, queue, 'any'],
  ['outgoing', 'Outgoing', outgoing, 'any'],
  ['node', 'Node', node, 'any'],
  ['exchanges', 'Exchanges', exchanges, 'any'],
  ['connections', 'Connections', connections, 'any'],
  ['transactions', 'Transactions', transactions, 'write'],
  ['handles', 'Handles', handles, 'write'],
  ['admin', 'Admin', admin, 'admin'],
  ['definitions', 'Definitions', definitions, 'admin'],
];

const state = { user: null, ctx: null, page: null, timer: null, paused: false, seq: 0, busy: false };

function capabilities(tags) {
  const t = new Set(tags || []);
  const admin = t.has('administrator');
  // monitoring alone is read-only here: no Purge, Delete, Publish, Get messages, Move
  const write = admin || t.has('management') || t.has('policymaker');
  return { admin, write, monitoring: t.has('monitoring') || admin };
}

function allowed(who) {
  return who === 'any' || (who === 'write' && state.ctx.can.write) || (who === 'admin' && state.ctx.can.admin);
}

function showLogin(message) {
  stopPage();
  state.user = null;
  document.getElementById('top').hidden = true;
  replace(document.getElementById('main'));
  say('');
  document.getElementById('login').hidden = false;
  document.getElementById('login-error').textContent = message || '';
  document.getElementById('login-user').focus();
}

function showApp(me) {
  state.user = me;
  state.ctx = { user: me, can: capabilities(me.tags), refresh: refreshNow };
  document.getElementById('login').hidden = true;
  document.getElementById('top').hidden = false;
  document.getElementById('whoami').textContent = `${me.name} (${(me.tags || []).join(', ') || 'no tags'})`;
  const nav = document.getElementById('nav');
  replace(nav, ROUTES.filter((r) => r[1] && allowed(r[3])).map((r) =>
    h('a', { href: `#/${r[0]}`, id: `nav-${r[0]}` }, r[1])));
  get('/overview').then((o) => {
    document.getElementById('node-name').textContent = o.cluster_name || o.node || '';
  }).catch(() => {});
  route();
}

function stopPage() {
  if (state.timer) clearTimeout(state.timer);
  state.timer = null;
  if (state.page && state.page.unmount) state.page.unmount();
  state.page = null;
  state.seq++;
}

function parseHash() {
  const raw = location.hash.replace(/^#\/?/, '');
  const parts = raw ? raw.split('/').map((p) => { try { return decodeURIComponent(p); } catch (e) { return p; } }) : [];
  return parts;
}

function route() {
  if (!state.user) return;
  stopPage();
  say('');
  const parts = parseHash();
  let word = parts[0] || 'overview';
  let params = parts.slice(1);
  // #/queues/VHOST/NAME is a queue's page; #/queues alone the list
  if (word === 'queues' && params.length >= 2) word = 'queue';
  const r = ROUTES.find((x) => x[0] === word);
  const main = document.getElementById('main');
  replace(main);
  for (const a of document.querySelectorAll('nav a')) a.classList.toggle('active', a.id === `nav-${word === 'queue' ? 'queues' : word}`);
  if (!r || !allowed(r[3])) {
    main.appendChild(h('p', { class: 'error' }, r ? 'Your tags do not allow this page.' : 'No such page.'));
    return;
  }
  document.title = `Sluice: ${r[1] || 'Queue'}`;
  const seq = state.seq;
  state.page = r[2].mount(main, params, state.ctx);
  tick(seq);
}

async function tick(seq) {
  if (seq !== state.seq || !state.page) return;
  if (!state.busy) {
    state.busy = true;
    try {
      await state.page.refresh();
    } catch (e) {
      if (e.status !== 401 && seq === state.seq) say(e.message, true);
    } finally {
      state.busy = false;
    }
    // tests wait on this: one more refresh of the page on screen is done (or failed, said)
    if (seq === state.seq) document.body.dataset.loaded = String(Number(document.body.dataset.loaded || 0) + 1);
  }
  if (seq !== state.seq) return;
  schedule(seq);
}

function schedule(seq) {
  if (state.timer) clearTimeout(state.timer);
  state.timer = null;
  if (state.paused) return;
  const every = Number(document.getElementById('refresh-every').value) * 1000;
  state.timer = setTimeout(() => tick(seq), every);
}

// Refresh now (after an action), whatever the timer says.
export function refreshNow() {
  if (state.page) tick(state.seq);
}

async function start() {
  setUnauthorizedHandler(() => showLogin('Your session has ended; log in again.'));
  document.getElementById('login-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const user = document.getElementById('login-user');
    const pass = document.getElementById('login-pass');
    const err = document.getElementById('login-error');
    err.textContent = '';
    try {
      const me = await login(user.value, pass.value);
      pass.value = '';
      showApp(me);
    } catch (e) {
      pass.value = '';
      err.textContent = e.status === 403 ? `Not allowed: ${e.message}` : `Login failed: ${e.message}`;
    }
  });
  document.getElementById('logout').addEventListener('click', async () => {
    try { await logout(); } catch (e) { /* the cookie is gone or was already */ }
    showLogin('Logged out.');
  });
  const pauseBtn = document.getElementById('refresh-pause');
  pauseBtn.addEventListener('click', () => {
    state.paused = !state.paused;
    pauseBtn.textContent = state.paused ? 'Resume refresh' : 'Pause refresh';
    if (state.paused) {
      if (state.timer) clearTimeout(state.timer);
      state.timer = null;
    } else {
      schedule(state.seq);
    }
  });
  document.getElementById('refresh-every').addEventListener('change', () => schedule(state.seq));
  window.addEventListener('hashchange', route);
  try {
    const me = await get('/session');
    if (me && me.authenticated) showApp(me); else showLogin('');
  } catch (e) {
    showLogin('');
  }
}

start();
