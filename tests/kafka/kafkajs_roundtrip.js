// kafkajs 2.2.4 against mpbroker's modern listener (tests/kafka/test_kafkajs.py).
// Usage: node kafkajs_roundtrip.js BOOTSTRAP TOPIC produce|consume|group COUNT
//   produce: the producer (acks -1, then 1; no compression, then gzip: the other codecs
//     are plugins kafkajs does not ship) sends keyed messages with headers and
//     timestamps to partition 0; the admin client reads the topic's metadata and
//     offsets. Prints one JSON object: what was sent, the produce answers, the metadata.
//   consume: a consumer in group TOPIC-group (kafkajs needs a group: FindCoordinator,
//     JoinGroup...) reads until it has 6 messages or 20 s passed (the broker's first
//     rebalance waits group.initial.rebalance.delay.ms, 3 s by default), commits them,
//     leaves; prints {"error": ...} or {"messages": [...]}.
//   group COUNT: two consumers (default settings) in group TOPIC-group read until they
//     have COUNT messages between them and each holds partitions of its own (or 40 s), then
//     leave; prints {"error": ...} or {"members": [{"messages": [...], "assignment":
//     {topic: [partitions]}}, ...]}.
'use strict';
const path = require('path');
const modules = process.env.MPBROKER_NODE_MODULES ||
  path.join(process.env.HOME || '', '.cache', 'mpbroker-test-node', 'node_modules');
const { Kafka, CompressionTypes, logLevel } = require(path.join(modules, 'kafkajs'));

const [bootstrap, topic, mode] = process.argv.slice(2);
const kafka = new Kafka({ clientId: 'mpbroker-test', brokers: [bootstrap], logLevel: logLevel.NOTHING,
  retry: { retries: 2 } });
const BASE_TS = 1700000000000;

async function produce() {
  const producer = kafka.producer();
  const admin = kafka.admin();
  await producer.connect();
  const sent = [];
  const answers = [];
  const rounds = [[-1, CompressionTypes.None], [1, CompressionTypes.GZIP]];
  for (const [acks, compression] of rounds) {
    const messages = [];
    for (let i = 0; i < 3; i++) {
      const n = sent.length;
      const message = { key: `key-${n}`, value: `value-${n}`, partition: 0,
        timestamp: String(BASE_TS + n), headers: { h: `x${n}` } };
      messages.push(message);
      sent.push({ key: message.key, value: message.value, timestamp: BASE_TS + n, headers: { h: `x${n}` } });
    }
    const answer = await producer.send({ topic, acks, compression, messages });
    answers.push(...answer.map((a) => ({ partition: a.partition, errorCode: a.errorCode, baseOffset: a.baseOffset })));
  }
  await producer.disconnect();
  await admin.connect();
  const metadata = await admin.fetchTopicMetadata({ topics: [topic] });
  const offsets = await admin.fetchTopicOffsets(topic);
  await admin.disconnect();
  return { sent, answers, metadata, offsets };
}

async function consume() {
  const consumer = kafka.consumer({ groupId: `${topic}-group`, sessionTimeout: 6000, rebalanceTimeout: 3000 });
  const messages = [];
  let crashed = null;
  consumer.on(consumer.events.CRASH, (event) => { crashed = `${event.payload.error.name}: ${event.payload.error.message}`; });
  try {
    await consumer.connect();
    await consumer.subscribe({ topic, fromBeginning: true });
    await consumer.run({ eachMessage: async ({ message }) => { messages.push(message.value.toString()); } });
    for (let i = 0; i < 200 && crashed === null && messages.length < 6; i++) {
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    if (crashed !== null) return { error: crashed };
  } catch (error) {
    return { error: `${error.name}: ${error.message}` };
  } finally {
    await consumer.disconnect().catch(() => {});
  }
  return { messages };
}

async function group(count) {
  const members = [0, 1].map(() => ({ consumer: kafka.consumer({ groupId: `${topic}-group` }), messages: [],
    assignment: {}, joins: [] }));
  let crashed = null;
  const total = () => members.reduce((sum, m) => sum + m.messages.length, 0);
  const held = (m) => Object.values(m.assignment).reduce((sum, ps) => sum + ps.length, 0);
  // settled: each holds partitions, none held twice (a member's last GROUP_JOIN may be older)
  const settled = () => members.every((m) => held(m) > 0) && new Set(members.flatMap((m) =>
    Object.entries(m.assignment).flatMap(([t, ps]) => ps.map((p) => `${t}/${p}`)))).size ===
    members.reduce((sum, m) => sum + held(m), 0);
  try {
    for (const m of members) {
      m.consumer.on(m.consumer.events.CRASH, (event) => {
        crashed = `${event.payload.error.name}: ${event.payload.error.message}`;
      });
      m.consumer.on(m.consumer.events.GROUP_JOIN, (event) => {
        m.assignment = event.payload.memberAssignment;
        m.joins.push(event.payload.memberAssignment);
      });
      await m.consumer.connect();
      await m.consumer.subscribe({ topic, fromBeginning: true });
    }
    // Both started at once: both join the group's first rebalance (the broker's initial delay
    // waits for the second), so neither reads everything alone first.
    await Promise.all(members.map((m) => m.consumer.run({ eachMessage: async ({ partition, message }) => {
      m.messages.push([partition, message.value.toString()]);
    } })));
    for (let i = 0; i < 400 && crashed === null && !(total() >= count && settled()); i++) {
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    if (crashed !== null) return { error: crashed };
    // What each read and held, taken before leaving (a leave rebalances the other).
    return { members: members.map((m) => ({ messages: [...m.messages], assignment: m.assignment, joins: [...m.joins] })) };
  } catch (error) {
    return { error: `${error.name}: ${error.message}` };
  } finally {
    for (const m of members) await m.consumer.disconnect().catch(() => {});
  }
}

const runs = { consume, produce, group: () => group(Number(process.argv[5])) };
runs[mode]().then(
  (result) => { process.stdout.write(JSON.stringify(result) + '\n'); process.exit(0); },
  (error) => { process.stderr.write(`${error.name}: ${error.message}\n${error.stack}\n`); process.exit(1); });
