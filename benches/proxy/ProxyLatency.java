/*
 * ProxyLatency: end-to-end latency of Kafka records at a fixed rate, for benches/proxy/bench.py.
 *
 * One JVM runs a producer (acks=all, idempotent) that sends records at --rate records/s for
 * --duration-s seconds, each value starting with System.nanoTime() at send, and a consumer
 * (assigned to every partition, from the end) that records now - sendTime per record in an
 * HdrHistogram (microseconds, 3 significant digits). The producer's send-to-ack latency goes into a
 * second histogram. The first --warmup-s seconds are not recorded. Run with the Kafka jars (which
 * include HdrHistogram) on the classpath, as a single-file source program:
 *
 *   java -cp 'target/kafka/4.4.0/libs/*' benches/proxy/ProxyLatency.java --bootstrap HOST:PORT --topic T
 *        [--rate 5000] [--duration-s 30] [--warmup-s 5] [--record-size 1024] [--linger-ms 0]
 *        [--batch-size 16384]
 *
 * Prints one JSON line: sent (in the measured phase), sent_all (warm-up included), received,
 * achieved rate, e2e and ack p50/p99/p99.9/max in microseconds.
 */

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;

import org.HdrHistogram.Histogram;
import org.HdrHistogram.Recorder;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class ProxyLatency {
    static String arg(String[] args, String name, String dflt) {
        for (int i = 0; i + 1 < args.length; i++) if (args[i].equals("--" + name)) return args[i + 1];
        if (dflt == null) throw new IllegalArgumentException("missing --" + name);
        return dflt;
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = arg(args, "bootstrap", null);
        String topic = arg(args, "topic", null);
        int rate = Integer.parseInt(arg(args, "rate", "5000"));
        int durationS = Integer.parseInt(arg(args, "duration-s", "30"));
        int warmupS = Integer.parseInt(arg(args, "warmup-s", "5"));
        int size = Math.max(16, Integer.parseInt(arg(args, "record-size", "1024")));
        String lingerMs = arg(args, "linger-ms", "0");
        String batchSize = arg(args, "batch-size", "16384");

        Properties pp = new Properties();
        pp.put("bootstrap.servers", bootstrap);
        pp.put("acks", "all");
        pp.put("enable.idempotence", "true");
        pp.put("linger.ms", lingerMs);
        pp.put("batch.size", batchSize);
        pp.put("key.serializer", ByteArraySerializer.class.getName());
        pp.put("value.serializer", ByteArraySerializer.class.getName());
        Properties cp = new Properties();
        cp.put("bootstrap.servers", bootstrap);
        cp.put("fetch.min.bytes", "1");
        cp.put("fetch.max.wait.ms", "100");
        cp.put("key.deserializer", ByteArrayDeserializer.class.getName());
        cp.put("value.deserializer", ByteArrayDeserializer.class.getName());

        Recorder e2e = new Recorder(3);
        Recorder ack = new Recorder(3);
        AtomicBoolean recording = new AtomicBoolean(false);
        AtomicBoolean done = new AtomicBoolean(false);
        AtomicLong received = new AtomicLong();
        AtomicLong sent = new AtomicLong();
        long sentAll = 0;

        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(pp);
             KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(cp)) {
            List<TopicPartition> tps = new ArrayList<>();
            for (PartitionInfo p : consumer.partitionsFor(topic)) tps.add(new TopicPartition(topic, p.partition()));
            consumer.assign(tps);
            consumer.seekToEnd(tps);
            for (TopicPartition tp : tps) consumer.position(tp);
            Thread reader = new Thread(() -> {
                while (!done.get()) {
                    for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(50))) {
                        long now = System.nanoTime();
                        long t = java.nio.ByteBuffer.wrap(r.value()).getLong();
                        if (t > 0) {
                            received.incrementAndGet();
                            e2e.recordValue(Math.max(0, (now - t) / 1000));
                        }
                    }
                }
            });
            reader.start();

            // Paced without spinning: wake when the next record is due (parkNanos, about 60 us of
            // timer slack on Linux) and send every record due by then. A spinning pacer takes a
            // whole core, which on a small machine is a core the broker and the proxy need.
            long intervalNs = 1_000_000_000L / rate;
            long start = System.nanoTime();
            long warmupEnd = start + warmupS * 1_000_000_000L;
            long end = warmupEnd + durationS * 1_000_000_000L;
            long next = start;
            long measuredStart = 0;
            while (true) {
                long now = System.nanoTime();
                if (now >= end) break;
                if (now < next) {
                    LockSupport.parkNanos(next - now);
                    continue;
                }
                next += intervalNs;
                boolean measure = now >= warmupEnd;
                if (measure && !recording.getAndSet(true)) {
                    // Records the warm-up fell behind on are not sent in a burst at the start of
                    // the measured phase: the schedule restarts from now.
                    next = now + intervalNs;
                    e2e.getIntervalHistogram();
                    ack.getIntervalHistogram();
                    received.set(0);
                    measuredStart = now;
                }
                byte[] value = new byte[size];
                long sendNs = System.nanoTime();
                java.nio.ByteBuffer.wrap(value).putLong(measure ? sendNs : -1L);
                if (measure) sent.incrementAndGet();
                sentAll++;
                producer.send(new ProducerRecord<>(topic, value), (md, ex) -> {
                    if (ex != null) { System.err.println("send failed: " + ex); return; }
                    if (measure) ack.recordValue(Math.max(0, (System.nanoTime() - sendNs) / 1000));
                });
            }
            producer.flush();
            long measuredEnd = System.nanoTime();
            Thread.sleep(2000);
            done.set(true);
            reader.join();
            Histogram h = e2e.getIntervalHistogram();
            Histogram a = ack.getIntervalHistogram();
            double seconds = (measuredEnd - measuredStart) / 1e9;
            System.out.printf(
                "{\"rate_target\":%d,\"sent\":%d,\"sent_all\":%d,\"received\":%d,\"rate_achieved\":%.0f," +
                "\"e2e_p50_us\":%d,\"e2e_p99_us\":%d,\"e2e_p999_us\":%d,\"e2e_max_us\":%d," +
                "\"ack_p50_us\":%d,\"ack_p99_us\":%d,\"ack_p999_us\":%d,\"ack_max_us\":%d}%n",
                rate, sent.get(), sentAll, received.get(), sent.get() / seconds,
                h.getValueAtPercentile(50), h.getValueAtPercentile(99), h.getValueAtPercentile(99.9), h.getMaxValue(),
                a.getValueAtPercentile(50), a.getValueAtPercentile(99), a.getValueAtPercentile(99.9), a.getMaxValue());
        }
    }
}
