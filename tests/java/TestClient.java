/*
 * TestClient: the Apache Kafka Java clients (producer, consumer, admin) driven by command-line
 * arguments and JSON lines, for kafka-mirror-proxy's test harness (tests/harness/src/client.rs).
 *
 * The harness compiles this file against the jars of one Kafka version and runs it as
 *     java -cp '<target/kafka/V/libs>/*:<target/kafka/V/testclient/...>' TestClient <command> [options]
 * It depends only on what those jars contain (kafka-clients, Jackson), and compiles against 3.9 and 4.x.
 *
 * Conventions
 *   - Bytes (keys, values, header values) are standard base64 strings with padding. JSON null means a
 *     null key/value/header value, which is distinct from "" (empty bytes).
 *   - Output is JSON, one object per line, on stdout. Logs and errors go to stderr.
 *   - Exit status: 0 success, 1 failure (message and stack trace on stderr), 2 bad usage.
 *   - Options common to every command:
 *       --bootstrap HOST:PORT[,...]   required
 *       --prop KEY=VALUE              extra client config, repeatable, applied last (overrides defaults)
 *       --timeout-ms N                overall deadline where a command waits (default 30000)
 *
 * Commands
 *
 *   produce --topic T [--compression none|gzip|snappy|lz4|zstd] [--idempotent] [--transactional-id ID]
 *           [--linger-ms N] [--batch-size N] [--acks all|1|0] [--max-in-flight N]
 *     Reads JSON lines from stdin, in order:
 *       {"partition":0,"key":B64|null,"value":B64|null,"headers":[["k",B64|null],...],"timestamp":MS|null}
 *           a record; "partition" and "timestamp" may be null or absent (partitioner / producer clock),
 *           "headers" may be absent; header order and repeated keys are kept.
 *       {"txn":"begin"} | {"txn":"commit"} | {"txn":"abort"}   transaction control (needs --transactional-id)
 *       {"flush":true}                                         flush: send everything buffered now
 *       {"halt":true}    flush, print the results, then exit at once (Runtime.halt) without closing the
 *                        producer: an open transaction stays open (until transaction.timeout.ms), as
 *                        when a producer crashes. Later lines are not read.
 *     Prints {"partition":P,"offset":O} for every record, in input order, once it is acknowledged (offset
 *     -1 with --acks 0). Results are printed at each flush, commit, abort and at end of input. Records sent
 *     before an abort are flushed first, so they occupy offsets (then are aborted) and are printed too.
 *     A clean end of input closes the producer, which (in 4.x clients) aborts an open transaction.
 *     Defaults: acks=all, enable.idempotence=false unless --idempotent or --transactional-id,
 *     compression none, the client's linger/batch defaults, delivery.timeout.ms 30000.
 *
 *   consume --topic T [--isolation read_committed|read_uncommitted] [--partition P]
 *     Assigns all partitions of T (or just P) without a consumer group, reads the end offsets (the last
 *     stable offsets under read_committed) once at start, then reads every partition from its beginning
 *     up to those offsets and exits. Prints per record:
 *       {"partition":P,"offset":O,"key":B64|null,"value":B64|null,"headers":[["k",B64|null],...],
 *        "timestamp":MS,"timestampType":"CreateTime"|"LogAppendTime"}
 *     Records of different partitions may interleave; within a partition they are in offset order.
 *     --follow-ms N: instead, tail every partition from its beginning for N ms, then read up to the end
 *     offsets seen at that moment. Records are printed as they arrive (in the order the consumer saw
 *     them, not filtered); an exception from poll is printed as {"error":"..."} and polling goes on. The
 *     last line is {"summary":{"polls","records","pollErrors","longestGapMs","connection-creation-total",
 *     "connection-close-total","request-total"}}: what a client of the cluster lived through.
 *
 *   share-consume --topic T --group G --count N [--offset-reset earliest|latest] [--hold]
 *     A share consumer (KafkaShareConsumer, KIP-932; needs Kafka 4.1+ jars and brokers) in share group G,
 *     subscribed to T, acknowledging explicitly: polls until N records were delivered, accepts the first N
 *     in delivery order and releases any others delivered with them, commits the acknowledgements, closes.
 *     Prints the N accepted records in the consume format, in delivery order. --offset-reset first sets the
 *     group config share.auto.offset.reset of G (where G starts on a partition it has no start offset for;
 *     Kafka's default is latest) and waits until the broker shows it. --hold: after the N records, stay in
 *     the group, accepting whatever arrives (not printed), until stdin ends; then commit and close. Fails
 *     if N records do not arrive within --timeout-ms.
 *
 *   admin create-topic --topic T [--partitions N] [--replication-factor R] [--config K=V ...]
 *     Prints {"topic":T}. Defaults: 1 partition, the broker's default replication factor.
 *   admin delete-topic --topic T                      prints {"topic":T}
 *   admin list-topics [--internal]                    prints {"topics":[...]} (sorted)
 *   admin describe-cluster                            prints {"clusterId":..,"controller":ID,"nodes":[{"id","host","port"}]}
 *   admin describe-topic --topic T
 *     Prints {"topic":T,"topicId":..,"internal":false,"partitions":[{"partition","leader","replicas","isr"}],
 *             "configs":{K:V}} where configs holds only the topic's own (non-default) settings.
 *   admin offsets --topic T
 *     Prints per partition {"partition":P,"earliest":E,"latest":HW,"lastStable":LSO}.
 *   admin delete-records --topic T --partition P --offset O
 *     Deletes records before O; prints {"partition":P,"lowWatermark":LW}.
 *   admin reassign --topic T --partition P --replicas B1,B2...
 *                                                     moves P to those brokers (B1 leads); prints {"partition","leader"}
 *   admin describe-producers --topic T
 *     Prints per partition {"partition":P,"producers":[{"producerId","producerEpoch","lastSequence",
 *             "lastTimestamp","coordinatorEpoch"|null,"currentTransactionStartOffset"|null}]}.
 *   admin group-offsets --group G
 *     Prints per committed partition {"topic","partition","offset","metadata","leaderEpoch"|null}.
 *   admin commit-offsets --group G --topic T --partition P --offset O [--metadata M]
 *     Commits an offset for a group with no active members; prints {"group":G}.
 */

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import java.io.BufferedOutputStream;
import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Comparator;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.Future;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.DescribeProducersResult.PartitionProducerState;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.ListOffsetsResult.ListOffsetsResultInfo;
import org.apache.kafka.clients.admin.ListTopicsOptions;
import org.apache.kafka.clients.admin.NewPartitionReassignment;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class TestClient {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final PrintStream OUT = new PrintStream(
            new BufferedOutputStream(new FileOutputStream(FileDescriptor.out), 1 << 16), false, StandardCharsets.UTF_8);

    /** Bad command line: exit status 2. */
    private static final class UsageException extends RuntimeException {
        private static final long serialVersionUID = 1L;

        UsageException(String message) {
            super(message);
        }
    }

    public static void main(String[] argv) {
        int status;
        try {
            status = run(argv);
        } catch (UsageException e) {
            System.err.println("usage error: " + e.getMessage() + " (see the comment at the top of TestClient.java)");
            status = 2;
        } catch (Throwable t) {
            System.err.println("error: " + t);
            t.printStackTrace();
            status = 1;
        }
        OUT.flush();
        System.err.flush();
        // exit() rather than return: client threads that did not stop must not keep the JVM alive.
        System.exit(status);
    }

    private static int run(String[] argv) throws Exception {
        if (argv.length == 0) {
            throw new UsageException("no command");
        }
        switch (argv[0]) {
            case "produce":
                return produce(Args.parse(argv, 1));
            case "consume":
                return consume(Args.parse(argv, 1));
            case "share-consume":
                return shareConsume(Args.parse(argv, 1));
            case "admin":
                if (argv.length < 2) {
                    throw new UsageException("admin needs a subcommand");
                }
                return admin(argv[1], Args.parse(argv, 2));
            default:
                throw new UsageException("unknown command " + argv[0]);
        }
    }

    // ---------------------------------------------------------------------------------------------
    // produce

    private static int produce(Args a) throws Exception {
        String topic = a.required("topic");
        String transactionalId = a.get("transactional-id");
        boolean idempotent = a.flag("idempotent") || transactionalId != null;
        Properties p = common(a, "testclient-producer");
        p.put("key.serializer", ByteArraySerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());
        p.put("enable.idempotence", Boolean.toString(idempotent));
        p.put("acks", a.get("acks", "all"));
        p.put("compression.type", a.get("compression", "none"));
        p.put("request.timeout.ms", "15000");
        p.put("delivery.timeout.ms", "30000");
        p.put("max.block.ms", Long.toString(a.timeoutMs()));
        putIfGiven(p, "linger.ms", a.get("linger-ms"));
        putIfGiven(p, "batch.size", a.get("batch-size"));
        putIfGiven(p, "max.in.flight.requests.per.connection", a.get("max-in-flight"));
        putIfGiven(p, "transactional.id", transactionalId);
        a.applyProps(p);

        KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p);
        try {
            if (transactionalId != null) {
                producer.initTransactions();
            }
            List<Future<RecordMetadata>> pending = new ArrayList<>();
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
            String line;
            int lineNumber = 0;
            while ((line = in.readLine()) != null) {
                lineNumber++;
                if (line.isBlank()) {
                    continue;
                }
                JsonNode n = JSON.readTree(line);
                if (n.has("txn")) {
                    String action = n.get("txn").asText();
                    switch (action) {
                        case "begin":
                            producer.beginTransaction();
                            break;
                        case "commit":
                            producer.commitTransaction();
                            drain(pending);
                            break;
                        case "abort":
                            producer.flush();
                            drain(pending);
                            producer.abortTransaction();
                            break;
                        default:
                            throw new UsageException("line " + lineNumber + ": unknown txn action " + action);
                    }
                } else if (n.has("flush")) {
                    producer.flush();
                    drain(pending);
                } else if (n.has("pause_ms")) {
                    producer.flush();
                    drain(pending);
                    Thread.sleep(n.get("pause_ms").asLong());
                } else if (n.has("halt")) {
                    producer.flush();
                    drain(pending);
                    System.err.flush();
                    Runtime.getRuntime().halt(0);
                } else {
                    pending.add(producer.send(toRecord(topic, n, lineNumber)));
                }
            }
            producer.flush();
            drain(pending);
        } finally {
            // Bounded: the default close() waits forever for requests to a broker that may be gone.
            producer.close(Duration.ofSeconds(10));
        }
        return 0;
    }

    private static ProducerRecord<byte[], byte[]> toRecord(String topic, JsonNode n, int lineNumber) {
        if (!n.isObject()) {
            throw new UsageException("line " + lineNumber + ": not a JSON object");
        }
        Integer partition = n.hasNonNull("partition") ? n.get("partition").asInt() : null;
        Long timestamp = n.hasNonNull("timestamp") ? n.get("timestamp").asLong() : null;
        List<Header> headers = new ArrayList<>();
        JsonNode hs = n.get("headers");
        if (hs != null && !hs.isNull()) {
            for (JsonNode h : hs) {
                if (!h.isArray() || h.size() != 2) {
                    throw new UsageException("line " + lineNumber + ": a header is [\"key\", base64|null]");
                }
                headers.add(new RecordHeader(h.get(0).asText(), bytes(h.get(1))));
            }
        }
        return new ProducerRecord<>(topic, partition, timestamp, bytes(n.get("key")), bytes(n.get("value")), headers);
    }

    /** Waits for every pending send, in order, and prints where each landed. */
    private static void drain(List<Future<RecordMetadata>> pending) throws Exception {
        for (Future<RecordMetadata> f : pending) {
            RecordMetadata md = f.get();
            ObjectNode o = JSON.createObjectNode();
            o.put("partition", md.partition());
            o.put("offset", md.hasOffset() ? md.offset() : -1L);
            emit(o);
        }
        pending.clear();
        OUT.flush();
    }

    // ---------------------------------------------------------------------------------------------
    // consume

    private static int consume(Args a) throws Exception {
        String topic = a.required("topic");
        String isolation = a.get("isolation", "read_uncommitted");
        if (!isolation.equals("read_committed") && !isolation.equals("read_uncommitted")) {
            throw new UsageException("--isolation is read_committed or read_uncommitted");
        }
        Properties p = common(a, "testclient-consumer");
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        p.put("enable.auto.commit", "false");
        p.put("auto.offset.reset", "earliest");
        p.put("isolation.level", isolation);
        // Empty partitions otherwise hold each fetch for the default 500 ms.
        p.put("fetch.max.wait.ms", "100");
        p.put("request.timeout.ms", "15000");
        p.put("default.api.timeout.ms", Long.toString(a.timeoutMs()));
        a.applyProps(p);

        long deadline = System.currentTimeMillis() + a.timeoutMs();
        String follow = a.get("follow-ms");
        if (follow != null) {
            return follow(p, topic, Long.parseLong(follow), deadline);
        }
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
            List<TopicPartition> partitions = assignFromBeginning(consumer, topic, a.get("partition"), a.timeoutMs());
            Map<TopicPartition, Long> end = consumer.endOffsets(partitions);
            Set<TopicPartition> remaining = new HashSet<>(partitions);
            remaining.removeIf(tp -> consumer.position(tp) >= end.get(tp));
            while (!remaining.isEmpty()) {
                if (System.currentTimeMillis() > deadline) {
                    Map<String, String> where = new TreeMap<>();
                    for (TopicPartition tp : remaining) {
                        where.put(tp.toString(), "position " + consumer.position(tp) + " < end " + end.get(tp));
                    }
                    throw new IllegalStateException("timed out before reaching the end offsets: " + where);
                }
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(100));
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    TopicPartition tp = new TopicPartition(r.topic(), r.partition());
                    if (r.offset() < end.get(tp)) {
                        emit(recordJson(r));
                    }
                }
                remaining.removeIf(tp -> consumer.position(tp) >= end.get(tp));
            }
        }
        return 0;
    }

    /** Assigns partition `only` of the topic (all of them if null), sorted, each from its beginning. */
    private static List<TopicPartition> assignFromBeginning(KafkaConsumer<byte[], byte[]> consumer, String topic, String only, long timeoutMs) {
        List<TopicPartition> partitions = new ArrayList<>();
        if (only != null) {
            partitions.add(new TopicPartition(topic, Integer.parseInt(only)));
        } else {
            List<PartitionInfo> infos = consumer.partitionsFor(topic, Duration.ofMillis(timeoutMs));
            if (infos == null || infos.isEmpty()) {
                throw new IllegalStateException("topic " + topic + " not found");
            }
            for (PartitionInfo info : infos) {
                partitions.add(new TopicPartition(topic, info.partition()));
            }
            partitions.sort(Comparator.comparingInt(TopicPartition::partition));
        }
        consumer.assign(partitions);
        consumer.seekToBeginning(partitions);
        return partitions;
    }

    /**
     * consume --follow-ms: tails every partition of the topic from its beginning for followMs, then
     * reads up to the end offsets seen at that moment. Records are printed as they arrive; an
     * exception from poll is printed as {"error":..} and polling goes on. Ends with a summary line.
     */
    private static int follow(Properties p, String topic, long followMs, long deadline) throws Exception {
        long started = System.currentTimeMillis();
        long polls = 0, records = 0, errors = 0, longestGapMs = 0;
        long lastProgress = started;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
            List<TopicPartition> partitions = assignFromBeginning(consumer, topic, null, Math.max(1, deadline - started));
            Map<TopicPartition, Long> end = null;
            while (true) {
                long now = System.currentTimeMillis();
                if (end == null && now >= started + followMs) {
                    end = consumer.endOffsets(partitions, Duration.ofMillis(Math.max(1, deadline - now)));
                }
                if (end != null) {
                    final Map<TopicPartition, Long> ends = end;
                    if (partitions.stream().allMatch(tp -> consumer.position(tp) >= ends.get(tp))) {
                        break;
                    }
                }
                if (now > deadline) {
                    throw new IllegalStateException("timed out before reaching the end offsets " + end);
                }
                try {
                    ConsumerRecords<byte[], byte[]> batch = consumer.poll(Duration.ofMillis(100));
                    polls++;
                    long after = System.currentTimeMillis();
                    if (!batch.isEmpty()) {
                        longestGapMs = Math.max(longestGapMs, after - lastProgress);
                        lastProgress = after;
                    }
                    for (ConsumerRecord<byte[], byte[]> r : batch) {
                        records++;
                        emit(recordJson(r));
                    }
                } catch (org.apache.kafka.common.KafkaException e) {
                    errors++;
                    ObjectNode o = JSON.createObjectNode();
                    o.put("error", e.toString());
                    emit(o);
                }
            }
            ObjectNode summary = JSON.createObjectNode();
            ObjectNode s = summary.putObject("summary");
            s.put("polls", polls);
            s.put("records", records);
            s.put("pollErrors", errors);
            s.put("longestGapMs", longestGapMs);
            for (Map.Entry<org.apache.kafka.common.MetricName, ? extends org.apache.kafka.common.Metric> m : consumer.metrics().entrySet()) {
                String name = m.getKey().name();
                boolean wanted = m.getKey().group().equals("consumer-metrics")
                        && (name.equals("connection-creation-total") || name.equals("connection-close-total") || name.equals("request-total"));
                if (wanted && m.getValue().metricValue() instanceof Number) {
                    s.put(name, ((Number) m.getValue().metricValue()).longValue());
                }
            }
            emit(summary);
        }
        return 0;
    }

    // ---------------------------------------------------------------------------------------------
    // share-consume

    private static int shareConsume(Args a) throws Exception {
        String topic = a.required("topic");
        String group = a.required("group");
        int count = Integer.parseInt(a.required("count"));
        String reset = a.get("offset-reset");
        if (reset != null) {
            setGroupConfig(a, group, "share.auto.offset.reset", reset);
        }
        Properties p = common(a, "testclient-share-consumer");
        p.put("group.id", group);
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        p.put("share.acknowledgement.mode", "explicit");
        p.put("request.timeout.ms", "15000");
        a.applyProps(p);

        // KafkaShareConsumer and AcknowledgeType exist only in Kafka 4.x jars, and this file must also compile
        // against 3.9 (see the top): so they are reached by reflection.
        Class<?> consumerClass = Class.forName("org.apache.kafka.clients.consumer.KafkaShareConsumer");
        Class<?> ackType = Class.forName("org.apache.kafka.clients.consumer.AcknowledgeType");
        Object accept = enumConstant(ackType, "ACCEPT");
        Object release = enumConstant(ackType, "RELEASE");
        Method poll = consumerClass.getMethod("poll", Duration.class);
        Method acknowledge = consumerClass.getMethod("acknowledge", ConsumerRecord.class, ackType);
        Method commitSync = consumerClass.getMethod("commitSync");
        Object consumer = consumerClass.getConstructor(Properties.class).newInstance(p);
        try {
            consumerClass.getMethod("subscribe", java.util.Collection.class).invoke(consumer, List.of(topic));
            long deadline = System.currentTimeMillis() + a.timeoutMs();
            int accepted = 0;
            while (accepted < count) {
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException("timed out with " + accepted + " of " + count + " records");
                }
                for (ConsumerRecord<byte[], byte[]> r : records(poll.invoke(consumer, Duration.ofMillis(100)))) {
                    if (accepted < count) {
                        acknowledge.invoke(consumer, r, accept);
                        emit(recordJson(r));
                        accepted++;
                    } else {
                        acknowledge.invoke(consumer, r, release);
                    }
                }
            }
            commitSync.invoke(consumer);
            OUT.flush();
            if (a.flag("hold")) {
                java.util.concurrent.atomic.AtomicBoolean ended = new java.util.concurrent.atomic.AtomicBoolean();
                Thread stdin = new Thread(() -> {
                    try {
                        while (System.in.read() >= 0) {
                            // until EOF
                        }
                    } catch (java.io.IOException e) {
                        // a broken stdin ends the hold too
                    }
                    ended.set(true);
                });
                stdin.setDaemon(true);
                stdin.start();
                while (!ended.get()) {
                    for (ConsumerRecord<byte[], byte[]> r : records(poll.invoke(consumer, Duration.ofMillis(100)))) {
                        acknowledge.invoke(consumer, r, accept);
                    }
                }
                commitSync.invoke(consumer);
            }
        } catch (InvocationTargetException e) {
            throw e.getCause() instanceof Exception ? (Exception) e.getCause() : e;
        } finally {
            consumerClass.getMethod("close").invoke(consumer);
        }
        return 0;
    }

    @SuppressWarnings("unchecked")
    private static ConsumerRecords<byte[], byte[]> records(Object polled) {
        return (ConsumerRecords<byte[], byte[]>) polled;
    }

    private static Object enumConstant(Class<?> type, String name) {
        for (Object constant : type.getEnumConstants()) {
            if (((Enum<?>) constant).name().equals(name)) {
                return constant;
            }
        }
        throw new IllegalStateException(type.getName() + " has no " + name);
    }

    /** Sets a dynamic group config (resource type GROUP, Kafka 4.x) and waits until the broker shows it. */
    private static void setGroupConfig(Args a, String group, String key, String value) throws Exception {
        try (Admin admin = Admin.create(common(a, "testclient-admin"))) {
            ConfigResource resource = new ConfigResource(ConfigResource.Type.valueOf("GROUP"), group);
            AlterConfigOp op = new AlterConfigOp(new ConfigEntry(key, value), AlterConfigOp.OpType.SET);
            admin.incrementalAlterConfigs(Map.of(resource, List.of(op))).all().get();
            long deadline = System.currentTimeMillis() + a.timeoutMs();
            while (true) {
                ConfigEntry shown = admin.describeConfigs(List.of(resource)).all().get().get(resource).get(key);
                if (shown != null && value.equals(shown.value())) {
                    return;
                }
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException("group config " + key + "=" + value + " of " + group + " not shown in time");
                }
                Thread.sleep(100);
            }
        }
    }

    private static ObjectNode recordJson(ConsumerRecord<byte[], byte[]> r) {
        ObjectNode o = JSON.createObjectNode();
        o.put("partition", r.partition());
        o.put("offset", r.offset());
        o.put("key", base64(r.key()));
        o.put("value", base64(r.value()));
        ArrayNode headers = o.putArray("headers");
        for (Header h : r.headers()) {
            ArrayNode pair = headers.addArray();
            pair.add(h.key());
            pair.add(base64(h.value()));
        }
        o.put("timestamp", r.timestamp());
        o.put("timestampType", r.timestampType().toString());
        return o;
    }

    // ---------------------------------------------------------------------------------------------
    // admin

    private static int admin(String sub, Args a) throws Exception {
        Properties p = common(a, "testclient-admin");
        p.put("request.timeout.ms", "15000");
        p.put("default.api.timeout.ms", Long.toString(a.timeoutMs()));
        a.applyProps(p);
        try (Admin admin = Admin.create(p)) {
            switch (sub) {
                case "create-topic": {
                    String topic = a.required("topic");
                    Optional<Integer> partitions = Optional.of(Integer.parseInt(a.get("partitions", "1")));
                    String rf = a.get("replication-factor");
                    Optional<Short> replication = rf == null ? Optional.empty() : Optional.of(Short.parseShort(rf));
                    NewTopic nt = new NewTopic(topic, partitions, replication);
                    nt.configs(a.keyValues("config"));
                    admin.createTopics(List.of(nt)).all().get();
                    emit(JSON.createObjectNode().put("topic", topic));
                    return 0;
                }
                case "delete-topic": {
                    String topic = a.required("topic");
                    admin.deleteTopics(List.of(topic)).all().get();
                    emit(JSON.createObjectNode().put("topic", topic));
                    return 0;
                }
                case "list-topics": {
                    Set<String> names = admin.listTopics(new ListTopicsOptions().listInternal(a.flag("internal")))
                            .names().get();
                    ObjectNode o = JSON.createObjectNode();
                    ArrayNode arr = o.putArray("topics");
                    names.stream().sorted().forEach(arr::add);
                    emit(o);
                    return 0;
                }
                case "describe-cluster": {
                    DescribeClusterResult r = admin.describeCluster();
                    ObjectNode o = JSON.createObjectNode();
                    o.put("clusterId", r.clusterId().get());
                    Node controller = r.controller().get();
                    o.put("controller", controller == null ? -1 : controller.id());
                    ArrayNode nodes = o.putArray("nodes");
                    r.nodes().get().stream().sorted(Comparator.comparingInt(Node::id)).forEach(n ->
                            nodes.addObject().put("id", n.id()).put("host", n.host()).put("port", n.port()));
                    emit(o);
                    return 0;
                }
                case "describe-topic": {
                    String topic = a.required("topic");
                    TopicDescription d = describe(admin, topic);
                    ObjectNode o = JSON.createObjectNode();
                    o.put("topic", d.name());
                    o.put("topicId", String.valueOf(d.topicId()));
                    o.put("internal", d.isInternal());
                    ArrayNode parts = o.putArray("partitions");
                    for (TopicPartitionInfo info : d.partitions()) {
                        ObjectNode po = parts.addObject();
                        po.put("partition", info.partition());
                        po.put("leader", info.leader() == null ? -1 : info.leader().id());
                        ArrayNode replicas = po.putArray("replicas");
                        info.replicas().forEach(n -> replicas.add(n.id()));
                        ArrayNode isr = po.putArray("isr");
                        info.isr().forEach(n -> isr.add(n.id()));
                    }
                    ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
                    Config config = admin.describeConfigs(List.of(resource)).all().get().get(resource);
                    ObjectNode configs = o.putObject("configs");
                    config.entries().stream()
                            .filter(e -> e.source() == ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG)
                            .sorted(Comparator.comparing(ConfigEntry::name))
                            .forEach(e -> configs.put(e.name(), e.value()));
                    emit(o);
                    return 0;
                }
                case "offsets": {
                    List<TopicPartition> tps = partitionsOf(admin, a.required("topic"));
                    Map<TopicPartition, ListOffsetsResultInfo> earliest = listOffsets(admin, tps, OffsetSpec.earliest(),
                            IsolationLevel.READ_UNCOMMITTED);
                    Map<TopicPartition, ListOffsetsResultInfo> latest = listOffsets(admin, tps, OffsetSpec.latest(),
                            IsolationLevel.READ_UNCOMMITTED);
                    Map<TopicPartition, ListOffsetsResultInfo> stable = listOffsets(admin, tps, OffsetSpec.latest(),
                            IsolationLevel.READ_COMMITTED);
                    for (TopicPartition tp : tps) {
                        ObjectNode o = JSON.createObjectNode();
                        o.put("partition", tp.partition());
                        o.put("earliest", earliest.get(tp).offset());
                        o.put("latest", latest.get(tp).offset());
                        o.put("lastStable", stable.get(tp).offset());
                        emit(o);
                    }
                    return 0;
                }
                case "delete-records": {
                    TopicPartition tp = new TopicPartition(a.required("topic"), Integer.parseInt(a.required("partition")));
                    long before = Long.parseLong(a.required("offset"));
                    long low = admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(before)))
                            .lowWatermarks().get(tp).get().lowWatermark();
                    emit(JSON.createObjectNode().put("partition", tp.partition()).put("lowWatermark", low));
                    return 0;
                }
                case "reassign": {
                    // Moves a partition to the replicas given (the first one leads): waits until
                    // the reassignment is done, then elects the preferred leader.
                    TopicPartition tp = new TopicPartition(a.required("topic"), Integer.parseInt(a.required("partition")));
                    List<Integer> replicas = new ArrayList<>();
                    for (String r : a.required("replicas").split(",")) {
                        replicas.add(Integer.parseInt(r.trim()));
                    }
                    admin.alterPartitionReassignments(Map.of(tp, Optional.of(new NewPartitionReassignment(replicas)))).all().get();
                    long deadline = System.currentTimeMillis() + a.timeoutMs();
                    while (!admin.listPartitionReassignments(Set.of(tp)).reassignments().get().isEmpty()) {
                        if (System.currentTimeMillis() > deadline) {
                            throw new IllegalStateException("reassignment of " + tp + " not done in time");
                        }
                        Thread.sleep(100);
                    }
                    int leader = -1;
                    while (leader != replicas.get(0)) {
                        if (System.currentTimeMillis() > deadline) {
                            throw new IllegalStateException(tp + " is not led by " + replicas.get(0) + " in time (leader " + leader + ")");
                        }
                        // ElectionNotNeeded (already the leader) comes back as the partition's error; any
                        // other problem shows in the leader read below.
                        admin.electLeaders(ElectionType.PREFERRED, Set.of(tp)).partitions().get();
                        TopicPartitionInfo info = describe(admin, tp.topic()).partitions().get(tp.partition());
                        leader = info.leader() == null ? -1 : info.leader().id();
                        if (leader != replicas.get(0)) {
                            Thread.sleep(100);
                        }
                    }
                    emit(JSON.createObjectNode().put("partition", tp.partition()).put("leader", leader));
                    return 0;
                }
                case "describe-producers": {
                    List<TopicPartition> tps = partitionsOf(admin, a.required("topic"));
                    Map<TopicPartition, PartitionProducerState> states = admin.describeProducers(tps).all().get();
                    for (TopicPartition tp : tps) {
                        ObjectNode o = JSON.createObjectNode();
                        o.put("partition", tp.partition());
                        ArrayNode producers = o.putArray("producers");
                        for (ProducerState s : states.get(tp).activeProducers()) {
                            ObjectNode so = producers.addObject();
                            so.put("producerId", s.producerId());
                            so.put("producerEpoch", s.producerEpoch());
                            so.put("lastSequence", s.lastSequence());
                            so.put("lastTimestamp", s.lastTimestamp());
                            if (s.coordinatorEpoch().isPresent()) {
                                so.put("coordinatorEpoch", s.coordinatorEpoch().getAsInt());
                            } else {
                                so.putNull("coordinatorEpoch");
                            }
                            if (s.currentTransactionStartOffset().isPresent()) {
                                so.put("currentTransactionStartOffset", s.currentTransactionStartOffset().getAsLong());
                            } else {
                                so.putNull("currentTransactionStartOffset");
                            }
                        }
                        emit(o);
                    }
                    return 0;
                }
                case "group-offsets": {
                    String group = a.required("group");
                    Map<TopicPartition, OffsetAndMetadata> offsets =
                            admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
                    List<TopicPartition> tps = new ArrayList<>(offsets.keySet());
                    tps.sort(Comparator.comparing(TopicPartition::topic).thenComparingInt(TopicPartition::partition));
                    for (TopicPartition tp : tps) {
                        OffsetAndMetadata om = offsets.get(tp);
                        if (om == null) {
                            continue;
                        }
                        ObjectNode o = JSON.createObjectNode();
                        o.put("topic", tp.topic());
                        o.put("partition", tp.partition());
                        o.put("offset", om.offset());
                        o.put("metadata", om.metadata());
                        if (om.leaderEpoch().isPresent()) {
                            o.put("leaderEpoch", om.leaderEpoch().get());
                        } else {
                            o.putNull("leaderEpoch");
                        }
                        emit(o);
                    }
                    return 0;
                }
                case "commit-offsets": {
                    String group = a.required("group");
                    TopicPartition tp = new TopicPartition(a.required("topic"), Integer.parseInt(a.required("partition")));
                    OffsetAndMetadata om = new OffsetAndMetadata(Long.parseLong(a.required("offset")), a.get("metadata", ""));
                    admin.alterConsumerGroupOffsets(group, Map.of(tp, om)).all().get();
                    emit(JSON.createObjectNode().put("group", group));
                    return 0;
                }
                default:
                    throw new UsageException("unknown admin subcommand " + sub);
            }
        }
    }

    private static TopicDescription describe(Admin admin, String topic) throws Exception {
        return admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
    }

    private static List<TopicPartition> partitionsOf(Admin admin, String topic) throws Exception {
        return describe(admin, topic).partitions().stream()
                .map(info -> new TopicPartition(topic, info.partition()))
                .sorted(Comparator.comparingInt(TopicPartition::partition))
                .collect(Collectors.toList());
    }

    private static Map<TopicPartition, ListOffsetsResultInfo> listOffsets(Admin admin, List<TopicPartition> tps,
            OffsetSpec spec, IsolationLevel isolation) throws Exception {
        Map<TopicPartition, OffsetSpec> request = new HashMap<>();
        for (TopicPartition tp : tps) {
            request.put(tp, spec);
        }
        return admin.listOffsets(request, new ListOffsetsOptions(isolation)).all().get();
    }

    // ---------------------------------------------------------------------------------------------
    // helpers

    private static Properties common(Args a, String clientId) {
        Properties p = new Properties();
        p.put("bootstrap.servers", a.required("bootstrap"));
        p.put("client.id", clientId);
        return p;
    }

    private static void putIfGiven(Properties p, String key, String value) {
        if (value != null) {
            p.put(key, value);
        }
    }

    private static void emit(ObjectNode o) throws Exception {
        OUT.println(JSON.writeValueAsString(o));
    }

    private static String base64(byte[] bytes) {
        return bytes == null ? null : Base64.getEncoder().encodeToString(bytes);
    }

    private static byte[] bytes(JsonNode n) {
        if (n == null || n.isNull()) {
            return null;
        }
        if (!n.isTextual()) {
            throw new UsageException("bytes must be a base64 string or null, got " + n);
        }
        return Base64.getDecoder().decode(n.asText());
    }

    /** `--name value` options (repeatable) and `--flag` switches. */
    private static final class Args {
        private static final Set<String> FLAGS = Set.of("idempotent", "internal", "hold");
        private final Map<String, List<String>> values = new LinkedHashMap<>();
        private final Set<String> flags = new HashSet<>();

        static Args parse(String[] argv, int from) {
            Args a = new Args();
            for (int i = from; i < argv.length; i++) {
                String arg = argv[i];
                if (!arg.startsWith("--")) {
                    throw new UsageException("unexpected argument " + arg);
                }
                String name = arg.substring(2);
                if (FLAGS.contains(name)) {
                    a.flags.add(name);
                } else if (i + 1 < argv.length) {
                    a.values.computeIfAbsent(name, k -> new ArrayList<>()).add(argv[++i]);
                } else {
                    throw new UsageException("--" + name + " needs a value");
                }
            }
            return a;
        }

        String get(String name) {
            List<String> v = values.get(name);
            return v == null ? null : v.get(v.size() - 1);
        }

        String get(String name, String fallback) {
            String v = get(name);
            return v == null ? fallback : v;
        }

        String required(String name) {
            String v = get(name);
            if (v == null) {
                throw new UsageException("--" + name + " is required");
            }
            return v;
        }

        boolean flag(String name) {
            return flags.contains(name);
        }

        long timeoutMs() {
            return Long.parseLong(get("timeout-ms", "30000"));
        }

        Map<String, String> keyValues(String name) {
            Map<String, String> out = new LinkedHashMap<>();
            for (String kv : values.getOrDefault(name, List.of())) {
                int eq = kv.indexOf('=');
                if (eq <= 0) {
                    throw new UsageException("--" + name + " takes KEY=VALUE, got " + kv);
                }
                out.put(kv.substring(0, eq), kv.substring(eq + 1));
            }
            return out;
        }

        void applyProps(Properties p) {
            p.putAll(keyValues("prop"));
        }
    }
}
