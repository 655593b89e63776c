// kafkajs transactions against a Gregor broker, for e2e/test_transactions.py. One JSON
// argument: {brokers: ["127.0.0.1:9092"], topic}. Creates the topic (2 partitions), commits a
// transaction of 10 records, aborts one of 5, commits one more record, then reads the topic
// from the start with a read_committed and a read_uncommitted consumer. Prints one JSON object
// on stdout: the values each consumer saw. kafkajs's own log goes to stderr. Exit code 1 (with
// {"error": ...}) on any failure.
'use strict';

const { Kafka, logLevel } = require('kafkajs');

const opts = JSON.parse(process.argv[2]);

const toStderr = () => ({ namespace, level, log }) => {
  process.stderr.write(`${namespace} ${level} ${log.message}\n`);
};

const kafka = new Kafka({
  clientId: 'kafkajs-txn',
  brokers: opts.brokers,
  logLevel: logLevel.WARN,
  logCreator: toStderr,
  connectionTimeout: 10000,
  requestTimeout: 15000,
  retry: { retries: 8 },
});

async function transaction(producer, values, commit) {
  const txn = await producer.transaction();
  await txn.send({
    topic: opts.topic,
    messages: values.map((v, i) => ({ value: v, partition: i % 2 })),
  });
  if (commit) await txn.commit();
  else await txn.abort();
}

async function readAll(readUncommitted, expect) {
  const consumer = kafka.consumer({
    groupId: `kafkajs-txn-${readUncommitted ? 'ru' : 'rc'}`,
    readUncommitted,
  });
  await consumer.connect();
  await consumer.subscribe({ topic: opts.topic, fromBeginning: true });
  const seen = [];
  await consumer.run({
    eachMessage: async ({ message }) => {
      seen.push(message.value.toString());
    },
  });
  // Past `expect`, a little longer: anything more would be wrong.
  const deadline = Date.now() + 30000;
  while (seen.length < expect && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 100));
  }
  await new Promise((r) => setTimeout(r, 1500));
  await consumer.disconnect();
  return seen.sort();
}

async function main() {
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic: opts.topic, numPartitions: 2 }], waitForLeaders: true });
  await admin.disconnect();
  const producer = kafka.producer({
    transactionalId: `kafkajs-${opts.topic}`,
    maxInFlightRequests: 1,
    idempotent: true,
  });
  await producer.connect();
  await transaction(producer, [...Array(10).keys()].map((i) => `c${i}`), true);
  await transaction(producer, [...Array(5).keys()].map((i) => `a${i}`), false);
  await transaction(producer, ['last'], true);
  await producer.disconnect();
  const committed = await readAll(false, 11);
  const everything = await readAll(true, 16);
  process.stdout.write(JSON.stringify({ committed, everything }) + '\n');
}

main().catch((e) => {
  process.stdout.write(JSON.stringify({ error: String(e && e.stack || e) }) + '\n');
  process.exit(1);
});
