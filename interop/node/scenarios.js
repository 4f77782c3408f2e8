// amqplib scenarios for the interop suite: `node scenarios.js <scenario> <url> <names-json>`
// prints one JSON observation on stdout. Names come from the Python side (which deletes them after).
'use strict';
const amqp = require('amqplib');

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function errObs(e) {
  // amqplib puts the close's reply code and class/method ids on the error
  return { error: e.constructor.name, code: e.code, classId: e.classId, methodId: e.methodId,
    text: (/message "([A-Z_]+)/.exec(String(e.message || '')) || [null, String(e.message)])[1] };
}

function msgObs(m) {
  if (!m) return false;
  const p = m.properties;
  const props = {};
  for (const k of Object.keys(p)) if (p[k] !== undefined) props[k] = p[k];
  return { body: m.content.toString(), exchange: m.fields.exchange, routingKey: m.fields.routingKey,
    redelivered: m.fields.redelivered, deliveryTag: m.fields.deliveryTag, props };
}

async function withConn(url, fn) {
  const conn = await amqp.connect(url, { timeout: 5000 });
  conn.on('error', () => {});
  try { return await fn(conn); } finally { try { await conn.close(); } catch (e) { /* already closed */ } }
}

const SCENARIOS = {
  async roundtrip(url, n) {
    return withConn(url, async (conn) => {
      const ch = await conn.createChannel();
      const ok = await ch.assertQueue(n.q, { durable: false });
      ch.sendToQueue(n.q, Buffer.from('hello'), { contentType: 'text/plain', headers: { a: 1, s: 'x' },
        messageId: 'm1', correlationId: 'c1', priority: 3, persistent: true, timestamp: 1700000000,
        type: 't', appId: 'node', expiration: '60000' });
      const got = [];
      await new Promise((resolve) => {
        ch.consume(n.q, (m) => { got.push(msgObs(m)); ch.ack(m); resolve(); });
      });
      return { declare: ok, got };
    });
  },

  async confirms(url, n) {
    return withConn(url, async (conn) => {
      const ch = await conn.createConfirmChannel();
      await ch.assertQueue(n.q);
      const acked = [];
      for (let i = 1; i <= 20; i++) ch.sendToQueue(n.q, Buffer.from('c' + i), {}, (err) => { if (!err) acked.push(i); });
      await ch.waitForConfirms();
      const q = await ch.checkQueue(n.q);
      return { acked: acked.sort((a, b) => a - b), messageCount: q.messageCount };
    });
  },

  async checkQueueMissing(url, n) {
    return withConn(url, async (conn) => {
      const ch = await conn.createChannel();
      ch.on('error', () => {});
      try { await ch.checkQueue(n.missing); return { ok: true }; } catch (e) { return errObs(e); }
    });
  },

  async redeclareMismatch(url, n) {
    return withConn(url, async (conn) => {
      const ch = await conn.createChannel();
      ch.on('error', () => {});
      await ch.assertExchange(n.x, 'direct');
      try { await ch.assertExchange(n.x, 'fanout'); return { ok: true }; } catch (e) { return errObs(e); }
    });
  },

  async topicRouting(url, n) {
    return withConn(url, async (conn) => {
      const ch = await conn.createChannel();
      await ch.assertExchange(n.x, 'topic', { durable: false });
      await ch.assertQueue(n.q);
      await ch.bindQueue(n.q, n.x, 'a.#');
      await ch.bindQueue(n.q, n.x, '*.z');
      for (const rk of ['a', 'a.b.c', 'b.z', 'b.y', 'a.z']) ch.publish(n.x, rk, Buffer.from(rk));
      const got = [];
      for (;;) { const m = await ch.get(n.q, { noAck: true }); if (!m) break; got.push(m.content.toString()); }
      return got;
    });
  },

  async prefetch(url, n) {
    return withConn(url, async (conn) => {
      const ch = await conn.createChannel();
      await ch.assertQueue(n.q);
      for (let i = 0; i < 10; i++) ch.sendToQueue(n.q, Buffer.from('p' + i));
      await ch.prefetch(3);
      const got = [];
      await ch.consume(n.q, (m) => got.push(m));
      await sleep(300);
      const before = got.length;
      ch.ack(got[1], true);
      await sleep(300);
      return { beforeAck: before, afterAckingTwo: got.length };
    });
  },

  async nackRequeue(url, n) {
    return withConn(url, async (conn) => {
      const ch = await conn.createChannel();
      await ch.assertQueue(n.q);
      ch.sendToQueue(n.q, Buffer.from('a'));
      ch.sendToQueue(n.q, Buffer.from('b'));
      const first = await ch.get(n.q);
      ch.nack(first, false, true);
      const out = [];
      for (;;) { const m = await ch.get(n.q, { noAck: true }); if (!m) break; out.push(msgObs(m)); }
      return out;
    });
  },

  async mandatoryReturn(url, n) {
    return withConn(url, async (conn) => {
      const ch = await conn.createChannel();
      const returned = new Promise((resolve) => ch.on('return', (m) => resolve({
        replyCode: m.fields.replyCode, replyText: m.fields.replyText, routingKey: m.fields.routingKey,
        body: m.content.toString() })));
      ch.publish('amq.direct', n.nowhere, Buffer.from('back'), { mandatory: true });
      return Promise.race([returned, sleep(2000).then(() => 'no return')]);
    });
  },

  async serverNamedExclusive(url, n) {
    return withConn(url, async (conn) => {
      const ch = await conn.createChannel();
      const ok = await ch.assertQueue('', { exclusive: true });
      ch.sendToQueue(ok.queue, Buffer.from('self'));
      const m = await ch.get(ok.queue, { noAck: true });
      const c = await ch.consume(ok.queue, () => {});
      return { declare: ok, got: msgObs(m), consumerTag: c.consumerTag };
    });
  },

  async badVhost(url) {
    const u = url.replace(/\/[^/]*$/, '/no-such-vhost-interop');
    try { const c = await amqp.connect(u, { timeout: 5000 }); await c.close(); return { ok: true }; } catch (e) {
      return { error: e.constructor.name, code: e.code, text: String(e.message || '').includes('NOT_ALLOWED') ? 'NOT_ALLOWED' : e.message };
    }
  },

  async badPassword(url) {
    const u = url.replace(/:\/\/([^:]+):[^@]*@/, '://$1:wrong@');
    try { const c = await amqp.connect(u, { timeout: 8000 }); await c.close(); return { ok: true }; } catch (e) {
      return { error: e.constructor.name, accessRefused: String(e.message || '').includes('ACCESS_REFUSED') };
    }
  },

  async connectionError530(url, n) {
    // a consumer tag reused on one channel: RabbitMQ closes the whole connection with 530
    const conn = await amqp.connect(url, { timeout: 5000 });
    const closed = new Promise((resolve) => conn.on('error', (e) => resolve(errObs(e))));
    const ch = await conn.createChannel();
    ch.on('error', () => {});
    await ch.assertQueue(n.q);
    await ch.consume(n.q, () => {}, { consumerTag: 'dup' });
    try { await ch.consume(n.q, () => {}, { consumerTag: 'dup' }); } catch (e) { /* observed below */ }
    return Promise.race([closed, sleep(3000).then(() => 'no error')]);
  },

  async cancelNotification(url, n) {
    return withConn(url, async (conn) => {
      const ch = await conn.createChannel();
      await ch.assertQueue(n.q);
      const cancelled = new Promise((resolve) => ch.consume(n.q, (m) => resolve(m === null ? 'cancelled by server' : 'message')));
      const other = await conn.createChannel();
      await other.deleteQueue(n.q);
      return Promise.race([cancelled, sleep(2000).then(() => 'no cancel')]);
    });
  },

  async exchangeToExchange(url, n) {
    return withConn(url, async (conn) => {
      const ch = await conn.createChannel();
      await ch.assertExchange(n.x, 'direct', { durable: false });
      await ch.assertExchange(n.x2, 'fanout', { durable: false });
      await ch.assertQueue(n.q);
      await ch.bindExchange(n.x2, n.x, 'k');
      await ch.bindQueue(n.q, n.x2, '');
      ch.publish(n.x, 'k', Buffer.from('through'));
      ch.publish(n.x, 'other', Buffer.from('dropped'));
      await ch.unbindExchange(n.x2, n.x, 'k');
      ch.publish(n.x, 'k', Buffer.from('after-unbind'));
      const got = [];
      for (;;) { const m = await ch.get(n.q, { noAck: true }); if (!m) break; got.push(m.content.toString()); }
      return got;
    });
  },

  async updateSecret(url, n) {
    // amqplib's own suite: a token refresh with any secret, then the connection carries on.
    return withConn(url, async (conn) => {
      await conn.updateSecret(Buffer.from('new secret'), 'no reason');
      const ch = await conn.createChannel();
      const ok = await ch.assertQueue(n.q);
      return { updated: true, declared: ok.queue === n.q };
    });
  },

  async ipv6Loopback(url, n) {
    // Node resolves localhost to ::1 first on many systems: the broker must be there too.
    const u = new URL(url);
    u.hostname = '[::1]';
    return withConn(u.toString(), async (conn) => {
      const ch = await conn.createChannel();
      await ch.assertQueue(n.q);
      ch.sendToQueue(n.q, Buffer.from('over ::1'));
      const m = await new Promise((resolve) => ch.consume(n.q, resolve, { noAck: true }));
      return { body: m.content.toString() };
    });
  },

  closeAfterPublishes(url, n) {
    // The callback API sends connection.close ahead of the channel's queued publishes: the broker must
    // still answer close-ok after the frames that follow it, or the callback never fires.
    const cb = require('amqplib/callback_api');
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve({ closeCallback: 'never fired' }), 8000);
      const done = (obs) => { clearTimeout(timer); resolve(obs); };
      cb.connect(url, (err, conn) => {
        if (err) return done(errObs(err));
        conn.on('error', (e) => done({ connectionError: errObs(e) }));
        conn.createChannel((err2, ch) => {
          if (err2) return done(errObs(err2));
          ch.assertQueue(n.q, { durable: false }, (err3) => {
            if (err3) return done(errObs(err3));
            for (let i = 1; i <= 10; i++) ch.sendToQueue(n.q, Buffer.from('m' + i));
            conn.close((err4) => done({ closeCallback: 'fired', error: err4 ? errObs(err4) : null }));
          });
        });
      });
    });
  },

  async largeBody(url, n) {
    return withConn(url, async (conn) => {
      const ch = await conn.createChannel();
      await ch.assertQueue(n.q);
      const body = Buffer.alloc(2 * 1024 * 1024 + 17, 7);
      ch.sendToQueue(n.q, body);
      const m = await new Promise((resolve) => ch.consume(n.q, resolve, { noAck: true }));
      return { length: m.content.length, same: m.content.equals(body) };
    });
  },
};

async function main() {
  const [name, url, namesJson] = process.argv.slice(2);
  const fn = SCENARIOS[name];
  if (!fn) throw new Error('unknown node scenario ' + name);
  const obs = await fn(url, JSON.parse(namesJson || '{}'));
  process.stdout.write(JSON.stringify(obs) + '\n');
}

main().then(() => process.exit(0), (e) => {
  process.stdout.write(JSON.stringify({ node_raised: e.constructor.name, text: String(e.message).slice(0, 200) }) + '\n');
  process.exit(0);
});
