package dev.weir.bench;

import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.common.TopicPartition;

/**
 * Prints which member of a consumer group owns which partition, one line per
 * partition: {@code <topic> <partition> <client id>}. The rebalance
 * benchmark (bench/harness/rebalance.rs) calls it before and after a
 * scale-out to tell moved partitions from unmoved ones, for Weir's group
 * (the consumer protocol, KIP-848) and Kafka Streams' (classic) alike.
 *
 * <p>Arguments: bootstrap servers, group id.
 */
public final class DescribeGroup {
    private DescribeGroup() {}

    public static void main(String[] args) throws Exception {
        if (args.length != 2) {
            System.err.println("usage: DescribeGroup <bootstrap> <group>");
            System.exit(2);
        }
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        try (Admin admin = Admin.create(props)) {
            Map<String, ConsumerGroupDescription> groups =
                    admin.describeConsumerGroups(List.of(args[1])).all().get();
            for (MemberDescription m : groups.get(args[1]).members()) {
                for (TopicPartition tp : m.assignment().topicPartitions()) {
                    System.out.println(tp.topic() + " " + tp.partition() + " " + m.clientId());
                }
            }
        }
    }
}
