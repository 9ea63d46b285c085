// amqplib_scenarios.js - drives a broker with the npm amqplib client (the Node.js client most
// applications use). Usage: node amqplib_scenarios.js PORT. Prints one line per scenario and
// exits non-zero at the first failure. Run by tests/integration/test_amqplib.py.
'use strict';
const amqp = require('amqplib');
const assert = require('assert');

const port = process.argv[2];
const url = `amqp://guest:guest@127.0.0.1:${port}`;
const uniq = (p) => `${p}-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;

function deliveries(ch, q, n, opts = {}) {
  return new Promise((resolve, reject) => {
    const got = [];
    const timer = setTimeout(() => reject(new Error(`got ${got.length} of ${n}`)), 5000);
    ch.consume(q, (m) => {
      if (m === null) return; // cancelled by the broker
      got.push(m);
      if (opts.ackEach) ch.ack(m);
      if (got.length === n) {
        clearTimeout(timer);
        resolve(got);
      }
    }, {noAck: !!opts.noAck}).catch(reject);
  });
}

const scenarios = {
  async confirmsAndConsume(conn) {
    const ch = await conn.createConfirmChannel();
    const q = (await ch.assertQueue(uniq('js'), {exclusive: true})).queue;
    for (let i = 0; i < 100; i++) ch.sendToQueue(q, Buffer.from(`m${i}`), {persistent: true});
    await ch.waitForConfirms();
    await ch.prefetch(10);
    const got = await deliveries(ch, q, 100, {ackEach: true});
    assert.deepStrictEqual(got.map((m) => m.content.toString()),
                           [...Array(100).keys()].map((i) => `m${i}`));
    await ch.close();
  },

  async nackRequeueRedelivers(conn) {
    const ch = await conn.createChannel();
    const q = (await ch.assertQueue('', {exclusive: true})).queue;
    assert.ok(q.startsWith('amq.gen-'));
    ch.sendToQueue(q, Buffer.from('a'));
    ch.sendToQueue(q, Buffer.from('b'));
    const m1 = await waitGet(ch, q);
    assert.strictEqual(m1.fields.redelivered, false);
    ch.nack(m1, false, true);
    const again = await waitGet(ch, q);
    assert.strictEqual(again.content.toString(), 'a'); // back at its place, first
    assert.strictEqual(again.fields.redelivered, true);
    ch.ack(again);
    await ch.close();
  },

  async topicRouting(conn) {
    const ch = await conn.createChannel();
    const x = uniq('jsx');
    await ch.assertExchange(x, 'topic', {autoDelete: true});
    const q = (await ch.assertQueue('', {exclusive: true})).queue;
    await ch.bindQueue(q, x, 'a.*.c');
    ch.publish(x, 'a.b.c', Buffer.from('yes'));
    ch.publish(x, 'a.b.b.c', Buffer.from('no'));
    const m = await waitGet(ch, q);
    assert.strictEqual(m.content.toString(), 'yes');
    assert.strictEqual(await ch.get(q), false);
    await ch.close();
  },

  async purgeAndDelete(conn) {
    const ch = await conn.createChannel();
    const q = (await ch.assertQueue(uniq('jsp'))).queue;
    for (let i = 0; i < 5; i++) ch.sendToQueue(q, Buffer.from('x'));
    await ch.checkQueue(q); // a round trip: the publishes are in
    assert.strictEqual((await ch.purgeQueue(q)).messageCount, 5);
    ch.sendToQueue(q, Buffer.from('y'));
    assert.strictEqual((await ch.deleteQueue(q)).messageCount, 1);
    await ch.close();
  },

  async cancelNotificationOnDelete(conn) {
    const ch = await conn.createChannel();
    const q = (await ch.assertQueue(uniq('jsc'))).queue;
    const cancelled = new Promise((resolve) => ch.consume(q, (m) => { if (m === null) resolve(); }));
    await new Promise((r) => setTimeout(r, 50));
    const other = await conn.createChannel();
    await other.deleteQueue(q);
    await Promise.race([cancelled, new Promise((_, rej) => setTimeout(() => rej(new Error('no basic.cancel')), 3000))]);
    await other.close();
  },

  async channelErrorIs404(conn) {
    const ch = await conn.createChannel();
    const closed = new Promise((resolve) => ch.on('error', resolve));
    await assert.rejects(ch.checkQueue(uniq('missing')), /404/);
    const err = await closed;
    assert.strictEqual(err.code, 404);
  },
};

async function waitGet(ch, q) {
  for (let i = 0; i < 100; i++) {
    const m = await ch.get(q);
    if (m) return m;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`nothing in ${q}`);
}

(async () => {
  const conn = await amqp.connect(url);
  const props = conn.connection.serverProperties;
  assert.ok(props.product && props.capabilities.publisher_confirms);
  for (const [name, fn] of Object.entries(scenarios)) {
    try {
      await fn(conn);
      console.log(`ok ${name}`);
    } catch (e) {
      console.log(`FAIL ${name}: ${e && e.stack || e}`);
      process.exit(1);
    }
  }
  await conn.close();
  console.log('all amqplib scenarios passed');
})().catch((e) => {
  console.log(`FAIL connect: ${e && e.stack || e}`);
  process.exit(1);
});
