package deploy

import (
	"encoding/base64"
	"maps"
	"net"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/shareq/shareq/worker"
)

// The apache/kafka image writes server.properties from the environment:
// every KAFKA_* variable except these, renamed by [envToProperty]
// (kafka.docker.KafkaDockerWrapper in the broker jar, checked on 4.3.1).
var imageNonProperties = []string{
	"KAFKA_VERSION", "KAFKA_HEAP_OPTS", "KAFKA_LOG4J_OPTS", "KAFKA_OPTS",
	"KAFKA_JMX_OPTS", "KAFKA_JVM_PERFORMANCE_OPTS", "KAFKA_GC_LOG_OPTS",
	"KAFKA_LOG4J_ROOT_LOGLEVEL", "KAFKA_LOG4J_LOGGERS", "KAFKA_TOOLS_LOG4J_LOGLEVEL",
	"KAFKA_JMX_HOSTNAME",
}

// envToProperty is the image's renaming: drop KAFKA_, lower-case, "_" to
// ".", then "..." to "-" and ".." to "_" (so ___ is a dash and __ an
// underscore).
func envToProperty(env string) string {
	k := strings.ToLower(strings.TrimPrefix(env, "KAFKA_"))
	k = strings.ReplaceAll(k, "_", ".")
	k = strings.ReplaceAll(k, "...", "-")
	return strings.ReplaceAll(k, "..", "_")
}

// intended lists the broker settings in which docker-compose.yml differs
// from the test broker's scripts/kafka/server.properties on purpose: the
// value compose must have, and why. Every other setting of
// server.properties must appear in compose with the same value.
var intended = map[string]struct{ value, why string }{
	// Listeners: the test broker listens on 127.0.0.1 only. In compose
	// other containers reach the broker as kafka:19092 (the test broker's
	// port), and the host as localhost:9092 through a second listener.
	"listeners":                      {"PLAINTEXT://:19092,PLAINTEXT_HOST://:9092,CONTROLLER://:19093", "listen on the container's interfaces, plus a listener for the host"},
	"advertised.listeners":           {"PLAINTEXT://kafka:19092,PLAINTEXT_HOST://localhost:9092", "containers connect to kafka:19092, the host to localhost:9092"},
	"listener.security.protocol.map": {"PLAINTEXT:PLAINTEXT,PLAINTEXT_HOST:PLAINTEXT,CONTROLLER:PLAINTEXT", "the host listener needs a protocol too"},
	"log.dirs":                       {"/var/lib/kafka/data", "the image's data directory (a volume)"},
	// Share-group timers: the rule is that compose keeps Kafka's defaults,
	// which a production cluster has, so the example locks, renews and
	// fences as it will there; the test broker shortens them so expiry and
	// fencing take seconds. The minimums are the same in both.
	"group.share.record.lock.duration.ms": {"30000", "Kafka's default, as in production; tests use 5 s so lock expiry is quick"},
	"group.share.session.timeout.ms":      {"45000", "Kafka's default, as in production; tests use 3 s to fence dead members quickly"},
	"group.share.heartbeat.interval.ms":   {"5000", "Kafka's default, as in production; tests use 500 ms with their 3 s session"},
}

// composeOnly lists the settings docker-compose.yml has and the test
// broker does not, with the value compose must have and why; omitted lists
// the test broker's settings that compose leaves out, and why.
var (
	composeOnly = map[string]struct{ value, why string }{
		"controller.quorum.voters": {"1@kafka:19093", "the image formats its storage without --standalone, which a dynamic quorum (controller.quorum.bootstrap.servers) needs; it fails unless static voters are set"},
	}
	omitted = map[string]string{
		"controller.quorum.bootstrap.servers": "replaced by controller.quorum.voters (see composeOnly)",
	}
)

// brokerSettings returns the kafka service's server properties, as the
// image derives them from its environment.
func brokerSettings(t *testing.T) map[string]string {
	t.Helper()
	env := compose(t).svc(t, "kafka").env(t, "kafka")
	props := map[string]string{}
	for k, v := range env {
		if !strings.HasPrefix(k, "KAFKA_") || slices.Contains(imageNonProperties, k) {
			continue
		}
		props[envToProperty(k)] = v
	}
	return props
}

// testBrokerSettings returns scripts/kafka/server.properties filled in as
// scripts/kafka.sh does.
func testBrokerSettings(t *testing.T) map[string]string {
	t.Helper()
	v := versions(t)
	return readProperties(t, "scripts/kafka/server.properties", map[string]string{
		"@KAFKA_PORT@":            v["KAFKA_PORT"],
		"@KAFKA_CONTROLLER_PORT@": v["KAFKA_CONTROLLER_PORT"],
		"@DATA_DIR@":              "<data>",
	})
}

func TestKafkaImageVersion(t *testing.T) {
	c := compose(t)
	want := "apache/kafka:" + versions(t)["KAFKA_VERSION"]
	for _, name := range []string{"kafka", "kafka-init"} {
		if got := c.svc(t, name).Image; got != want {
			t.Errorf("docker-compose.yml: %s: image %q, want %q (KAFKA_VERSION in scripts/versions.env)", name, got, want)
		}
	}
}

// TestKafkaSettingsMatchTestBroker holds the compose broker to the test
// broker's settings, except for the differences listed in intended,
// composeOnly and omitted.
func TestKafkaSettingsMatchTestBroker(t *testing.T) {
	got := brokerSettings(t)
	want := testBrokerSettings(t)
	for _, k := range slices.Sorted(maps.Keys(want)) {
		g, inCompose := got[k]
		if why, ok := omitted[k]; ok {
			if inCompose {
				t.Errorf("%s is set in docker-compose.yml (%s) but listed as omitted (%s)", k, g, why)
			}
			continue
		}
		if !inCompose {
			t.Errorf("docker-compose.yml: kafka: %s (env %s) is missing; scripts/kafka/server.properties sets it to %s. Add it, or list it in omitted with the reason", k, propertyToEnv(k), want[k])
			continue
		}
		if d, ok := intended[k]; ok {
			if g != d.value {
				t.Errorf("docker-compose.yml: kafka: %s = %s, the intended difference says %s (%s); update one of them", k, g, d.value, d.why)
			}
			if want[k] == d.value {
				t.Errorf("%s is the same in compose and scripts/kafka/server.properties (%s): remove it from intended", k, g)
			}
			continue
		}
		if g != want[k] {
			t.Errorf("docker-compose.yml: kafka: %s (env %s) = %s, scripts/kafka/server.properties has %s; make them equal, or list the difference in intended with the reason", k, propertyToEnv(k), g, want[k])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; ok {
			continue
		}
		d, ok := composeOnly[k]
		switch {
		case !ok:
			t.Errorf("docker-compose.yml: kafka: %s (env %s) is not in scripts/kafka/server.properties; add it there, or list it in composeOnly with the reason", k, propertyToEnv(k))
		case got[k] != d.value:
			t.Errorf("docker-compose.yml: kafka: %s = %s, composeOnly says %s (%s)", k, got[k], d.value, d.why)
		}
	}
	for k := range intended {
		if _, ok := want[k]; !ok {
			t.Errorf("intended lists %s, which scripts/kafka/server.properties does not set", k)
		}
	}
}

func propertyToEnv(prop string) string {
	k := strings.ReplaceAll(prop, "_", "__")
	k = strings.ReplaceAll(k, "-", "___")
	return "KAFKA_" + strings.ToUpper(strings.ReplaceAll(k, ".", "_"))
}

func TestEnvToProperty(t *testing.T) {
	for env, prop := range map[string]string{
		"KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR": "share.coordinator.state.topic.min.isr",
		"KAFKA_LISTENER_NAME_CLIENT__X":               "listener.name.client_x",
		"KAFKA_SOME___DASHED":                         "some-dashed",
	} {
		if got := envToProperty(env); got != prop {
			t.Errorf("envToProperty(%s) = %s, want %s", env, got, prop)
		}
		if got := propertyToEnv(prop); got != env {
			t.Errorf("propertyToEnv(%s) = %s, want %s", prop, got, env)
		}
	}
}

// TestKafkaSingleNode checks what a one-broker cluster needs whatever the
// test broker says: every internal topic with one replica, and KRaft in
// combined mode.
func TestKafkaSingleNode(t *testing.T) {
	got := brokerSettings(t)
	for k, want := range map[string]string{
		"process.roles":                                    "broker,controller",
		"default.replication.factor":                       "1",
		"offsets.topic.replication.factor":                 "1",
		"transaction.state.log.replication.factor":         "1",
		"transaction.state.log.min.isr":                    "1",
		"share.coordinator.state.topic.replication.factor": "1",
		"share.coordinator.state.topic.min.isr":            "1",
	} {
		if got[k] != want {
			t.Errorf("docker-compose.yml: kafka: %s (env %s) = %q, want %s on a single broker", k, propertyToEnv(k), got[k], want)
		}
	}
	env := compose(t).svc(t, "kafka").env(t, "kafka")
	id, err := base64.RawURLEncoding.DecodeString(env["CLUSTER_ID"])
	if err != nil || len(id) != 16 || strings.HasPrefix(env["CLUSTER_ID"], "-") {
		t.Errorf("docker-compose.yml: kafka: CLUSTER_ID %q is not a Kafka cluster ID (16 bytes, URL-safe base64 without padding, not starting with -)", env["CLUSTER_ID"])
	}
}

// listenerMap parses "NAME://host:port,…".
func listenerMap(t *testing.T, what, s string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, l := range strings.Split(s, ",") {
		name, addr, ok := strings.Cut(l, "://")
		if !ok {
			t.Fatalf("%s: cannot read listener %q", what, l)
		}
		out[name] = addr
	}
	return out
}

// TestKafkaListeners checks that the listeners, the advertised addresses,
// the controller quorum, the published port, the health check and the
// clients' bootstrap addresses agree with each other and with the ports in
// scripts/versions.env.
func TestKafkaListeners(t *testing.T) {
	c := compose(t)
	v := versions(t)
	p := brokerSettings(t)
	listeners := listenerMap(t, "listeners", p["listeners"])
	advertised := listenerMap(t, "advertised.listeners", p["advertised.listeners"])
	protocols := map[string]string{}
	for _, e := range strings.Split(p["listener.security.protocol.map"], ",") {
		name, proto, _ := strings.Cut(e, ":")
		protocols[name] = proto
	}
	port := func(addr string) string {
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatalf("listener address %q: %v", addr, err)
		}
		return port
	}
	for name := range listeners {
		if protocols[name] == "" {
			t.Errorf("listener %s has no entry in listener.security.protocol.map", name)
		}
	}
	ctrl := p["controller.listener.names"]
	if _, ok := listeners[ctrl]; !ok {
		t.Errorf("controller listener %s is not in listeners", ctrl)
	}
	if _, ok := advertised[ctrl]; ok {
		t.Errorf("the controller listener %s must not be advertised to clients", ctrl)
	}
	for name, addr := range advertised {
		if l, ok := listeners[name]; !ok || port(l) != port(addr) {
			t.Errorf("advertised listener %s://%s has no listener on its port in %s", name, addr, p["listeners"])
		}
	}

	// Containers: the inter-broker listener, advertised as the service
	// name on the test broker's port.
	internal := advertised[p["inter.broker.listener.name"]]
	if want := net.JoinHostPort("kafka", v["KAFKA_PORT"]); internal != want {
		t.Errorf("advertised %s listener %q, want %q (service name, KAFKA_PORT)", p["inter.broker.listener.name"], internal, want)
	}
	if got, want := port(listeners[ctrl]), v["KAFKA_CONTROLLER_PORT"]; got != want {
		t.Errorf("controller listener port %s, want KAFKA_CONTROLLER_PORT %s", got, want)
	}
	if want := "1@" + net.JoinHostPort("kafka", port(listeners[ctrl])); p["controller.quorum.voters"] != want || p["node.id"] != "1" {
		t.Errorf("controller.quorum.voters %q with node.id %s, want %q: this node at its controller listener", p["controller.quorum.voters"], p["node.id"], want)
	}

	// The host: one advertised listener on localhost, its port published
	// on 127.0.0.1 under the same number.
	kafka := c.svc(t, "kafka")
	var hostListener string
	for name, addr := range advertised {
		if strings.HasPrefix(addr, "localhost:") {
			hostListener = name
		}
	}
	if hostListener == "" {
		t.Errorf("no advertised listener for the host (localhost:9092) in %s", p["advertised.listeners"])
	} else {
		hp := port(advertised[hostListener])
		if want := "127.0.0.1:" + hp + ":" + port(listeners[hostListener]); !slices.Contains(kafka.Ports, want) {
			t.Errorf("docker-compose.yml: kafka: ports %q, want %q for the host listener %s", kafka.Ports, want, hostListener)
		}
	}

	// Who connects where.
	if kafka.Healthcheck == nil || !strings.Contains(strings.Join(kafka.Healthcheck.Test, " "), "localhost:"+v["KAFKA_PORT"]) {
		t.Errorf("docker-compose.yml: kafka: the health check should ask the broker on localhost:%s", v["KAFKA_PORT"])
	}
	if got := c.svc(t, "kafka-init").env(t, "kafka-init")["BOOTSTRAP_SERVER"]; got != internal {
		t.Errorf("docker-compose.yml: kafka-init: BOOTSTRAP_SERVER %q, want %q", got, internal)
	}
	for _, name := range []string{"worker", "producer"} {
		if got := commandFlags(t, name, c.svc(t, name).Command)["brokers"]; got != internal {
			t.Errorf("docker-compose.yml: %s: -brokers=%q, want %q", name, got, internal)
		}
	}
}

// TestKafkaInit checks deploy/kafka/init.sh against the example: its topic
// (with the example's partition count), the dlq package's DLQ topic, and
// the share group's configs.
func TestKafkaInit(t *testing.T) {
	const rel = "deploy/kafka/init.sh"
	script := string(readFile(t, rel))
	vars := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^readonly ([A-Z_]+)=(\S+)$`).FindAllStringSubmatch(script, -1) {
		vars[m[1]] = m[2]
	}
	ex := exampleConsts(t)
	for k, want := range map[string]string{
		"TOPIC":            ex["topic"],
		"PARTITIONS":       ex["partitions"],
		"DLQ_TOPIC":        ex["topic"] + dlqSuffix,
		"GROUP":            ex["group"],
		"BROKER_DLQ_TOPIC": worker.BrokerDLQTopic(ex["group"]),
	} {
		if vars[k] != want {
			t.Errorf("%s: readonly %s=%q, want %q (the example's constants, dlq.TopicSuffix)", rel, k, vars[k], want)
		}
	}
	for _, want := range []string{
		`create_topic "$TOPIC" "$PARTITIONS"`,
		`create_topic "$DLQ_TOPIC" `,
		`create_topic "$BROKER_DLQ_TOPIC" "$DLQ_PARTITIONS" --config errors.deadletterqueue.group.enable=true`,
		`--entity-type groups --entity-name "$GROUP" --alter`,
		"--add-config " + autoOffsetReset + "=earliest," + renewAckEnable + "=true",
	} {
		if !strings.Contains(script, want) {
			t.Errorf("%s does not contain %q", rel, want)
		}
	}

	// Compose mounts it and runs it with bash, after the broker is healthy.
	c := compose(t)
	init := c.svc(t, "kafka-init")
	var mountedAt string
	for _, m := range bindMounts(init) {
		if m[0] == rel {
			mountedAt = m[1]
		}
	}
	if mountedAt == "" || !slices.Equal(init.Entrypoint, []string{"bash", mountedAt}) {
		t.Errorf("docker-compose.yml: kafka-init: want %s mounted and run as its entrypoint [bash <path>]; volumes %q, entrypoint %q", rel, init.Volumes, init.Entrypoint)
	}
	if d := init.DependsOn["kafka"]; d.Condition != "service_healthy" {
		t.Errorf("docker-compose.yml: kafka-init: depends_on kafka condition %q, want service_healthy", d.Condition)
	}
	if init.Restart != "no" {
		t.Errorf(`docker-compose.yml: kafka-init: restart %q, want "no" (a one-shot job)`, init.Restart)
	}
	bashSyntax(t, rel)
}
