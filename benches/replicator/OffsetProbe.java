/*
 * Samples the end offsets (high watermarks) of the same topics on the source and the destination
 * cluster, for the replicator benchmark (benches/replicator/run.sh). Run as a single-file program:
 *
 *   java -cp 'target/kafka/4.4.0/libs/*' OffsetProbe.java SOURCE DEST INTERVAL_MS OUT TOPIC...
 *
 * Every INTERVAL_MS it lists the latest offsets of every partition of TOPIC... on the source, then on
 * the destination (one ListOffsets round each, read_uncommitted), and appends two lines to OUT:
 *
 *   <epoch ms when the answer came> S <topic>:<end,end,...> <topic>:<...>
 *   <epoch ms when the answer came> D <topic>:<end,end,...> ...
 *
 * A topic missing on a cluster (not created yet) shows as "-". Runs until killed. Lag is computed
 * from these lines by analyze.py; the probe does no arithmetic, so it stays cheap and neutral.
 */
import java.io.FileWriter;
import java.io.PrintWriter;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.TopicPartition;

public class OffsetProbe {
    public static void main(String[] args) throws Exception {
        String source = args[0], dest = args[1];
        long interval = Long.parseLong(args[2]);
        String out = args[3];
        List<String> topics = new ArrayList<>();
        for (int i = 4; i < args.length; i++) topics.add(args[i]);
        try (Admin s = admin(source); Admin d = admin(dest);
             PrintWriter w = new PrintWriter(new FileWriter(out, true))) {
            Map<String, Integer> sourcePartitions = partitions(s, topics);
            Map<String, Integer> destPartitions = new HashMap<>();
            while (true) {
                long next = System.currentTimeMillis() + interval;
                w.println(sample(s, "S", topics, sourcePartitions));
                if (destPartitions.size() < topics.size()) {
                    try { destPartitions = partitions(d, topics); } catch (Exception e) { /* not created yet */ }
                }
                w.println(sample(d, "D", topics, destPartitions));
                w.flush();
                long sleep = next - System.currentTimeMillis();
                if (sleep > 0) Thread.sleep(sleep);
            }
        }
    }

    static Admin admin(String bootstrap) {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "5000");
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "5000");
        return Admin.create(p);
    }

    static Map<String, Integer> partitions(Admin admin, List<String> topics) throws Exception {
        Map<String, Integer> out = new HashMap<>();
        for (String t : topics) {
            try {
                TopicDescription desc = admin.describeTopics(List.of(t)).allTopicNames().get(5, TimeUnit.SECONDS).get(t);
                out.put(t, desc.partitions().size());
            } catch (Exception e) { /* missing: retried by the caller */ }
        }
        return out;
    }

    static String sample(Admin admin, String side, List<String> topics, Map<String, Integer> parts) {
        Map<TopicPartition, OffsetSpec> request = new HashMap<>();
        for (String t : topics) {
            Integer n = parts.get(t);
            if (n == null) continue;
            for (int p = 0; p < n; p++) request.put(new TopicPartition(t, p), OffsetSpec.latest());
        }
        StringBuilder line = new StringBuilder();
        Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> ends = Map.of();
        if (!request.isEmpty()) {
            try {
                ends = admin.listOffsets(request).all().get(5, TimeUnit.SECONDS);
            } catch (Exception e) {
                ends = Map.of();
            }
        }
        line.append(System.currentTimeMillis()).append(' ').append(side);
        for (String t : topics) {
            line.append(' ').append(t).append(':');
            Integer n = parts.get(t);
            if (n == null || ends.isEmpty()) { line.append('-'); continue; }
            for (int p = 0; p < n; p++) {
                if (p > 0) line.append(',');
                ListOffsetsResult.ListOffsetsResultInfo info = ends.get(new TopicPartition(t, p));
                line.append(info == null ? -1 : info.offset());
            }
        }
        return line.toString();
    }
}
