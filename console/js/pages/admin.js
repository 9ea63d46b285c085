// admin.js - #/admin: users, vhosts, permissions and topic permissions (administrators):
// listed, created or changed (a PUT replaces), deleted.
import { get, put, del, seg } from '../api.js';
import { h, replace, table, fmtValue, act, field } from '../dom.js';

function delButton(label, path, ctx, what) {
  const b = h('button', { type: 'button', class: 'danger' }, label);
  b.addEventListener('click', () => {
    if (!window.confirm(`Delete ${what}?`)) return;
    act(b, async () => { await del(path); ctx.refresh(); }, `${what} deleted`);
  });
  return b;
}

function form(id, fields, label, fn) {
  const btn = h('button', { id, type: 'submit' }, label);
  return h('form', { class: 'action', onsubmit: (ev) => { ev.preventDefault(); act(btn, fn, `${label}: done`); } }, fields, btn);
}

export default {
  mount(main, params, ctx) {
    const users = h('div', { id: 'admin-users' });
    const vhosts = h('div', { id: 'admin-vhosts' });
    const perms = h('div', { id: 'admin-permissions' });
    const topics = h('div', { id: 'admin-topic-permissions' });
    const uName = h('input', { id: 'user-name', required: true });
    const uPass = h('input', { id: 'user-password', type: 'password', autocomplete: 'new-password' });
    const uTags = h('input', { id: 'user-tags', placeholder: 'management, monitoring, administrator' });
    const vName = h('input', { id: 'vhost-name', required: true });
    const pV = h('input', { id: 'perm-vhost', value: '/' });
    const pU = h('input', { id: 'perm-user', required: true });
    const pC = h('input', { id: 'perm-configure', value: '.*' });
    const pW = h('input', { id: 'perm-write', value: '.*' });
    const pR = h('input', { id: 'perm-read', value: '.*' });
    const tV = h('input', { id: 'tperm-vhost', value: '/' });
    const tU = h('input', { id: 'tperm-user', required: true });
    const tX = h('input', { id: 'tperm-exchange', value: 'amq.topic' });
    const tW = h('input', { id: 'tperm-write', value: '.*' });
    const tR = h('input', { id: 'tperm-read', value: '.*' });
    main.append(
      h('h1', {}, 'Users'), users,
      form('btn-put-user', [field('Name', uName), field('Password (empty: keep)', uPass), field('Tags', uTags)], 'Add or update user', async () => {
        const body = { tags: uTags.value };
        if (uPass.value) body.password = uPass.value;
        await put(`/users/${seg(uName.value)}`, body);
        uPass.value = '';
        ctx.refresh();
      }),
      h('h1', {}, 'Virtual hosts'), vhosts,
      form('btn-put-vhost', [field('Name', vName)], 'Add vhost', async () => { await put(`/vhosts/${seg(vName.value)}`, {}); ctx.refresh(); }),
      h('h1', {}, 'Permissions'), perms,
      form('btn-put-permission', [field('Vhost', pV), field('User', pU), field('Configure', pC), field('Write', pW), field('Read', pR)], 'Set permission', async () => {
        await put(`/permissions/${seg(pV.value)}/${seg(pU.value)}`, { configure: pC.value, write: pW.value, read: pR.value });
        ctx.refresh();
      }),
      h('h1', {}, 'Topic permissions'), topics,
      form('btn-put-topic-permission', [field('Vhost', tV), field('User', tU), field('Exchange', tX), field('Write', tW), field('Read', tR)], 'Set topic permission', async () => {
        await put(`/topic-permissions/${seg(tV.value)}/${seg(tU.value)}`, { exchange: tX.value, write: tW.value, read: tR.value });
        ctx.refresh();
      }));
    return {
      async refresh() {
        const [u, v, p, t] = await Promise.all([get('/users'), get('/vhosts'), get('/permissions'), get('/topic-permissions')]);
        replace(users, table([
          { title: 'Name', get: (r) => r.name },
          { title: 'Tags', get: (r) => fmtValue(r.tags) },
          { title: '', get: (r) => delButton('Delete', `/users/${seg(r.name)}`, ctx, `user ${r.name}`) },
        ], u, { id: 'users-table' }));
        replace(vhosts, table([
          { title: 'Name', get: (r) => r.name },
          { title: 'Description', get: (r) => r.description || '' },
          { title: 'Messages', get: (r) => fmtValue(r.messages), num: true },
          { title: '', get: (r) => delButton('Delete', `/vhosts/${seg(r.name)}`, ctx, `vhost ${r.name}`) },
        ], v, { id: 'vhosts-table' }));
        replace(perms, table([
          { title: 'Vhost', get: (r) => r.vhost }, { title: 'User', get: (r) => r.user },
          { title: 'Configure', get: (r) => r.configure }, { title: 'Write', get: (r) => r.write }, { title: 'Read', get: (r) => r.read },
          { title: '', get: (r) => delButton('Delete', `/permissions/${seg(r.vhost)}/${seg(r.user)}`, ctx, `permission of ${r.user} on ${r.vhost}`) },
        ], p, { id: 'permissions-table' }));
        replace(topics, table([
          { title: 'Vhost', get: (r) => r.vhost }, { title: 'User', get: (r) => r.user }, { title: 'Exchange', get: (r) => r.exchange },
          { title: 'Write', get: (r) => r.write }, { title: 'Read', get: (r) => r.read },
          { title: '', get: (r) => delButton('Delete', `/topic-permissions/${seg(r.vhost)}/${seg(r.user)}?exchange=${encodeURIComponent(r.exchange)}`, ctx, `topic permission of ${r.user} on ${r.vhost}`) },
        ], t, { id: 'topic-permissions-table' }));
      },
    };
  },
};
