// cluster.js - #/cluster: the cluster as GET /api/cluster tells it (a single node answers as a
// cluster of one): its name, leader and epoch, and every member with its role, whether it is
// in sync, its replication lag and its AMQP and HTTP addresses, everything as text.
// Administrators also get Step down (POST /api/cluster/step-down, optionally {"node": NAME}: a
// clean hand-over to an in-sync follower) and Remove on each member that is not the leader
// (DELETE /api/cluster/nodes/NAME: the node is kept out until readmitted), and Readmit on each
// removed member (POST /api/cluster/nodes/NAME/readmit; /api/cluster's "removed" lists them).
// Each asks first, then shows the result or the node's reason for refusing (409: no in-sync
// follower, the leader itself...; 404: no such member, or not removed).
//
// A step-down restarts the leader (same pid, same sockets) and ends its console sessions:
// the page tells the app (ctx.expectRestart) so that the login form that follows says why.
import { get, post, del, seg } from '../api.js';
import { h, replace, table, fmtNum, fmtValue, kvTable, act, say } from '../dom.js';

const yesNo = (b) => (b ? 'yes' : 'no');

// The members' table, shared with the overview's cluster panel. opts.actions(node) adds a last
// column (the page's Remove buttons); opts.id names the table.
export function nodesTable(c, opts) {
  const o = opts || {};
  const cols = [
    { title: 'Name', get: (n) => h('span', { class: 'node-name' }, fmtValue(n.name)) },
    { title: 'Role', get: (n) => h('span', { class: `node-role role-${n.role}` }, fmtValue(n.role)) },
    { title: 'In sync', get: (n) => h('span', { class: `node-insync ${n.insync ? '' : 'insync-no'}` }, yesNo(n.insync)) },
    { title: 'Lag bytes', get: (n) => fmtNum(n.lag_bytes), num: true },
    { title: 'Lag ms', get: (n) => fmtNum(n.lag_ms), num: true },
    { title: 'AMQP', get: (n) => fmtValue(n.amqp) },
    { title: 'HTTP', get: (n) => fmtValue(n.http) },
  ];
  if (o.actions) cols.push({ title: 'Actions', get: o.actions });
  return table(cols, c.nodes || [], { id: o.id || 'cluster-nodes', class: 'cluster-nodes' });
}

export default {
  mount(main, params, ctx) {
    const title = h('h1', { id: 'cluster-title' }, 'Cluster');
    const summary = h('div', { id: 'cluster-summary' });
    const nodesBox = h('div', { id: 'cluster-nodes-box' });
    const result = h('div', { id: 'cluster-result' });
    const removedBox = h('div', { id: 'cluster-removed-box' });
    main.append(title, summary, h('h2', {}, 'Nodes'), nodesBox, removedBox);
    let last = null; // the last /api/cluster answer, for the questions the buttons ask

    // Step down, for administrators: to any in-sync follower (the node picks) or to one named.
    const target = h('select', { id: 'stepdown-target' }, h('option', { value: '' }, 'any in-sync follower'));
    const stepBtn = h('button', { id: 'btn-step-down', type: 'button', class: 'danger' }, 'Step down');
    if (ctx.can.admin) {
      stepBtn.addEventListener('click', () => {
        const c = last || {};
        const to = target.value;
        if (!window.confirm(`Step down: hand the leadership of cluster ${fmtValue(c.name)} from ` +
            `${fmtValue(c.leader)} to ${to || 'an in-sync follower'}? The leader restarts as a ` +
            'follower and its console sessions end (yours too): you will log in again.')) return;
        act(stepBtn, async () => {
          const r = await post('/cluster/step-down', to ? { node: to } : {});
          // the reply's epoch is the one the old leader led (the heir's is the next)
          const text = `Step down: the leadership moved from ${fmtValue(r && r.from)} to ` +
            `${fmtValue(r && r.to)} (${fmtValue(r && r.from)} led epoch ${fmtValue(r && r.epoch)}).`;
          ctx.expectRestart(text);
          replace(result, h('p', { id: 'stepdown-result' }, text));
          say(text, false);
          ctx.refresh();
          return r;
        });
      });
      main.append(h('h2', {}, 'Actions'), h('div', { class: 'tools' },
        h('label', {}, 'To ', target), stepBtn), result);
    }

    function removeButton(n) {
      if (!ctx.can.admin || n.role === 'leader' || (last && n.name === last.leader)) return '';
      const b = h('button', { type: 'button', class: 'danger btn-remove', dataset: { node: n.name } }, 'Remove');
      b.addEventListener('click', () => {
        if (!window.confirm(`Remove node ${n.name} from cluster ${fmtValue(last && last.name)}? ` +
            'It leaves the in-sync replicas and the members, and is kept out (even when it ' +
            'restarts) until an administrator readmits it.')) return;
        act(b, async () => {
          const r = await del(`/cluster/nodes/${seg(n.name)}`);
          replace(result, h('p', { id: 'remove-result' }, `Remove: node ${n.name} removed.`));
          ctx.refresh();
          return r;
        }, `Remove: node ${n.name} removed.`);
      });
      return b;
    }

    function readmitButton(name) {
      if (!ctx.can.admin) return '';
      const b = h('button', { type: 'button', class: 'btn-readmit', dataset: { node: name } }, 'Readmit');
      b.addEventListener('click', () => {
        if (!window.confirm(`Readmit node ${name} to cluster ${fmtValue(last && last.name)}? ` +
            'It registers again and follows the leader (catching up first).')) return;
        act(b, async () => {
          const r = await post(`/cluster/nodes/${seg(name)}/readmit`, {});
          replace(result, h('p', { id: 'readmit-result' }, `Readmit: node ${name} readmitted.`));
          ctx.refresh();
          return r;
        }, `Readmit: node ${name} readmitted.`);
      });
      return b;
    }

    return {
      async refresh() {
        const c = await get('/cluster');
        last = c;
        replace(title, `Cluster ${fmtValue(c.name)}`);
        const facts = { Name: c.name, Leader: c.leader === null ? '(none elected)' : c.leader, Epoch: c.epoch,
          Nodes: (c.nodes || []).length, 'In sync': (c.nodes || []).filter((n) => n.insync).length };
        if (c.etcd_error) facts['etcd error'] = c.etcd_error;
        replace(summary, kvTable(facts));
        replace(nodesBox, nodesTable(c, { actions: ctx.can.admin ? removeButton : null }));
        const removed = c.removed || [];
        replace(removedBox, removed.length ? [h('h2', {}, 'Removed'),
          table([{ title: 'Name', get: (nm) => h('span', { class: 'node-name' }, nm) }]
            .concat(ctx.can.admin ? [{ title: 'Actions', get: readmitButton }] : []),
          removed, { id: 'cluster-removed' })] : []);
        // the Step down choices: the followers now in sync (the node refuses others anyway)
        if (ctx.can.admin) {
          const keep = target.value;
          const names = (c.nodes || []).filter((n) => n.role === 'follower' && n.insync).map((n) => n.name);
          replace(target, h('option', { value: '' }, 'any in-sync follower'),
            names.map((nm) => h('option', { value: nm, selected: nm === keep }, nm)));
        }
      },
    };
  },
};
