// app.js - the console's frame: login and logout, the menu the user's tags allow, hash routes
// (#/queues/%2F/orders: every page has its own URL), the refresh timer that every page
// follows (5 s by default, selectable, pausable), and each page's Help link (the docs/ page of
// its subject, built into the node: it opens in a new tab as #/docs/PAGE.md, rendered there by
// pages/docs.js; the text itself is at /docs/PAGE.md).
//
// A page module (js/pages/*.js) exports mount(main, params, ctx) returning {refresh(), unmount?()}:
// mount builds what stays (forms, buttons), refresh() reloads what changes. ctx.can says what the
// user's tags allow; the API checks again whatever the page shows.
//
// Sessions live in the node's process. A cluster leader that steps down re-executes itself
// (same pid, same sockets) and forwards to the new leader, which never saw the session: the
// console then gets a 401, or, while the node restarts, no answer at all (a failed fetch) or a
// 503 (no leader yet). Either way the page stops and the console waits a bounded time for the
// node, then shows the login form with what happened; it never stays on a broken page.
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
import cluster from './pages/cluster.js';
import docs from './pages/docs.js';

// [hash word, menu title, module, who sees it, its docs/ page (the Help link)]
const ROUTES = [
  ['overview', 'Overview', overview, 'any', 'console.md'],
  ['queues', 'Queues', queues, 'any', 'http-api.md'],
  ['queue', null, queue, 'any', 'msmq-management.md'],
  ['outgoing', 'Outgoing', outgoing, 'any', 'store-and-forward.md'],
  ['node', 'Node', node, 'any', 'msmq-management.md'],
  ['cluster', 'Cluster', cluster, 'monitor', 'cluster.md'],
  ['exchanges', 'Exchanges', exchanges, 'any', 'http-api.md'],
  ['connections', 'Connections', connections, 'any', 'http-api.md'],
  ['transactions', 'Transactions', transactions, 'write', 'msmq-management.md'],
  ['handles', 'Handles', handles, 'write', 'msmq-management.md'],
  ['admin', 'Admin', admin, 'admin', 'security.md'],
  ['definitions', 'Definitions', definitions, 'admin', 'http-api.md'],
  ['docs', null, docs, 'any', 'README.md'], // the reference itself: Help is its index
];

// How long the console waits for a node that does not answer (restarting after a step-down,
// or no leader elected yet) before it gives up and shows the login form; and how often it asks.
const UNREACHABLE_WAIT_MS = 30000;
const PROBE_EVERY_MS = 1000;

const state = { user: null, ctx: null, page: null, timer: null, paused: false, seq: 0, busy: false,
  probing: false, restartNote: null };

function capabilities(tags) {
  const t = new Set(tags || []);
  const admin = t.has('administrator');
  // monitoring alone is read-only here: no Purge, Delete, Publish, Get messages, Move
  const write = admin || t.has('management') || t.has('policymaker');
  return { admin, write, monitoring: t.has('monitoring') || admin };
}

function allowed(who) {
  return who === 'any' || (who === 'write' && state.ctx.can.write) || (who === 'admin' && state.ctx.can.admin) ||
    (who === 'monitor' && state.ctx.can.monitoring);
}

// What the login form says when the session is gone: after a step-down this console asked
// for (within the last minutes), what it did; otherwise every way a session ends.
function endedMessage() {
  const note = state.restartNote;
  if (note && Date.now() - note.at < 5 * 60000) {
    return `${note.text} This node restarted, which ends its console sessions: log in again.`;
  }
  return 'Your session has ended (it expired, was logged out, or the node restarted, as a cluster ' +
    'leader does when it steps down): log in again.';
}

// A request got no answer (status 0) or a 503: stop the page and ask GET /api/session every
// second, for UNREACHABLE_WAIT_MS at most. An answer with this session: back to the page; one
// without it (or a 401): the login form, saying why; no answer in time: the login form too.
async function nodeUnreachable(err) {
  if (state.probing || !state.user) return;
  state.probing = true;
  stopPage();
  say(`The node does not answer (${err.message}); it may be restarting, as a cluster leader does ` +
    'after a step-down. Waiting for it...', true);
  const deadline = Date.now() + UNREACHABLE_WAIT_MS;
  try {
    for (let i = 0; i < UNREACHABLE_WAIT_MS / PROBE_EVERY_MS + 1 && Date.now() < deadline; i++) {
      await new Promise((res) => setTimeout(res, PROBE_EVERY_MS));
      if (!state.user) return; // logged out or shown the login form meanwhile
      let me;
      try {
        me = await get('/session');
      } catch (e) {
        if (e.status === 0 || e.status === 502 || e.status === 503) continue;
        showLogin(endedMessage());
        return;
      }
      if (me && me.authenticated && me.name === state.user.name) {
        say('The node answers again.', false);
        route(true);
      } else {
        showLogin(endedMessage());
      }
      return;
    }
    showLogin(`The node has not answered for ${UNREACHABLE_WAIT_MS / 1000} s (${err.message}): ` +
      'log in again when it is back.');
  } finally {
    state.probing = false;
  }
}

function showLogin(message) {
  stopPage();
  state.user = null;
  state.restartNote = null;
  document.getElementById('top').hidden = true;
  replace(document.getElementById('main'));
  say('');
  document.getElementById('login').hidden = false;
  document.getElementById('login-error').textContent = message || '';
  document.getElementById('login-user').focus();
}

function showApp(me) {
  state.user = me;
  state.ctx = {
    user: me, can: capabilities(me.tags), refresh: refreshNow,
    // a page that made the node restart (Step down) says what it did, for the login form
    expectRestart: (text) => { state.restartNote = { text, at: Date.now() }; },
  };
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

function route(keepBanner) {
  if (!state.user || state.probing && keepBanner !== true) return;
  stopPage();
  if (keepBanner !== true) say('');
  const parts = parseHash();
  let word = parts[0] || 'overview';
  let params = parts.slice(1);
  // #/queues/VHOST/NAME is a queue's page; #/queues alone the list
  if (word === 'queues' && params.length >= 2) word = 'queue';
  const r = ROUTES.find((x) => x[0] === word);
  const main = document.getElementById('main');
  replace(main);
  for (const a of document.querySelectorAll('nav a')) a.classList.toggle('active', a.id === `nav-${word === 'queue' ? 'queues' : word}`);
  const help = document.getElementById('help-link');
  help.hidden = !r;
  if (r) help.href = `/#/docs/${r[4]}`;
  if (!r || !allowed(r[3])) {
    main.appendChild(h('p', { class: 'error' }, r ? 'Your tags do not allow this page.' : 'No such page.'));
    return;
  }
  document.title = `Sluice: ${r[1] || (word === 'docs' ? 'Help' : 'Queue')}`;
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
      if ((e.status === 0 || e.status === 502 || e.status === 503) && seq === state.seq) nodeUnreachable(e);
      else if (e.status !== 401 && seq === state.seq) say(e.message, true);
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
  setUnauthorizedHandler(() => { if (state.user) showLogin(endedMessage()); });
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
