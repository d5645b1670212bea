package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shareq/shareq/internal/kafkatest"
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
	get := func(user, pass string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/ops/topics", nil)
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
