package deploy

import (
	"context"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestKafkaImageSetup runs what the apache/kafka image runs before it
// starts the broker, kafka.docker.KafkaDockerWrapper setup from the broker
// jar, with the kafka service's environment: it writes server.properties
// from the KAFKA_* variables and formats the storage. The broker jars are
// those scripts/kafka.sh fetched; without them (or without java) the test
// is skipped.
//
// It checks that the image accepts the settings (it formats the storage
// only with static controller voters) and that it derives the same server
// properties as the other tests assume ([envToProperty]).
func TestKafkaImageSetup(t *testing.T) {
	v := versions(t)
	cache := os.Getenv("SHAREQ_CACHE_DIR")
	if cache == "" {
		cache = repoPath(".cache")
	}
	libs, err := filepath.Abs(filepath.Join(cache, "kafka-"+v["KAFKA_VERSION"], "libs"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(libs, "kafka_2.13-"+v["KAFKA_VERSION"]+".jar")); err != nil {
		t.Skipf("no Kafka %s jars in %s (scripts/kafka.sh up fetches them)", v["KAFKA_VERSION"], libs)
	}
	java, err := exec.LookPath("java")
	if err != nil {
		t.Skip("no java")
	}
	log4j, err := filepath.Abs(repoPath("scripts/kafka/log4j2.properties"))
	if err != nil {
		t.Fatal(err)
	}

	tmp := t.TempDir()
	dirs := map[string]string{}
	for _, d := range []string{"defaults", "mounted", "final", "data"} {
		dirs[d] = filepath.Join(tmp, d)
		if err := os.Mkdir(dirs[d], 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The image's default server.properties is used only when no KAFKA_*
	// variable is set; an empty one shows if that happened.
	if err := os.WriteFile(filepath.Join(dirs["defaults"], "server.properties"), nil, 0o644); err != nil {
		t.Fatal(err)
	}

	// Only the service's environment (no KAFKA_* of ours), with the data
	// directory moved into tmp.
	svcEnv := compose(t).svc(t, "kafka").env(t, "kafka")
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + tmp}
	if jh := os.Getenv("JAVA_HOME"); jh != "" {
		env = append(env, "JAVA_HOME="+jh)
	}
	for k, val := range svcEnv {
		if k == "KAFKA_LOG_DIRS" {
			val = dirs["data"]
		}
		env = append(env, k+"="+val)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, java, "-XX:TieredStopAtLevel=1", "-Xmx256m",
		"-Dlog4j2.configurationFile="+log4j, "-cp", filepath.Join(libs, "*"),
		"kafka.docker.KafkaDockerWrapper", "setup",
		"--default-configs-dir", dirs["defaults"],
		"--mounted-configs-dir", dirs["mounted"],
		"--final-configs-dir", dirs["final"])
	cmd.Env = env
	cmd.Dir = tmp
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("KafkaDockerWrapper setup with the kafka service's environment: %v\n%s", err, out)
	}

	got := readProperties(t, filepath.Join(dirs["final"], "server.properties"), nil)
	want := brokerSettings(t)
	want["log.dirs"] = dirs["data"]
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if got[k] != want[k] {
			t.Errorf("the image set %s=%q, the tests assume %q", k, got[k], want[k])
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("the image set %s=%s, which the tests do not know of", k, got[k])
		}
	}
	meta, err := os.ReadFile(filepath.Join(dirs["data"], "meta.properties"))
	if err != nil || !strings.Contains(string(meta), "cluster.id="+svcEnv["CLUSTER_ID"]) {
		t.Errorf("the storage was not formatted with CLUSTER_ID %s: %v\n%s\n%s", svcEnv["CLUSTER_ID"], err, meta, out)
	}
}
