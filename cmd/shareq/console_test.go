package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/shareq/shareq/console"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/internal/logbuf"
)

// freeAddr returns a 127.0.0.1 address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestConsoleCommand serves the console with basic auth (the password
// from a file named by the environment) and checks it refuses a request
// without it or with a wrong password and serves one with it.
func TestConsoleCommand(t *testing.T) {
	c := kafkatest.New(t)
	topic := c.Topic(t, 1)
	file := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(file, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(consolePasswordEnv, "")
	t.Setenv(consolePasswordFile, file)
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut strings.Builder
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"console", "-brokers", strings.Join(c.Seeds, ","), "-listen", addr, "-prefix", "/ops", "-auth-user", "admin"}, &out, &errOut)
	}()
	getPath := func(path, user, pass string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/ops"+path, nil)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				if time.Now().After(deadline) {
					t.Fatalf("console not serving: %v", err)
				}
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return resp.StatusCode, string(b)
		}
	}
	get := func(user, pass string) (int, string) { return getPath("/topics", user, pass) }
	if code, _ := get("", ""); code != http.StatusUnauthorized {
		t.Errorf("no auth: %d", code)
	}
	if code, _ := get("admin", "wrong"); code != http.StatusUnauthorized {
		t.Errorf("wrong password: %d", code)
	}
	code, body := get("admin", "s3cret")
	if code != http.StatusOK || !strings.Contains(body, topic) || !strings.Contains(body, `href="/ops/static/style.css"`) || !strings.Contains(body, "read-only") {
		t.Errorf("with auth: %d\n%s", code, body)
	}
	if strings.Contains(body, "s3cret") {
		t.Errorf("the password is in the page")
	}
	// The command runs the charts' sampler.
	if code, body := getPath("/groups/none/charts", "admin", "s3cret"); code != http.StatusOK || !strings.Contains(body, "the console samples every 10s") {
		t.Errorf("group charts: %d\n%s", code, body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("console: %v (%s)", err, errOut.String())
	}
	if want := "shareq console on http://" + addr + "/ops/ (read-only"; !strings.Contains(out.String(), want) {
		t.Errorf("output %q, want %q", out.String(), want)
	}
}

func TestConsoleCommandNeedsPassword(t *testing.T) {
	t.Setenv(consolePasswordEnv, "")
	t.Setenv(consolePasswordFile, "")
	_, _, err := cli(t, "console", "-brokers", "127.0.0.1:1", "-auth-user", "admin")
	if err == nil || !strings.Contains(err.Error(), "no flag for it") {
		t.Errorf("console -auth-user without a password: %v", err)
	}
}

// -actions without -auth-user is refused on an address other hosts can
// reach, before connecting to Kafka, unless the operator opts out; on
// the loopback it starts as before.
func TestConsoleActionsOffLoopbackNeedAuth(t *testing.T) {
	t.Setenv(consolePasswordEnv, "")
	t.Setenv(consolePasswordFile, "")
	for _, addr := range []string{"0.0.0.0:8080", ":8080", "[::]:8080", "192.0.2.1:8080"} {
		_, _, err := cli(t, "console", "-brokers", "127.0.0.1:1", "-actions", "-listen", addr)
		if err == nil || !strings.Contains(err.Error(), "needs authentication: give -auth-user NAME") || !strings.Contains(err.Error(), "-actions-without-auth-on-network serves") {
			t.Errorf("-actions -listen %s without auth: %v", addr, err)
		}
	}
	_, _, err := cli(t, "console", "-brokers", "127.0.0.1:1", "-actions-without-auth-on-network")
	if err == nil || !strings.Contains(err.Error(), "is for -actions without -auth-user") {
		t.Errorf("opt-out without -actions: %v", err)
	}
	for _, tc := range []struct {
		c    consoleConfig
		want bool // allowed
	}{
		{consoleConfig{listen: "127.0.0.1:8080", actions: true}, true},
		{consoleConfig{listen: "127.0.0.2:8080", actions: true}, true},
		{consoleConfig{listen: "[::1]:8080", actions: true}, true},
		{consoleConfig{listen: "localhost:8080", actions: true}, true},
		{consoleConfig{listen: "0.0.0.0:8080"}, true}, // read-only
		{consoleConfig{listen: "0.0.0.0:8080", actions: true, anyClient: true}, true},
		{consoleConfig{listen: "0.0.0.0:8080", actions: true, auth: console.BasicAuth("a", "b")}, true},
		{consoleConfig{listen: "0.0.0.0:8080", actions: true}, false},
		{consoleConfig{listen: "[::ffff:10.0.0.1]:8080", actions: true}, false},
	} {
		if err := tc.c.check(); (err == nil) != tc.want {
			t.Errorf("check %+v: %v, want allowed %v", tc.c, err, tc.want)
		}
	}
}

// startConsole runs "shareq console" with args on every interface at a
// free port and returns its address on the loopback (tests talk to
// 127.0.0.0/8 only: a client on the network is the console package's
// tests', which set the request's peer), its stderr, and a func that
// stops it and returns its error.
func startConsole(t *testing.T, args ...string) (string, *logbuf.Buffer, func() error) {
	t.Helper()
	_, port, _ := net.SplitHostPort(freeAddr(t))
	addr := net.JoinHostPort("127.0.0.1", port)
	ctx, cancel := context.WithCancel(context.Background())
	var out strings.Builder
	errOut := new(logbuf.Buffer)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"console", "-listen", "0.0.0.0:" + port}, args...), &out, errOut)
	}()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		conn, err := net.Dial("tcp", addr)
		if err == nil {
			conn.Close()
			break
		}
		select {
		case err := <-done:
			cancel()
			t.Fatalf("console stopped: %v\n%s", err, errOut)
		default:
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("console not serving: %v", err)
		}
	}
	return addr, errOut, func() error {
		cancel()
		return <-done
	}
}

// With -auth-user, -actions serves on every interface: a request without
// the password, or with a wrong one, gets a 401 that says nothing more
// (from the loopback too: the password is asked of every client); with
// it, an enqueue is done and logged with the user's name.
func TestConsoleActionsWithAuthOnNetwork(t *testing.T) {
	c := kafkatest.New(t)
	topic := c.Topic(t, 1)
	t.Setenv(consolePasswordFile, "")
	t.Setenv(consolePasswordEnv, "s3cret-token")
	addr, errOut, stop := startConsole(t, "-brokers", strings.Join(c.Seeds, ","), "-actions", "-auth-user", "admin")
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar, Timeout: 30 * time.Second}
	do := func(method, path, user, pass string, form url.Values) (int, string) {
		req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(form.Encode()))
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	form := url.Values{"topic": {topic}, "id": {"cli-1"}, "payload": {"{}"}}
	for _, pass := range []string{"", "wrong", "s3cret-toke", "s3cret-token "} {
		user := "admin"
		if pass == "" {
			user = ""
		}
		if code, body := do(http.MethodPost, "/enqueue", user, pass, form); code != http.StatusUnauthorized || body != "authentication required\n" {
			t.Errorf("POST with password %q: %d %q, want 401 with no detail", pass, code, body)
		}
	}
	code, page := do(http.MethodGet, "/enqueue", "admin", "s3cret-token", nil)
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)
	if code != http.StatusOK || m == nil {
		t.Fatalf("enqueue form with auth: %d\n%s", code, page)
	}
	form.Set("csrf", m[1])
	if code, body := do(http.MethodPost, "/enqueue", "admin", "s3cret-token", form); code != http.StatusOK || !strings.Contains(body, "cli-1") {
		t.Errorf("enqueue with auth: %d\n%s", code, body)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	logs := errOut.String()
	want := `level=INFO msg="console: action" who=admin action=enqueue outcome=done topic=` + topic + ` job_id=cli-1`
	if n := strings.Count(logs, `msg="console: action"`); n != 1 || !strings.Contains(logs, want) {
		t.Errorf("%d action lines on stderr, want one with %q:\n%s", n, want, logs)
	}
	if strings.Contains(logs, "s3cret") {
		t.Errorf("the password is in the log:\n%s", logs)
	}
}

// -actions-without-auth-on-network starts on every interface and serves
// the actions without a password; what the console serves to a client on
// the network then is console's TestActionsWithoutAuthLoopbackOnly.
func TestConsoleActionsWithoutAuthOnNetwork(t *testing.T) {
	c := kafkatest.New(t)
	topic := c.Topic(t, 1)
	t.Setenv(consolePasswordFile, "")
	t.Setenv(consolePasswordEnv, "")
	addr, errOut, stop := startConsole(t, "-brokers", strings.Join(c.Seeds, ","), "-actions", "-actions-without-auth-on-network")
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar, Timeout: 30 * time.Second}
	resp, err := hc.Get("http://" + addr + "/enqueue")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindSubmatch(page)
	if resp.StatusCode != http.StatusOK || m == nil {
		t.Fatalf("enqueue form from the network with the opt-out: %d\n%s", resp.StatusCode, page)
	}
	resp, err = hc.PostForm("http://"+addr+"/enqueue", url.Values{"csrf": {string(m[1])}, "topic": {topic}, "id": {"anon-1"}, "payload": {"{}"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("enqueue from the network with the opt-out: %d", resp.StatusCode)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if want := `who="anonymous (loopback)"`; !strings.Contains(errOut.String(), want) || !strings.Contains(errOut.String(), "action=enqueue outcome=done") {
		t.Errorf("stderr lacks %q and a done enqueue:\n%s", want, errOut)
	}
}
