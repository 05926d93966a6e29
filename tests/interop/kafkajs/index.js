// KafkaJS through kafka-mirror-proxy: admin, idempotent and transactional produce, a consumer group
// (classic protocol; KafkaJS has no KIP-848 support), and a produce to a mirror topic that must fail
// fast.
//
// Run by tests/kafka_it/proxy.rs (kafkajs_through_the_proxy) as
//   node index.js --bootstrap HOST:PORT --topic T --mirror-topic M --txn-id ID --group G
// Prints one JSON object per step on stdout; exits 1 at the first unexpected failure (with a
// {"step":…,"fatal":…} line). The mirror step reports the error the client gives the application.
'use strict';

const { Kafka, logLevel } = require('kafkajs');

function arg(name) {
  const i = process.argv.indexOf(`--${name}`);
  if (i < 0 || i + 1 >= process.argv.length) throw new Error(`missing --${name}`);
  return process.argv[i + 1];
}

const emit = (v) => process.stdout.write(JSON.stringify(v) + '\n');

async function main() {
  const bootstrap = arg('bootstrap');
  const topic = arg('topic');
  const mirror = arg('mirror-topic');
  const txnId = arg('txn-id');
  const group = arg('group');
  const kafka = new Kafka({ clientId: 'kmp-interop-kafkajs', brokers: [bootstrap], logLevel: logLevel.NOTHING });
  let step = 'admin';
  try {
    const admin = kafka.admin();
    await admin.connect();
    await admin.createTopics({ topics: [{ topic, numPartitions: 2, replicationFactor: 1 }], waitForLeaders: true });
    const meta = await admin.fetchTopicMetadata({ topics: [topic] });
    const cluster = await admin.describeCluster();
    emit({ step: 'describe', partitions: meta.topics[0].partitions.length, brokers: cluster.brokers.map((b) => ({ id: b.nodeId, host: b.host, port: b.port })) });
    await admin.disconnect();

    step = 'produce';
    const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
    await producer.connect();
    const messages = Array.from({ length: 10 }, (_, i) => ({ key: `k${i}`, value: `idempotent-${i}` }));
    await producer.send({ topic, messages, acks: -1 });
    emit({ step: 'produce', count: messages.length });
    await producer.disconnect();

    step = 'transaction';
    const txProducer = kafka.producer({ transactionalId: txnId, idempotent: true, maxInFlightRequests: 1 });
    await txProducer.connect();
    for (const commit of [true, false]) {
      const tx = await txProducer.transaction();
      await tx.send({ topic, messages: Array.from({ length: 5 }, (_, i) => ({ value: `txn-${commit}-${i}` })) });
      if (commit) await tx.commit(); else await tx.abort();
    }
    emit({ step: 'transaction', committed: 5, aborted: 5 });
    await txProducer.disconnect();

    step = 'group';
    const consumer = kafka.consumer({ groupId: group, readUncommitted: false });
    await consumer.connect();
    await consumer.subscribe({ topics: [topic], fromBeginning: true });
    let records = 0;
    await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`only ${records} records in 60 s`)), 60000);
      consumer.run({
        eachMessage: async () => {
          records += 1;
          if (records >= 15) { clearTimeout(timer); resolve(); }
        },
      }).catch(reject);
    });
    await consumer.disconnect();
    emit({ step: 'group', protocol: 'classic', records });

    step = 'mirror';
    const refused = kafka.producer({ retry: { retries: 5 } });
    await refused.connect();
    const start = Date.now();
    try {
      await refused.send({ topic: mirror, messages: [{ value: 'refused' }] });
      emit({ step: 'mirror', fatal: 'the produce to the mirror topic succeeded' });
      process.exit(1);
    } catch (e) {
      emit({ step: 'mirror', error: `${e.name}: ${e.message}`, code: e.type || null, retriable: !!e.retriable, elapsed_ms: Date.now() - start });
    }
    await refused.disconnect();
  } catch (e) {
    emit({ step, fatal: `${e.name}: ${e.message}` });
    process.exit(1);
  }
}

main();
