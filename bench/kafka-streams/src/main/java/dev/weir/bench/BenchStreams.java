package dev.weir.bench;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.kstream.WindowedSerdes;

/**
 * Kafka Streams running the benchmark workloads of Weir's harness
 * (bench/harness/topologies.rs builds the same five topologies with Weir).
 *
 * <p>Arguments are {@code key=value}: workload (passthrough, stateless, count,
 * window, join), guarantee (at_least_once, exactly_once_v2), threads,
 * commit_ms, input, output, table (the join's table topic), app_id,
 * bootstrap, state_dir. Any {@code prop.<name>=<value>} sets the Kafka
 * Streams (or client) property {@code <name>} as given: the restore
 * benchmark sets {@code group.instance.id} (a restarted instance takes its
 * partitions back without waiting for the session timeout) and
 * {@code enable.transactional.statestores} (KIP-892) this way. Runs until
 * SIGTERM, then closes (commit, leave the group).
 */
public final class BenchStreams {
    /** An input record's JSON value; the field set matches the Rust harness. */
    public static final class Event {
        public long id;
        public String user;
        public long amount;
        public String kind;
        public String pad;
    }

    /** The stateless workload's output: the event plus a derived field. */
    public static final class Enriched {
        public long id;
        public String user;
        public long amount;
        public String kind;
        public String pad;
        public long cents;
    }

    /** A table row of the join workload. */
    public static final class Profile {
        public String user;
        public String tier;
        public String region;
    }

    /** The join workload's output: the event and its key's profile. */
    public static final class Joined {
        public long id;
        public String user;
        public long amount;
        public String kind;
        public String pad;
        public String tier;
        public String region;
    }

    private static final ObjectMapper JSON = new ObjectMapper();

    private static final Serde<Event> EVENT = Serdes.serdeFrom(
            (topic, e) -> write(e),
            (topic, bytes) -> {
                try {
                    return JSON.readValue(bytes, Event.class);
                } catch (IOException ex) {
                    throw new RuntimeException(ex);
                }
            });

    private static final Serde<Enriched> ENRICHED = Serdes.serdeFrom(
            (topic, e) -> write(e),
            (topic, bytes) -> {
                try {
                    return JSON.readValue(bytes, Enriched.class);
                } catch (IOException ex) {
                    throw new RuntimeException(ex);
                }
            });

    private static final Serde<Profile> PROFILE = Serdes.serdeFrom(
            (topic, e) -> write(e),
            (topic, bytes) -> {
                try {
                    return JSON.readValue(bytes, Profile.class);
                } catch (IOException ex) {
                    throw new RuntimeException(ex);
                }
            });

    private static final Serde<Joined> JOINED = Serdes.serdeFrom(
            (topic, e) -> write(e),
            (topic, bytes) -> {
                try {
                    return JSON.readValue(bytes, Joined.class);
                } catch (IOException ex) {
                    throw new RuntimeException(ex);
                }
            });

    private static byte[] write(Object o) {
        try {
            return JSON.writeValueAsBytes(o);
        } catch (IOException ex) {
            throw new RuntimeException(ex);
        }
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> a = new HashMap<>();
        for (String arg : args) {
            int eq = arg.indexOf('=');
            if (eq < 0) {
                throw new IllegalArgumentException("expected key=value, got " + arg);
            }
            a.put(arg.substring(0, eq), arg.substring(eq + 1));
        }
        String workload = a.get("workload");
        String input = a.get("input");
        String output = a.get("output");

        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, a.get("app_id"));
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, a.get("bootstrap"));
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, a.get("guarantee"));
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, a.get("threads"));
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, a.get("commit_ms"));
        p.put(StreamsConfig.STATE_DIR_CONFIG, a.get("state_dir"));
        for (Map.Entry<String, String> e : a.entrySet()) {
            if (e.getKey().startsWith("prop.")) {
                p.put(e.getKey().substring("prop.".length()), e.getValue());
            }
        }

        StreamsBuilder b = new StreamsBuilder();
        switch (workload) {
            case "passthrough" -> b.stream(input, Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()))
                    .to(output, Produced.with(Serdes.ByteArray(), Serdes.ByteArray()));
            case "stateless" -> b.stream(input, Consumed.with(Serdes.String(), EVENT))
                    .filter((k, e) -> e.amount < 50)
                    .mapValues(e -> {
                        Enriched out = new Enriched();
                        out.id = e.id;
                        out.user = e.user;
                        out.amount = e.amount;
                        out.kind = e.kind;
                        out.pad = e.pad;
                        out.cents = e.amount * 100;
                        return out;
                    })
                    .to(output, Produced.with(Serdes.String(), ENRICHED));
            case "count" -> b.stream(input, Consumed.with(Serdes.String(), Serdes.ByteArray()))
                    .groupByKey(Grouped.with(Serdes.String(), Serdes.ByteArray()))
                    .count(Materialized.as("counts"))
                    .toStream()
                    .to(output, Produced.with(Serdes.String(), Serdes.Long()));
            case "window" -> b.stream(input, Consumed.with(Serdes.String(), Serdes.ByteArray()))
                    .groupByKey(Grouped.with(Serdes.String(), Serdes.ByteArray()))
                    .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofMinutes(1), Duration.ofSeconds(10)))
                    .count(Materialized.as("window-counts"))
                    .toStream()
                    .to(output, Produced.with(
                            WindowedSerdes.timeWindowedSerdeFrom(String.class, 60_000L), Serdes.Long()));
            case "join" -> {
                KTable<String, Profile> profiles = b.table(a.get("table"),
                        Consumed.with(Serdes.String(), PROFILE), Materialized.as("profiles"));
                b.stream(input, Consumed.with(Serdes.String(), EVENT))
                        .join(profiles, (e, pr) -> {
                            Joined out = new Joined();
                            out.id = e.id;
                            out.user = e.user;
                            out.amount = e.amount;
                            out.kind = e.kind;
                            out.pad = e.pad;
                            out.tier = pr.tier;
                            out.region = pr.region;
                            return out;
                        })
                        .to(output, Produced.with(Serdes.String(), JOINED));
            }
            default -> throw new IllegalArgumentException("unknown workload " + workload);
        }

        KafkaStreams streams = new KafkaStreams(b.build(), p);
        CountDownLatch done = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(30));
            done.countDown();
        }));
        streams.setUncaughtExceptionHandler(e -> {
            e.printStackTrace();
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler
                    .StreamThreadExceptionResponse.SHUTDOWN_APPLICATION;
        });
        streams.start();
        done.await();
    }
}
