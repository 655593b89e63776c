// kafkajs against a Gregor broker, for e2e/test_secure_clients.py. One JSON argument:
//   {brokers: ["127.0.0.1:9094"], ca: "ca.pem", cert?: "c.crt", key?: "c.key",
//    sasl?: {mechanism: "scram-sha-512", username, password},
//    topic, group, count, partitions}
// Creates the topic, produces `count` records, consumes them in the group (committing each
// record's offset), then runs the admin calls. Prints one JSON object on stdout: what each step
// saw. kafkajs's own log goes to stderr. Exit code 1 (with {"error": ...}) on any failure.
'use strict';

const fs = require('fs');
const { Kafka, logLevel } = require('kafkajs');

const opts = JSON.parse(process.argv[2]);

// kafkajs logs with console.info by default, which would mix with the JSON on stdout.
const toStderr = () => ({ namespace, level, log }) => {
  process.stderr.write(`${namespace} ${level} ${log.message}\n`);
};

function kafka() {
  const ssl = { ca: [fs.readFileSync(opts.ca)] };
  if (opts.cert) {
    ssl.cert = fs.readFileSync(opts.cert);
    ssl.key = fs.readFileSync(opts.key);
  }
  const config = {
    clientId: `kafkajs-${opts.group}`,
    brokers: opts.brokers,
    ssl,
    logLevel: logLevel.WARN,
    logCreator: toStderr,
    connectionTimeout: 10000,
    requestTimeout: 15000,
    retry: { retries: 5 },
  };
  if (opts.sasl) config.sasl = opts.sasl;
  return new Kafka(config);
}

async function consumeAll(client) {
  const consumer = client.consumer({
    groupId: opts.group, sessionTimeout: 6000, heartbeatInterval: 500, rebalanceTimeout: 10000,
  });
  await consumer.connect();
  await consumer.subscribe({ topics: [opts.topic], fromBeginning: true });
  const values = [];
  let done;
  const all = new Promise((resolve) => { done = resolve; });
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ topic, partition, message }) => {
      values.push(message.value.toString());
      const next = (BigInt(message.offset) + 1n).toString();
      await consumer.commitOffsets([{ topic, partition, offset: next }]);
      if (values.length >= opts.count) done();
    },
  });
  await all;
  return { consumer, values };
}

async function main() {
  const client = kafka();
  const admin = client.admin();
  await admin.connect();
  const out = {};
  out.created = await admin.createTopics({
    topics: [{ topic: opts.topic, numPartitions: opts.partitions, replicationFactor: 1 }],
    waitForLeaders: true,
  });
  out.listed = (await admin.listTopics()).includes(opts.topic);
  const meta = await admin.fetchTopicMetadata({ topics: [opts.topic] });
  out.partitions = meta.topics[0].partitions.length;

  const producer = client.producer();
  await producer.connect();
  const messages = [];
  for (let i = 0; i < opts.count; i++) messages.push({ key: `k${i}`, value: `v${i}` });
  const sent = await producer.send({ topic: opts.topic, messages });
  out.produce_errors = sent.filter((r) => r.errorCode !== 0).length;
  await producer.disconnect();

  const { consumer, values } = await consumeAll(client);
  // Described while the member is in the group.
  const described = await admin.describeGroups([opts.group]);
  const g = described.groups[0];
  out.group = { state: g.state, members: g.members.length, protocolType: g.protocolType };
  await consumer.disconnect();
  out.consumed = values.sort();

  const committed = await admin.fetchOffsets({ groupId: opts.group, topics: [opts.topic] });
  out.committed = committed[0].partitions.reduce((sum, p) => sum + Number(p.offset), 0);
  const ends = await admin.fetchTopicOffsets(opts.topic);
  out.log_end = ends.reduce((sum, p) => sum + Number(p.high), 0);

  await admin.deleteTopics({ topics: [opts.topic], timeout: 15000 });
  out.listed_after_delete = (await admin.listTopics()).includes(opts.topic);
  await admin.disconnect();
  process.stdout.write(JSON.stringify(out) + '\n');
}

main().then(
  () => process.exit(0),
  (e) => {
    process.stdout.write(JSON.stringify({ error: `${e.name}: ${e.message}`, type: e.type }) + '\n');
    process.exit(1);
  },
);
