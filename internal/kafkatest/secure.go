package kafkatest

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/shareq/shareq/internal/groupcfg"
)

// EnvSecure names the environment variable that points the security tests
// at the secure broker of scripts/kafka-secure.sh: the path of the
// secure.env file that `scripts/kafka-secure.sh env` prints. Unset, tests
// that call [Secure] skip (kfake has no TLS, SASL or authorizer).
const EnvSecure = "SHAREQ_TEST_SECURE"

// SecureCluster is the secure broker of scripts/kafka-secure.sh: a
// PLAINTEXT listener whose clients are super users (for the tests' admin
// steps), a SASL_SSL listener (SCRAM-SHA-512) and an mTLS listener, behind
// the StandardAuthorizer with allow.everyone.if.no.acl.found=false.
type SecureCluster struct {
	// AdminAddr, SASLAddr and MTLSAddr are the listeners' host:port.
	AdminAddr, SASLAddr, MTLSAddr string
	// CAFile is the PEM CA that signed the broker's and the mTLS client's
	// certificates; CertFile and KeyFile are the mTLS client's.
	CAFile, CertFile, KeyFile string
	// OtherCAFile is a CA the broker's certificate is not signed by;
	// OtherCertFile and OtherKeyFile a client certificate it signed,
	// which the broker does not trust.
	OtherCAFile, OtherCertFile, OtherKeyFile string
	// User and Password are the SCRAM-SHA-512 credentials; MTLSUser is
	// the name in the mTLS client's certificate. Their principals are
	// "User:"+User and "User:"+MTLSUser.
	User, Password, MTLSUser string
	// OpsUser and OpsPassword are a second SCRAM-SHA-512 user, for the
	// clients beside a worker (producers, lag collector, CLI) with ACLs
	// of their own.
	OpsUser, OpsPassword string
	// GroupDeliveryLimitConfig and BrokerDLQ say what the broker's
	// version has, as Cluster's fields of the same names (false on
	// kfake, which has neither here).
	GroupDeliveryLimitConfig, BrokerDLQ bool

	adm  *kadm.Client
	cl   *kgo.Client
	fake bool
}

// Secure returns the secure broker named by [EnvSecure], or skips t when
// it is unset.
func Secure(t testing.TB) *SecureCluster {
	t.Helper()
	path := os.Getenv(EnvSecure)
	if path == "" {
		t.Skipf("%s is unset: the secure-broker tests run against scripts/kafka-secure.sh (scripts/test.sh starts it)", EnvSecure)
	}
	env, err := readEnvFile(path)
	if err != nil {
		t.Fatalf("%s: %v", EnvSecure, err)
	}
	s := &SecureCluster{
		AdminAddr: env["SHAREQ_SECURE_ADMIN"], SASLAddr: env["SHAREQ_SECURE_SASL"], MTLSAddr: env["SHAREQ_SECURE_MTLS"],
		CAFile: env["SHAREQ_SECURE_CA"], CertFile: env["SHAREQ_SECURE_CERT"], KeyFile: env["SHAREQ_SECURE_KEY"],
		OtherCAFile: env["SHAREQ_SECURE_OTHER_CA"], OtherCertFile: env["SHAREQ_SECURE_OTHER_CERT"], OtherKeyFile: env["SHAREQ_SECURE_OTHER_KEY"],
		User: env["SHAREQ_SECURE_USER"], Password: env["SHAREQ_SECURE_PASSWORD"], MTLSUser: env["SHAREQ_SECURE_MTLS_USER"],
		OpsUser: env["SHAREQ_SECURE_OPS_USER"], OpsPassword: env["SHAREQ_SECURE_OPS_PASSWORD"],
	}
	for k, v := range map[string]string{"admin": s.AdminAddr, "sasl": s.SASLAddr, "mtls": s.MTLSAddr, "ca": s.CAFile, "user": s.User, "password": s.Password, "mtls user": s.MTLSUser, "ops user": s.OpsUser, "ops password": s.OpsPassword} {
		if v == "" {
			t.Fatalf("%s: %s: no %s (rerun scripts/kafka-secure.sh up)", EnvSecure, path, k)
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.AdminAddr))
	if err != nil {
		t.Fatalf("secure broker admin client: %v", err)
	}
	t.Cleanup(cl.Close)
	s.cl, s.adm = cl, kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	known, err := groupcfg.Describe(ctx, cl, Name(t, "g-features"))
	if err != nil {
		t.Fatalf("secure broker: describe group configs: %v", err)
	}
	_, s.GroupDeliveryLimitConfig = known[groupcfg.DeliveryCountLimit]
	_, s.BrokerDLQ = known[groupcfg.DLQTopicName]
	return s
}

// SecureFake returns an in-process kfake cluster standing in for the
// secure broker where kfake can: SCRAM-SHA-512 users (User, OpsUser, and
// a super user for the admin client) and ACLs enforced, without TLS (the
// fields for TLS and mTLS are empty; tests of those need [Secure]).
func SecureFake(t testing.TB) *SecureCluster {
	t.Helper()
	const mech = "SCRAM-SHA-512"
	s := &SecureCluster{User: "shareq", Password: randomSecret(), OpsUser: "shareq-ops", OpsPassword: randomSecret(), fake: true}
	adminPass := randomSecret()
	fake, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.BrokerConfigs(fakeBrokerConfigs()),
		kfake.EnableSASL(), kfake.EnableACLs(),
		kfake.Superuser(mech, "admin", adminPass),
		kfake.User(mech, s.User, s.Password), kfake.User(mech, s.OpsUser, s.OpsPassword))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(fake.Close)
	addr := fake.ListenAddrs()[0]
	s.AdminAddr, s.SASLAddr = addr, addr
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.SASL(scram.Auth{User: "admin", Pass: adminPass}.AsSha512Mechanism()))
	if err != nil {
		t.Fatalf("kfake admin client: %v", err)
	}
	t.Cleanup(cl.Close)
	s.cl, s.adm = cl, kadm.NewClient(cl)
	return s
}

// fakeBrokerConfigs are the broker configs of New's kfake clusters.
func fakeBrokerConfigs() map[string]string {
	return map[string]string{
		"group.share.record.lock.duration.ms": strconv.Itoa(int(FakeLockDuration / time.Millisecond)),
		"share.record.lock.sweep.interval.ms": "100",
		"group.share.heartbeat.interval.ms":   "100",
		"group.share.session.timeout.ms":      "3000",
	}
}

func randomSecret() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Fake reports whether s is the kfake stand-in of [SecureFake].
func (s *SecureCluster) Fake() bool { return s.fake }

func readEnvFile(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if ok && !strings.HasPrefix(k, "#") {
			env[k] = v
		}
	}
	return env, sc.Err()
}

// Principal is the SCRAM user's principal, "User:<name>".
func (s *SecureCluster) Principal() string { return "User:" + s.User }

// OpsPrincipal is the second SCRAM user's principal.
func (s *SecureCluster) OpsPrincipal() string { return "User:" + s.OpsUser }

// OpsSCRAMOpts are the client options for the second SCRAM user on the
// SASL_SSL listener.
func (s *SecureCluster) OpsSCRAMOpts(t testing.TB) []kgo.Opt {
	t.Helper()
	if s.fake {
		return s.scram(nil, s.OpsUser, s.OpsPassword)
	}
	return s.scram(s.TLSConfig(t), s.OpsUser, s.OpsPassword)
}

// MTLSPrincipal is the mTLS client's principal, "User:<CN>".
func (s *SecureCluster) MTLSPrincipal() string { return "User:" + s.MTLSUser }

// Admin returns a super-user admin client on the PLAINTEXT listener.
func (s *SecureCluster) Admin() *kadm.Client { return s.adm }

// AdminClient returns the super-user client behind [SecureCluster.Admin].
func (s *SecureCluster) AdminClient() *kgo.Client { return s.cl }

// TLSConfig returns a client TLS config that trusts the test CA, with no
// client certificate.
func (s *SecureCluster) TLSConfig(t testing.TB) *tls.Config {
	t.Helper()
	return &tls.Config{RootCAs: certPool(t, s.CAFile), MinVersion: tls.VersionTLS12}
}

// MTLSConfig returns TLSConfig plus the mTLS client's certificate.
func (s *SecureCluster) MTLSConfig(t testing.TB) *tls.Config {
	t.Helper()
	c := s.TLSConfig(t)
	cert, err := tls.LoadX509KeyPair(s.CertFile, s.KeyFile)
	if err != nil {
		t.Fatalf("mTLS client certificate: %v", err)
	}
	c.Certificates = []tls.Certificate{cert}
	return c
}

func certPool(t testing.TB, file string) *x509.CertPool {
	t.Helper()
	pem, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("CA: %v", err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(pem) {
		t.Fatalf("CA %s: no certificate in it", file)
	}
	return p
}

// SCRAMOpts are the client options for the SCRAM user on the SASL_SSL
// listener, seed broker included.
func (s *SecureCluster) SCRAMOpts(t testing.TB) []kgo.Opt {
	t.Helper()
	if s.fake {
		return s.scram(nil, s.User, s.Password)
	}
	return s.SCRAMOptsWith(t, s.TLSConfig(t), s.Password)
}

// SCRAMOptsWith is SCRAMOpts with another TLS config or password.
// On [SecureFake] there is no TLS and tc is ignored.
func (s *SecureCluster) SCRAMOptsWith(t testing.TB, tc *tls.Config, password string) []kgo.Opt {
	t.Helper()
	return s.scram(tc, s.User, password)
}

func (s *SecureCluster) scram(tc *tls.Config, user, password string) []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(s.SASLAddr),
		kgo.SASL(scram.Auth{User: user, Pass: password}.AsSha512Mechanism()),
	}
	if !s.fake {
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	return opts
}

// MTLSOpts are the client options for the mTLS client on its listener.
func (s *SecureCluster) MTLSOpts(t testing.TB) []kgo.Opt {
	t.Helper()
	return []kgo.Opt{kgo.SeedBrokers(s.MTLSAddr), kgo.DialTLSConfig(s.MTLSConfig(t))}
}

// Client returns a client made of opts alone (give it the seeds and
// security options: SCRAMOpts, MTLSOpts), closed when t ends.
func (s *SecureCluster) Client(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// Consume reads the first n records of topic with the super-user client,
// failing t if they are not all there within 60 s.
func (s *SecureCluster) Consume(t testing.TB, topic string, n int) []*kgo.Record {
	t.Helper()
	return consume(t, s.Client(t, append(s.cl.Opts(), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...), topic, n)
}

// Topic creates a topic with a unique name, deleted when t ends.
func (s *SecureCluster) Topic(t testing.TB, partitions int32) string {
	t.Helper()
	name := Name(t, "t")
	s.CreateTopic(t, name, partitions, nil)
	return name
}

// CreateTopic creates the named topic with configs, deleted when t ends,
// and waits until the broker serves it (as [Cluster.CreateTopicWith]).
func (s *SecureCluster) CreateTopic(t testing.TB, name string, partitions int32, configs map[string]*string) {
	t.Helper()
	createTopic(t, s.adm, name, partitions, configs)
}

// Group returns a unique share group name with share.auto.offset.reset
// set to earliest (by the admin client), deleted when t ends.
func (s *SecureCluster) Group(t testing.TB) string {
	t.Helper()
	g := Name(t, "g")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := groupcfg.Set(ctx, s.cl, g, map[string]string{groupcfg.AutoOffsetReset: "earliest"}); err != nil {
		t.Fatalf("group %s: %v", g, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		_, _ = s.adm.DeleteGroup(ctx, g)
	})
	return g
}

// ACL is one allow rule for a principal: an operation on a resource.
type ACL struct {
	// Resource is "topic", "group" or "cluster".
	Resource string
	// Name is the topic or group name ("" for the cluster).
	Name string
	// Op is the operation, as kafka-acls.sh spells it: Read, Write,
	// Describe, DescribeConfigs, AlterConfigs.
	Op string
}

func (a ACL) String() string {
	if a.Resource == "cluster" {
		return fmt.Sprintf("%s on the cluster", a.Op)
	}
	return fmt.Sprintf("%s on %s %s", a.Op, a.Resource, a.Name)
}

// Allow creates allow ACLs for principal and waits until the broker
// describes them (so it enforces them); they are deleted when t ends.
func (s *SecureCluster) Allow(t testing.TB, principal string, acls ...ACL) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, a := range acls {
		b := s.builder(t, principal, a)
		res, err := s.adm.CreateACLs(ctx, b)
		if err == nil {
			for _, r := range res {
				if r.Err != nil {
					err = r.Err
				}
			}
		}
		if err != nil {
			t.Fatalf("create ACL %v for %s: %v", a, principal, err)
		}
		// The authorizer applies a new ACL from the metadata log a moment
		// after CreateACLs answers; DescribeACLs answers from it, so once
		// it lists the ACL the (single) broker enforces it.
		for {
			res, err := s.adm.DescribeACLs(ctx, s.builder(t, principal, a))
			if err == nil && len(res) == 1 && res[0].Err == nil && len(res[0].Described) > 0 {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("ACL %v for %s: created, but the broker does not describe it (%v)", a, principal, err)
			case <-time.After(20 * time.Millisecond):
			}
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, _ = s.adm.DeleteACLs(ctx, s.builder(t, principal, a))
		})
	}
}

func (s *SecureCluster) builder(t testing.TB, principal string, a ACL) *kadm.ACLBuilder {
	t.Helper()
	b := kadm.NewACLs().Allow(principal).AllowHosts("*").ResourcePatternType(kadm.ACLPatternLiteral)
	switch a.Resource {
	case "topic":
		b = b.Topics(a.Name)
	case "group":
		b = b.Groups(a.Name)
	case "cluster":
		b = b.Clusters()
	default:
		t.Fatalf("ACL %v: unknown resource", a)
	}
	op, err := kmsg.ParseACLOperation(a.Op)
	if err != nil {
		t.Fatalf("ACL %v: %v", a, err)
	}
	return b.Operations(op)
}
