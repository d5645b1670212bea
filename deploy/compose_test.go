package deploy

import (
	"maps"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/internal/groupcfg"
)

// Names shared with the packages the stack runs.
const (
	dlqSuffix       = dlq.TopicSuffix
	autoOffsetReset = groupcfg.AutoOffsetReset
	renewAckEnable  = groupcfg.RenewAckEnable
)

func TestComposeParses(t *testing.T) {
	c := compose(t)
	for _, name := range []string{"kafka", "kafka-init", "postgres", "worker", "producer", "prometheus", "grafana", "jaeger"} {
		c.svc(t, name)
	}
}

// TestComposeStrictDecoding shows that a misspelt key fails the test
// rather than being ignored, as compose would refuse it.
func TestComposeStrictDecoding(t *testing.T) {
	_, err := parseCompose([]byte("services:\n  a:\n    image: x\n    depend_on: [b]\n"))
	if err == nil || !strings.Contains(err.Error(), "depend_on") {
		t.Fatalf("parseCompose accepted an unknown key: %v", err)
	}
	if _, err := parseCompose([]byte("services: {}\nextra: 1\n")); err == nil {
		t.Fatal("parseCompose accepted an unknown top-level key")
	}
}

// TestComposeReferences is the part of `docker compose config` that needs
// no Docker: every depends_on target exists (and has a health check when
// one is waited for), every file mounted from the repository exists, every
// build has its Dockerfile, environments hold no YAML booleans, and
// published ports are distinct and on 127.0.0.1 only.
func TestComposeReferences(t *testing.T) {
	c := compose(t)
	published := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(c.Services)) {
		s := c.Services[name]
		if s.Image == "" && s.Build == nil {
			t.Errorf("%s: neither image nor build", name)
		}
		for dep, d := range s.DependsOn {
			target, ok := c.Services[dep]
			switch {
			case !ok:
				t.Errorf("%s: depends_on %q, which is not a service", name, dep)
			case d.Condition == "service_healthy" && target.Healthcheck == nil:
				t.Errorf("%s: waits for %s to be healthy, which has no health check", name, dep)
			case !slices.Contains([]string{"service_started", "service_healthy", "service_completed_successfully"}, d.Condition):
				t.Errorf("%s: depends_on %s: unknown condition %q", name, dep, d.Condition)
			}
		}
		for _, m := range bindMounts(s) {
			if _, err := os.Stat(repoPath(m[0])); err != nil {
				t.Errorf("%s: mounts ./%s, which does not exist", name, m[0])
			}
			if !filepath.IsAbs(m[1]) {
				t.Errorf("%s: mounts ./%s at %q, not an absolute path", name, m[0], m[1])
			}
		}
		if s.Build != nil {
			if _, err := os.Stat(filepath.Join(root, s.Build.Context, s.Build.Dockerfile)); err != nil {
				t.Errorf("%s: build: %v", name, err)
			}
		}
		s.env(t, name) // fails on YAML booleans
		for _, p := range s.Ports {
			parts := strings.Split(p, ":")
			if len(parts) != 3 || parts[0] != "127.0.0.1" {
				t.Errorf("%s: port %q: publish on 127.0.0.1 only (127.0.0.1:HOST:CONTAINER)", name, p)
				continue
			}
			if other, dup := published[parts[1]]; dup {
				t.Errorf("%s and %s both publish host port %s", name, other, parts[1])
			}
			published[parts[1]] = name
		}
	}
}

// TestPostgres checks the postgres service against scripts/versions.env
// and scripts/postgres.sh, and the worker's -database URL against it.
func TestPostgres(t *testing.T) {
	c := compose(t)
	v := versions(t)
	pg := c.svc(t, "postgres")

	// scripts/postgres.sh prefers the same major version.
	m := regexp.MustCompile(`/usr/lib/postgresql/([0-9]+)/bin\)`).FindSubmatch(readFile(t, "scripts/postgres.sh"))
	if m == nil {
		t.Fatal("scripts/postgres.sh: cannot find the preferred PostgreSQL major version")
	}
	if want := "postgres:" + string(m[1]); pg.Image != want {
		t.Errorf("postgres: image %q, want %q (the version scripts/postgres.sh prefers)", pg.Image, want)
	}
	env := pg.env(t, "postgres")
	for k, want := range map[string]string{
		"POSTGRES_DB":       v["PG_DB"],
		"POSTGRES_USER":     v["PG_USER"],
		"POSTGRES_PASSWORD": v["PG_PASSWORD"],
	} {
		if env[k] != want {
			t.Errorf("postgres: %s=%q, want %q (scripts/versions.env)", k, env[k], want)
		}
	}
	if want := "127.0.0.1:" + v["PG_PORT"] + ":5432"; !slices.Contains(pg.Ports, want) {
		t.Errorf("postgres: ports %q, want %q (PG_PORT, so the test scripts' URL reaches it)", pg.Ports, want)
	}
	if pg.Healthcheck == nil || !strings.Contains(strings.Join(pg.Healthcheck.Test, " "), "-U "+v["PG_USER"]+" -d "+v["PG_DB"]) {
		t.Errorf("postgres: the health check should be pg_isready for -U %s -d %s", v["PG_USER"], v["PG_DB"])
	}

	// The schema is the worker's to apply (migrations.Up), not initdb's:
	// initdb would create the tables without recording their versions,
	// and run only the migrations present when the volume was created.
	for _, m := range bindMounts(pg) {
		if strings.HasPrefix(m[1], "/docker-entrypoint-initdb.d") {
			t.Errorf("postgres: mounts %s into initdb; the worker applies migrations.Up at start-up", m[0])
		}
	}

	dsn := commandFlags(t, "worker", c.svc(t, "worker").Command)["database"]
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("worker: -database %q: %v", dsn, err)
	}
	pw, _ := u.User.Password()
	if u.Scheme != "postgres" || u.User.Username() != v["PG_USER"] || pw != v["PG_PASSWORD"] ||
		u.Host != "postgres:5432" || u.Path != "/"+v["PG_DB"] {
		t.Errorf("worker: -database %q, want postgres://%s:%s@postgres:5432/%s", dsn, v["PG_USER"], v["PG_PASSWORD"], v["PG_DB"])
	}
}

// bashSyntax runs bash -n on a script of the repository.
func bashSyntax(t *testing.T, rel string) {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Logf("no bash: not checking the syntax of %s", rel)
		return
	}
	if out, err := exec.Command(bash, "-n", repoPath(rel)).CombinedOutput(); err != nil {
		t.Errorf("bash -n %s: %v\n%s", rel, err, out)
	}
}
