//! Smoke test of the real-Kafka test harness: the shared source cluster, the Java test client and the
//! librdkafka reader agree byte for byte on what was written.

use kafka_harness::{ConsumeOptions, ProduceLine, ProduceOptions, ProducerRecord, java_client, librdkafka_consume};

#[test]
fn java_and_librdkafka_read_back_what_was_produced() {
    let cluster = kafka_harness::source();
    let bootstrap = cluster.bootstrap();
    let client = java_client();
    let topic = kafka_harness::unique_name("smoke");
    client.create_topic(&bootstrap, &topic, 3, 1, &[]).expect("create topic");

    // Every shape a mirror must keep: null vs empty keys and values, repeated header keys, null and
    // empty header values, explicit timestamps, non-UTF-8 bytes.
    let records = [
        ProducerRecord::to(0).key("k0").value("v0").timestamp(1_700_000_000_000),
        ProducerRecord::to(0).key("k1").header("h", "1").header("h", "2").header("other", ""),
        ProducerRecord::to(0).value("no key").null_header("nullhdr"),
        ProducerRecord::to(1).key("").value(""),
        ProducerRecord::to(1).key(vec![0u8, 255, 128]).value(vec![1u8; 300]).timestamp(1),
        ProducerRecord::to(2).key("tombstone"),
    ];
    let lines: Vec<ProduceLine> = records.iter().cloned().map(ProduceLine::from).collect();
    let placed = client.produce(&bootstrap, &topic, &ProduceOptions::default(), &lines).expect("produce");
    assert_eq!(placed, vec![(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 0)]);

    let java = client.consume(&bootstrap, &topic, &ConsumeOptions::default()).expect("java consume");
    let rdkafka = librdkafka_consume(&bootstrap, &topic, &ConsumeOptions::default()).expect("librdkafka consume");
    assert_eq!(java, rdkafka, "the two readers disagree");

    assert_eq!(java.len(), records.len());
    for ((sent, (partition, offset)), got) in records.iter().zip(&placed).zip(&java) {
        assert_eq!((got.partition, got.offset), (*partition, *offset));
        assert_eq!(got.key, sent.key);
        assert_eq!(got.value, sent.value);
        assert_eq!(got.headers, sent.headers);
        if let Some(ts) = sent.timestamp {
            assert_eq!(got.timestamp, ts);
        }
        assert_eq!(got.timestamp_type, "CreateTime");
    }

    let offsets = client.offsets(&bootstrap, &topic).expect("offsets");
    let latest: Vec<(i32, i64, i64)> = offsets.iter().map(|o| (o.partition, o.earliest, o.latest)).collect();
    assert_eq!(latest, vec![(0, 0, 3), (1, 0, 2), (2, 0, 1)]);
}
